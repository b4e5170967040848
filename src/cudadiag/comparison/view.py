"""The %cuda_compare table as a report section (text and HTML), and the object the magic and
`cudadiag.compare()` return: a Comparison that displays as that table in a notebook, in
nbconvert output and in a terminal."""

from __future__ import annotations

from cudadiag.comparison.run import (
    FAILED,
    NOT_APPLICABLE,
    REFERENCE,
    Comparison,
    OutputDiff,
    Row,
)
from cudadiag.comparison.variants import VARIANTS
from cudadiag.i18n import N_, _, localize
from cudadiag.i18n.width import display_width, pad_to_width
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section, table_columns

HEADER = [N_("variant"), N_("outcome"), N_("differences"), N_("allclose"), N_("wall"),
          N_("what it changed")]
"""The table's headings (shown with `_`)."""
NOTHING = N_("nothing")


def comparison_section(comparison: Comparison) -> Section:
    """Return the comparison as a report section: the warnings, then one row per run
    (none for a variant that changed nothing and ended as the reference did)."""
    headings = [_(h) for h in HEADER]
    header = [*headings[:2], (_("differences (from {baseline})").format(
        baseline=comparison.baseline) if comparison.baseline else
        _("differences (from no baseline)")), *headings[3:]]
    rows = comparison.rows
    reference = next((r for r in rows if r.variant == REFERENCE), None)
    # rows that changed nothing and ended as the reference did: the run's warning names them
    same = [r for r in rows if reference is not None and r is not reference
            and _changed(r) == NOTHING and outcome_text(r) == outcome_text(reference)]
    table = [header, *(_cells(r) for r in rows if r not in same)]
    return Section("compare", _("Compare In[{cell}]: one change at a time").format(
        cell=comparison.cell), [localize(w) for w in comparison.warnings], table=table)


def outcome_text(row: Row) -> str:
    """Return a row's outcome in a few words: `ok`, `failed: FAMILY at OP`,
    `not applicable: WHY`, `timed out`."""
    if row.outcome == FAILED:
        return _("failed: {failure}").format(failure=row.failure)
    if row.outcome == NOT_APPLICABLE:
        return _("not applicable: {why}").format(why=localize(row.reason))
    return _(row.outcome)


def _cells(row: Row) -> list[str]:
    diffs = "; ".join(_diff_text(d) for d in row.diffs) or ("—" if row.ok else "")
    closes = [d for d in row.diffs if d.allclose is not None]
    if not closes:
        allclose = ""
    elif all(d.allclose for d in closes):
        allclose = _("yes")
    else:
        allclose = _("no: {names}").format(names=", ".join(d.name for d in closes
                                                           if not d.allclose))
    wall = f"{row.wall_s * 1000:.0f} ms" if row.wall_s is not None else ""
    return [row.variant, outcome_text(row), diffs, allclose, wall, _(_changed(row))]


def _changed(row: Row) -> str:
    """What the row changed: its counts (in the current language), the flag it set, or
    NOTHING (the English message, compared before it is shown)."""
    changed = ", ".join(f"{_(what)} ×{n}" for what, n in row.changes.items())
    if row.variant != REFERENCE and row.outcome != NOT_APPLICABLE and not changed:
        changed = row.change if VARIANTS[row.variant].sets_flag else NOTHING
    return changed


def _diff_text(diff: OutputDiff) -> str:
    if diff.max_abs is None:
        return f"{diff.name}: {diff.note or _('empty')}"
    text = f"{diff.name}: abs {diff.max_abs:.3g}, rel {_rel(diff.max_rel)}"
    return f"{text} ({diff.note})" if diff.note else text


def _rel(value: float | None) -> str:
    return _("n/a") if value is None else f"{value:.3g}"


def render_comparison_text(comparison: Comparison) -> str:
    """Return the comparison as plain text: the title, aligned columns, the warnings."""
    part = comparison_section(comparison)
    lines = [part.title, "", *text_table(part.table or []), ""]
    lines += [f"- {warning}" for warning in part.lines]
    return "\n".join(lines)


def text_table(table: list[list[str]]) -> list[str]:
    """Return a table (header first) as aligned plain-text lines, a rule under the header:
    columns empty in every row left out, figures right-aligned."""
    if not table:
        return []
    kept, figures = table_columns(table)
    rows = [[row[n] for n in kept] for row in table]
    right = [n in figures for n in kept]
    widths = [max(display_width(row[i]) for row in rows) for i in range(len(kept))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(_pad(c, w, right=r and bool(number))
                               for c, w, r in zip(row, widths, right, strict=True)).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _pad(text: str, width: int, right: bool) -> str:
    if not right:
        return pad_to_width(text, width)
    return " " * (width - display_width(text)) + text


def render_comparison_html(comparison: Comparison) -> str:
    """Return the comparison as one self-contained HTML block (the panel section and the
    static fallback)."""
    return section_block("cudadiag-compare", {"cell": comparison.cell},
                         comparison_section(comparison))


class ComparisonView(Displayed, Comparison):
    """A Comparison that shows itself as the comparison table."""

    text = render_comparison_text
    html = render_comparison_html
