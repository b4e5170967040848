"""The `%cudadiag validate` report as a section (text and HTML), and the object the command
returns: a Validation that displays as that report."""

from __future__ import annotations

from cudadiag.comparison.view import text_table
from cudadiag.i18n import N_, _
from cudadiag.i18n.width import cut_to_width, display_width
from cudadiag.shortlist import cut_list
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section
from cudadiag.validate.run import Validation

INDICES_SHOWN = 8
DETAIL_SHOWN = 90
"""Columns of a step's detail in the table (the notes above it give the full line)."""
STEP_HEADER = [N_("step"), N_("why chosen"), N_("outcome"), N_("samples"),
               N_("dataset indices"), N_("detail")]
"""The step table's headings (shown with `_`)."""


def validation_section(report: Validation) -> Section:
    """Return the report as a section: the verdict, rejected samples, swallowed exceptions,
    then one table row per step."""
    lines = [report.verdict]
    for r in report.rejected:
        where = (_("step {step}").format(step=r["step"]) if r["step"] is not None
                 else _("outside the loop"))
        indices = (_("dataset indices {indices}").format(
            indices=cut_list(r["dataset_indices"], INDICES_SHOWN)) if r["dataset_indices"]
            else _("batch rows {rows}").format(rows=cut_list(r["rows"], INDICES_SHOWN)))
        lines.append(_("rejected by a guard at {where}: {indices} ({rule}; values "
                       "{values})").format(where=where, indices=indices, rule=r["rule"],
                                           values=cut_list(r["values"], INDICES_SHOWN)))
    for s in report.swallowed:
        where = (_("In[{cell}] line {line}").format(cell=s["cell"], line=s["line"])
                 if s["cell"] is not None else _("a cell"))
        fields = {"step": s["step"], "type": s["type"], "count": s["count"], "where": where,
                  "message": s["message"]}
        lines.append((_("caught and swallowed at step {step}: {type} ×{count} in {where}: "
                        "{message}") if s["step"] is not None else
                      _("caught and swallowed: {type} ×{count} in {where}: {message}")).format(
            **fields))
    table = [[_(h) for h in STEP_HEADER]]
    several_runs = any(o.run for o in report.steps)
    for o in report.steps:
        step = f"{o.run}:{o.step}" if several_runs else str(o.step)
        table.append([step, ", ".join(_(w) for w in o.why)
                      or (_("every step") if report.every_step else ""),
                      _(o.outcome), "" if o.size is None else str(o.size),
                      _indices(o.indices), _clip(o.detail)])
    return Section("validate", _title(report), lines, table=table)


def _title(report: Validation) -> str:
    fields = {"cell": report.cell, "watch": report.watch}
    if report.every_step:
        return (_("Validate In[{cell}] over every step of watch {watch!r}") if report.watch
                else _("Validate In[{cell}] over every step")).format(**fields)
    return (_("Validate In[{cell}] over the steps that matter of watch {watch!r}")
            if report.watch else _("Validate In[{cell}] over the steps that matter")).format(
        **fields)


def _clip(text: str) -> str:
    """`text` cut to DETAIL_SHOWN columns (a wide character takes two)."""
    if display_width(text) <= DETAIL_SHOWN:
        return text
    return cut_to_width(text, DETAIL_SHOWN - 1) + "…"


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
