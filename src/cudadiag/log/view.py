"""What `incidents` prints: the listing (one line per incident) and the log's figures
(`--stats`)."""

from __future__ import annotations

from collections.abc import Iterable

from cudadiag.log.entry import LogEntry
from cudadiag.log.stats import LogStats


def render_table(entries: Iterable[LogEntry], empty: str = "no incidents recorded") -> str:
    """Return one line per log entry, in the order given: id, time, family, where (cell,
    script or mode), summary; records of a newer cudadiag get their id, time and `recorded
    by a newer cudadiag`. `empty` when there is no entry."""
    rows = [f"{e.id:12}  {e.created_at:25}  {e.family or '?':19}  {'?':10}  "
            f"{e.describe_newer()}; upgrade cudadiag to read it" if e.newer else
            f"{e.id:12}  {e.created_at:25}  {e.family:19}  {e.where():10}  "
            f"{e.summary}{' [simulated]' if e.simulated else ''}" for e in entries]
    if not rows:
        return empty
    header = f"{'id':12}  {'time':25}  {'family':19}  {'where':10}  summary"
    return "\n".join([header, *rows])


def render_stats(stats: LogStats) -> str:
    """Return what `incidents --stats` prints: the log's files and sizes, the incidents by
    family and mode, the isolated runs' files, and the retention with where it is set."""
    lines = [f"incident log: {stats.database} ({_bytes(stats.database_bytes)})"]
    span = (f", {stats.oldest[:16].replace('T', ' ')} .. {stats.newest[:16].replace('T', ' ')}"
            if stats.oldest and stats.newest else "")
    newer = f" ({stats.newer:,} recorded by a newer cudadiag)" if stats.newer else ""
    lines.append(f"incidents: {stats.incidents:,}{newer}{span}")
    if stats.families:
        lines.append("families: " + ", ".join(f"{name} {n:,}"
                                               for name, n in stats.families.most_common()))
        lines.append("modes: " + ", ".join(f"{name} {n:,}"
                                           for name, n in stats.modes.most_common()))
    lines.append(f"isolated runs' files: {stats.run_folders:,} folders, "
                 f"{_bytes(stats.run_bytes)}; shipped values {_bytes(stats.shipped_bytes)}")
    if stats.retention is None:
        lines.append(f"retention: cannot be read, nothing is pruned: {stats.retention_error}")
        return "\n".join(lines)
    lines.append(f"retention: {stats.retention.describe()} ({stats.retention.source}); "
                 "pruned as the log grows, with their isolated runs' files")
    if stats.beyond_retention:
        lines.append(f"  {stats.beyond_retention:,} incident(s) beyond it now, pruned at a "
                     "later append or by `cudadiag incidents --prune`")
    if stats.retention.source == "defaults":
        lines.append(f'  to change it, write {{"retention": {{"incidents": N, "days": D}}}} '
                     f"to {stats.config}")
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
