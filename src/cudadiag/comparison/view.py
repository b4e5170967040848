"""The %cuda_compare table as a report section (text and HTML), and the object the magic and
`cudadiag.compare()` return: a Comparison that displays as that table in a notebook, in
nbconvert output and in a terminal."""

from __future__ import annotations

from cudadiag.comparison.run import FAILED, NOT_APPLICABLE, Comparison, OutputDiff, Row
from cudadiag.comparison.variants import VARIANTS
from cudadiag.ui.displayed import Displayed, section_block
from cudadiag.ui.render import Section, table_columns

HEADER = ["variant", "outcome", "differences", "allclose", "wall", "what it changed"]


def comparison_section(comparison: Comparison) -> Section:
    """Return the comparison as a report section: the warnings, then one row per run
    (none for a variant that changed nothing and ended as the reference did)."""
    against = comparison.baseline or "no baseline"
    header = [*HEADER[:2], f"{HEADER[2]} (from {against})", *HEADER[3:]]
    cells = [_cells(row) for row in comparison.rows]
    reference = next((c for c in cells if c[0] == "reference"), None)
    same = [c for c in cells if reference is not None and c is not reference
            and c[-1] == "nothing" and c[1] == reference[1]]
    # rows that changed nothing and ended as the reference did: the run's warning names them
    table = [header, *(c for c in cells if c not in same)]
    return Section("compare", f"Compare In[{comparison.cell}]: one change at a time",
                   list(comparison.warnings), table=table)


def outcome_text(row: Row) -> str:
    """Return a row's outcome in a few words: `ok`, `failed: FAMILY at OP`,
    `not applicable: WHY`, `timed out`."""
    if row.outcome == FAILED:
        return f"failed: {row.failure}"
    if row.outcome == NOT_APPLICABLE:
        return f"not applicable: {row.reason}"
    return row.outcome


def _cells(row: Row) -> list[str]:
    diffs = "; ".join(_diff_text(d) for d in row.diffs) or ("—" if row.ok else "")
    closes = [d for d in row.diffs if d.allclose is not None]
    if not closes:
        allclose = ""
    elif all(d.allclose for d in closes):
        allclose = "yes"
    else:
        allclose = "no: " + ", ".join(d.name for d in closes if not d.allclose)
    wall = f"{row.wall_s * 1000:.0f} ms" if row.wall_s is not None else ""
    changed = ", ".join(f"{what} ×{n}" for what, n in row.changes.items())
    if row.variant != "reference" and row.outcome != NOT_APPLICABLE and not changed:
        changed = row.change if VARIANTS[row.variant].sets_flag else "nothing"
    return [row.variant, outcome_text(row), diffs, allclose, wall, changed]


def _diff_text(diff: OutputDiff) -> str:
    if diff.max_abs is None:
        return f"{diff.name}: {diff.note or 'empty'}"
    text = f"{diff.name}: abs {diff.max_abs:.3g}, rel {_rel(diff.max_rel)}"
    return f"{text} ({diff.note})" if diff.note else text


def _rel(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


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
    widths = [max(len(row[i]) for row in rows) for i in range(len(kept))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(c.rjust(w) if r and number else c.ljust(w)
                               for c, w, r in zip(row, widths, right, strict=True)).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render_comparison_html(comparison: Comparison) -> str:
    """Return the comparison as one self-contained HTML block (the panel section and the
    static fallback)."""
    return section_block("cudadiag-compare", {"cell": comparison.cell},
                         comparison_section(comparison))


class ComparisonView(Displayed, Comparison):
    """A Comparison that shows itself as the comparison table."""

    text = render_comparison_text
    html = render_comparison_html
