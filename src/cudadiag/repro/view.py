"""What an export prints when it ends: the verdict, what the minimizer kept, the cost."""

from __future__ import annotations

from typing import Any


def render_export(minimized: Any, exported: Any) -> str:
    """Return the text shown after an export: the verdict, what was kept, the cost."""
    verdict = {True: "yes", False: "no", None: "not checked"}[exported.reproduces]
    kept = ", ".join(f"In[{n}]" for n in minimized.cells)
    kind = "script" if str(exported.path).endswith(".py") else "notebook"
    lines = [
        f"\ncudadiag repro {kind}: {exported.path}",
        f"  reproduces: {verdict}" + (f" (observed: {exported.observed.ename}, "
                                      f"{exported.observed.family})"
                                      if exported.observed.ename else ""),
        f"  kept {len(minimized.cells)} of {minimized.original_cells} cells ({kept}), "
        f"{minimized.statements} of {minimized.original_statements} statements",
        f"  signature: {minimized.signature.family}, {minimized.signature.error_type}"
        + (f", {minimized.signature.op}" if minimized.signature.op else "")
        + (f", value {minimized.signature.value}" if minimized.signature.value is not None
           else ""),
        f"  {minimized.trials} trials in {minimized.wall_s:.1f} s"
        + (f"; {minimized.stopped_text()}" if minimized.stopped else ""),
    ]
    lines += [f"  {note}" for note in minimized.notes()]
    if exported.side_files:
        folder = exported.path.parent
        names = {f.relative_to(folder).parts[0] for f in exported.side_files}
        lines.append(f"  beside it: {', '.join(sorted(names))}")
    return "\n".join(lines)


def render_rank_export(export: Any) -> str:
    """Return the text shown after a multi-rank job's export (repro/rankjob.py)."""
    verdict = {True: "yes", False: "no", None: "not checked"}[export.reproduces]
    seen = export.observed
    observed = ", ".join(filter(None, [seen.note, seen.ename, seen.family]))
    return "\n".join([
        f"\ncudadiag repro script: {export.path}",
        f"  reproduces: {verdict}" + (f" (observed: {observed})" if observed else ""),
        f"  the job as {export.ranks} ranks under torchrun on this machine: torchrun "
        f"{' '.join(export.command)}",
        "  not minimized: the ranks of a job need each other",
        f"  beside it: {export.program.name}",
    ])
