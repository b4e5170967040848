"""The fix check (`%cuda_compare --before ID`) as a section (text and HTML), and the object
the magic returns: a FixCheck that displays as that section."""

from __future__ import annotations

from typing import Any

from cudadiag.comparison.view import outcome_text, text_table
from cudadiag.fixcheck.run import FixCheck
from cudadiag.i18n import N_, _
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section

OUTPUT_HEADER = [N_("output"), N_("shape"), "dtype", "min", "max", "NaN", "Inf"]
"""The outputs table's headings (shown with `_`; dtype, min, max, NaN and Inf as in code)."""


def fixcheck_section(check: FixCheck) -> Section:
    """Return the check as a section: the verdict, both runs, then the new outputs."""
    fields = {"old": check.old_cell, "new": check.new_cell, "step": check.step,
              "before": outcome_text(check.before), "now": outcome_text(check.after)}
    if check.step is not None:
        runs = [_("before: In[{old}] as recorded, step {step}: {before}").format(**fields),
                _("now: In[{new}], step {step}: {now}").format(**fields)]
    else:
        runs = [_("before: In[{old}] as recorded: {before}").format(**fields),
                _("now: In[{new}]: {now}").format(**fields)]
    lines = [check.verdict, *runs, *check.notes]
    if check.after.ok and not check.outputs:
        lines.append(_("the new code assigned no tensor or number to check: look at its "
                       "output yourself, not only at the absence of an exception"))
    table = None
    if check.outputs:
        table = [[_(h) for h in OUTPUT_HEADER],
                 *([o["path"], str(o["shape"]), o["dtype"], _num(o["min"]), _num(o["max"]),
                    _num(o["nan"]), _num(o["inf"])] for o in check.outputs)]
    return Section("fixcheck", _("Fix check for incident {id}").format(id=check.incident),
                   lines, table=table)


def _num(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_fixcheck_text(check: FixCheck) -> str:
    """Return the check as plain text."""
    part = fixcheck_section(check)
    lines = [part.title, *[f"  {line}" for line in part.lines]]
    if part.table:
        lines += ["", *text_table(part.table)]
    return "\n".join(lines)


def render_fixcheck_html(check: FixCheck) -> str:
    """Return the check as one self-contained HTML block."""
    return section_block("cudadiag-fixcheck", {"incident": check.incident}, fixcheck_section(check))


class FixCheckView(Displayed, FixCheck):
    """A FixCheck that shows itself as its section."""

    text = render_fixcheck_text
    html = render_fixcheck_html
