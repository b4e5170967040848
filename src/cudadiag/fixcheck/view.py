"""The fix check (`%cuda_compare --before ID`) as a section (text and HTML), and the object
the magic returns: a FixCheck that displays as that section."""

from __future__ import annotations

from typing import Any

from cudadiag.comparison.view import outcome_text, text_table
from cudadiag.fixcheck.run import FixCheck
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section

OUTPUT_HEADER = ["output", "shape", "dtype", "min", "max", "NaN", "Inf"]


def fixcheck_section(check: FixCheck) -> Section:
    """Return the check as a section: the verdict, both runs, then the new outputs."""
    step = f", step {check.step}" if check.step is not None else ""
    lines = [check.verdict,
             f"before: In[{check.old_cell}] as recorded{step}: {outcome_text(check.before)}",
             f"now: In[{check.new_cell}]{step}: {outcome_text(check.after)}", *check.notes]
    if check.after.ok and not check.outputs:
        lines.append("the new code assigned no tensor or number to check: look at its output "
                     "yourself, not only at the absence of an exception")
    table = None
    if check.outputs:
        table = [OUTPUT_HEADER, *([o["path"], str(o["shape"]), o["dtype"], _num(o["min"]),
                                   _num(o["max"]), _num(o["nan"]), _num(o["inf"])]
                                  for o in check.outputs)]
    return Section("fixcheck", f"Fix check for incident {check.incident}", lines, table=table)


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
