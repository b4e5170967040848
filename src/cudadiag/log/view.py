"""What `incidents` prints: the listing (one line per incident) and the log's figures
(`--stats`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cudadiag.i18n import _, localize
from cudadiag.i18n.width import pad_to_width
from cudadiag.log.entry import LogEntry
from cudadiag.log.stats import LogStats

NO_INCIDENTS = "no incidents recorded"
"""What a listing says of an empty log (in the reader's language: `_(NO_INCIDENTS)`)."""
_COLUMNS = (12, 25, 19, 10)
"""The widths of the id, time, family and where columns, in terminal columns."""


def render_table(entries: Iterable[LogEntry], empty: str | None = None,
                 summary_of: Callable[[LogEntry], str] | None = None) -> str:
    """Return one line per log entry, in the order given: id, time, family, where (cell,
    script or mode), summary (`summary_of(entry)` when given: the summary in the reader's
    language); records of a newer cudadiag get their id, time and `recorded by a newer
    cudadiag`. `empty` (default: no incidents recorded) when there is no entry."""
    summary_of = summary_of or (lambda e: e.summary)
    rows = [_row(e.id, e.created_at, e.family or "?", "?",
                 _("{newer}; upgrade cudadiag to read it").format(newer=e.describe_newer()))
            if e.newer else
            _row(e.id, e.created_at, e.family or "?", e.where(),
                 summary_of(e) + (_(" [simulated]") if e.simulated else ""))
            for e in entries]
    if not rows:
        return _(NO_INCIDENTS) if empty is None else empty
    header = _row(_("id"), _("time"), _("family"), _("where"), _("summary"))
    return "\n".join([header, *rows])


def _row(*cells: str) -> str:
    """The columns of one line, each padded to its width as the terminal shows it."""
    *fixed, last = cells
    return "  ".join([*(pad_to_width(c, w) for c, w in zip(fixed, _COLUMNS, strict=True)),
                      last])


def render_stats(stats: LogStats) -> str:
    """Return what `incidents --stats` prints: the log's files and sizes, the incidents by
    family and mode, the isolated runs' files, and the retention with where it is set."""
    lines = [_("incident log: {path} ({size})").format(path=stats.database,
                                                        size=_bytes(stats.database_bytes))]
    lines.append(_incidents_line(stats))
    if stats.families:
        lines.append(_("families: {counts}").format(counts=", ".join(
            f"{name} {n:,}" for name, n in stats.families.most_common())))
        lines.append(_("modes: {counts}").format(counts=", ".join(
            f"{name} {n:,}" for name, n in stats.modes.most_common())))
    lines.append(_("isolated runs' files: {folders:,} folders, {size}; shipped values "
                   "{shipped}").format(folders=stats.run_folders, size=_bytes(stats.run_bytes),
                                       shipped=_bytes(stats.shipped_bytes)))
    if stats.retention is None:
        lines.append(_("retention: cannot be read, nothing is pruned: {error}").format(
            error=stats.retention_error))
        return "\n".join(lines)
    lines.append(_("retention: {retention} ({source}); pruned as the log grows, with their "
                   "isolated runs' files").format(retention=stats.retention.describe(),
                                                  source=localize(stats.retention.source)))
    if stats.beyond_retention:
        lines.append("  " + _("{count:,} incident(s) beyond it now, pruned at a later "
                              "append or by `cudadiag incidents --prune`").format(
            count=stats.beyond_retention))
    if stats.retention.source == "defaults":
        lines.append("  " + _("to change it, write {setting} to {path}").format(
            setting='{"retention": {"incidents": N, "days": D}}', path=stats.config))
    return "\n".join(lines)


def _incidents_line(stats: LogStats) -> str:
    """`incidents: N (M recorded by a newer cudadiag), FIRST .. LAST`."""
    counts = (_("incidents: {count:,} ({newer:,} recorded by a newer cudadiag)")
              if stats.newer else _("incidents: {count:,}")).format(count=stats.incidents,
                                                                    newer=stats.newer)
    if not (stats.oldest and stats.newest):
        return counts
    return _("{counts}, {oldest} .. {newest}").format(
        counts=counts, oldest=stats.oldest[:16].replace("T", " "),
        newest=stats.newest[:16].replace("T", " "))


def _bytes(n: int) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return _("{count} bytes").format(count=n)
