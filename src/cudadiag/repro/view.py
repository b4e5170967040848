"""What an export prints when it ends: the verdict, what the minimizer kept, the cost."""

from __future__ import annotations

from typing import Any

from cudadiag.i18n import N_, _, localize

_VERDICTS = {True: N_("reproduces: yes"), False: N_("reproduces: no"),
             None: N_("reproduces: not checked")}
"""The verdict's line, by whether the repro's check saw the same failure."""


def render_export(minimized: Any, exported: Any) -> str:
    """Return the text shown after an export: the verdict, what was kept, the cost."""
    kept = ", ".join(f"In[{n}]" for n in minimized.cells)
    signature = minimized.signature
    facts = ", ".join([str(signature.family), str(signature.error_type),
                       *([signature.op] if signature.op else []),
                       *([_("value {value}").format(value=signature.value)]
                         if signature.value is not None else [])])
    lines = [
        "\n" + (_("cudadiag repro script: {path}") if str(exported.path).endswith(".py")
                else _("cudadiag repro notebook: {path}")).format(path=exported.path),
        "  " + _verdict_line(exported.reproduces, exported.observed.ename and ", ".join(
            [exported.observed.ename, str(exported.observed.family)])),
        "  " + _("kept {cells} of {original_cells} cells ({kept}), {statements} of "
                 "{original_statements} statements").format(
            cells=len(minimized.cells), original_cells=minimized.original_cells, kept=kept,
            statements=minimized.statements,
            original_statements=minimized.original_statements),
        "  " + _("signature: {facts}").format(facts=facts),
        "  " + _trials_line(minimized),
    ]
    lines += [f"  {note}" for note in minimized.notes()]
    if exported.side_files:
        folder = exported.path.parent
        names = {f.relative_to(folder).parts[0] for f in exported.side_files}
        lines.append("  " + _("beside it: {names}").format(names=", ".join(sorted(names))))
    return "\n".join(lines)


def _verdict_line(reproduces: bool | None, observed: str | None) -> str:
    """`reproduces: yes` (or no, not checked), with what the check observed when it says."""
    verdict = _(_VERDICTS[reproduces])
    if not observed:
        return verdict
    return _("{verdict} (observed: {observed})").format(verdict=verdict, observed=observed)


def _trials_line(minimized: Any) -> str:
    """How many trials the minimizer ran and for how long, and why it stopped early."""
    spent = _("{trials} trials in {seconds} s").format(trials=minimized.trials,
                                                       seconds=f"{minimized.wall_s:.1f}")
    if not minimized.stopped:
        return spent
    return _("{spent}; {stopped}").format(spent=spent, stopped=minimized.stopped_text())


def render_rank_export(export: Any) -> str:
    """Return the text shown after a multi-rank job's export (repro/rankjob.py)."""
    seen = export.observed
    observed = ", ".join(filter(None, [localize(seen.note) if seen.note else None, seen.ename,
                                       seen.family]))
    return "\n".join([
        "\n" + _("cudadiag repro script: {path}").format(path=export.path),
        "  " + _verdict_line(export.reproduces, observed),
        "  " + _("the job as {ranks} ranks under torchrun on this machine: torchrun "
                 "{command}").format(ranks=export.ranks, command=" ".join(export.command)),
        "  " + _("not minimized: the ranks of a job need each other"),
        "  " + _("beside it: {name}").format(name=export.program.name),
    ])
