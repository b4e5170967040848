"""The `%cudadiag validate` report as a section (text and HTML), and the object the command
returns: a Validation that displays as that report."""

from __future__ import annotations

from cudadiag.comparison.view import text_table
from cudadiag.shortlist import cut_list
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section
from cudadiag.validate.run import Validation

INDICES_SHOWN = 8
DETAIL_SHOWN = 90
"""Characters of a step's detail in the table (the notes above it give the full line)."""


def validation_section(report: Validation) -> Section:
    """Return the report as a section: the verdict, rejected samples, swallowed exceptions,
    then one table row per step."""
    scope = "every step" if report.every_step else "the steps that matter"
    lines = [report.verdict]
    for r in report.rejected:
        where = f"step {r['step']}" if r["step"] is not None else "outside the loop"
        indices = (f"dataset indices {cut_list(r['dataset_indices'], INDICES_SHOWN)}"
                   if r["dataset_indices"] else f"batch rows {cut_list(r['rows'], INDICES_SHOWN)}")
        lines.append(f"rejected by a guard at {where}: {indices} ({r['rule']}; values "
                     f"{cut_list(r['values'], INDICES_SHOWN)})")
    for s in report.swallowed:
        where = f"In[{s['cell']}] line {s['line']}" if s["cell"] is not None else "a cell"
        step = f" at step {s['step']}" if s["step"] is not None else ""
        lines.append(f"caught and swallowed{step}: {s['type']} ×{s['count']} in {where}: "
                     f"{s['message']}")
    table = [["step", "why chosen", "outcome", "samples", "dataset indices", "detail"]]
    several_runs = any(o.run for o in report.steps)
    for o in report.steps:
        step = f"{o.run}:{o.step}" if several_runs else str(o.step)
        table.append([step, ", ".join(o.why) or ("every step" if report.every_step else ""),
                      o.outcome, "" if o.size is None else str(o.size),
                      _indices(o.indices), _clip(o.detail)])
    title = f"Validate In[{report.cell}] over {scope}" + (
        f" of watch {report.watch!r}" if report.watch else "")
    return Section("validate", title, lines, table=table)


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_SHOWN else text[:DETAIL_SHOWN - 1] + "…"


def _indices(indices: list[int] | None) -> str:
    if not indices:
        return ""
    if indices == list(range(indices[0], indices[0] + len(indices))) and len(indices) > 2:
        return f"{indices[0]}-{indices[-1]}"
    return cut_list(indices, INDICES_SHOWN)


def render_validation_text(report: Validation) -> str:
    """Return the report as plain text: title, verdict and notes, aligned step table."""
    part = validation_section(report)
    lines = [part.title, *[f"  {line}" for line in part.lines], ""]
    return "\n".join([*lines, *text_table(part.table or [])])


def render_validation_html(report: Validation) -> str:
    """Return the report as one self-contained HTML block (panel section and fallback)."""
    return section_block("cudadiag-validate", {"cell": report.cell}, validation_section(report))


class ValidationView(Displayed, Validation):
    """A Validation that shows itself as its report."""

    text = render_validation_text
    html = render_validation_html
