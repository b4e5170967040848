"""Choosing incidents from the log's index: the filters of `incidents` (`--family`,
`--since`, `--mode`, `--cell`) and the figures of `incidents --stats`. Nothing here reads a
record: everything comes from the index entries and the sizes of the files."""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cudadiag.durable import write_failure
from cudadiag.errors import CudadiagError
from cudadiag.incident_index import IndexEntry
from cudadiag.knowledge import FAMILY_NAMES
from cudadiag.listing_options import MODES
from cudadiag.retention import Retention, RetentionConfigError, config_path, is_older
from cudadiag.store import SHIPPED_DIR, IncidentStore

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(m|min|h|d|w)", re.IGNORECASE)
_SPAN_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SINCE_HELP = "a date (2026-11-30), a time (2026-11-30T14:00) or a span back from now " \
              "(90m, 12h, 3d, 2w)"


class ListingError(CudadiagError, ValueError):
    """A filter of `incidents` that cannot be understood; the message says what it takes."""


@dataclass(frozen=True)
class Filters:
    """What `incidents` lists: every field left None lets every incident through."""

    family: str | None = None
    since: datetime | None = None
    mode: str | None = None
    cell: int | None = None
    script: str | None = None

    def admits(self, entry: IndexEntry) -> bool:
        """True when `entry` passes every filter set."""
        if self.family is not None and entry.family != self.family:
            return False
        if self.mode is not None and entry.mode != self.mode:
            return False
        if self.cell is not None and entry.cell != self.cell:
            return False
        if self.script is not None and not _same_script(entry.script, self.script):
            return False
        return self.since is None or not is_older(entry.created_at, self.since)

    def describe(self) -> str:
        """Return the filters as a user wrote them (`--family oom --since ...`)."""
        parts = [f"--family {self.family}"] if self.family else []
        parts += [f"--since {self.since.isoformat(timespec='minutes')}"] if self.since else []
        parts += [f"--mode {self.mode}"] if self.mode else []
        parts += [f"--cell {self.cell}"] if self.cell is not None else []
        parts += [f"--cell {self.script}"] if self.script else []
        return " ".join(parts)


def make_filters(family: str | None = None, since: str | None = None,
                 mode: str | None = None, cell: str | None = None,
                 now: datetime | None = None) -> Filters:
    """Return the Filters the options of `incidents` ask for.

    Raises ListingError for a family, time, mode or cell it cannot understand."""
    if family is not None and family not in FAMILY_NAMES:
        raise ListingError(f"--family {family}: no such family; one of: "
                           f"{', '.join(FAMILY_NAMES)}")
    if mode is not None and mode not in MODES:
        raise ListingError(f"--mode {mode}: one of {', '.join(MODES)}")
    number, script = _cell_or_script(cell)
    return Filters(family=family, since=parse_since(since, now) if since else None,
                   mode=mode, cell=number, script=script)


def select(entries: Sequence[IndexEntry], filters: Filters) -> list[IndexEntry]:
    """Return the entries that pass `filters`, in their order."""
    if filters == Filters():
        return list(entries)
    return [e for e in entries if filters.admits(e)]


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """Return the time `text` names: an ISO date or time (local time unless it says
    otherwise), or a span back from `now` such as 90m, 12h, 3d, 2w.

    Raises ListingError when it is neither."""
    now = now or datetime.now(timezone.utc)
    span = _SPAN.fullmatch(text.strip())
    if span:
        amount, unit = float(span.group(1)), span.group(2).lower()
        try:
            return now - timedelta(**{_SPAN_UNITS[unit]: amount})
        except OverflowError:
            raise ListingError(f"--since {text}: reaches back before the calendar starts; "
                               f"give {_SINCE_HELP}") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ListingError(f"--since {text}: give {_SINCE_HELP}") from None
    return when if when.tzinfo else when.astimezone()


def _cell_or_script(cell: str | None) -> tuple[int | None, str | None]:
    if cell is None:
        return None, None
    text = cell.strip()
    if re.fullmatch(r"(In\[)?\d+\]?", text):
        return int(text.strip("In[]")), None
    if not text or text.startswith("-"):
        raise ListingError(f"--cell {cell}: give a cell number (3 or In[3]) or a script "
                           "(train.py)")
    return None, text


def _same_script(listed: str | None, asked: str) -> bool:
    if not listed:
        return False
    return listed == asked or os.path.basename(listed) == asked \
        or os.path.normpath(listed) == os.path.normpath(asked)


@dataclass
class LogStats:
    """What `incidents --stats` shows: how much the log holds and what the retention is."""

    home: Path
    files: int
    log_bytes: int
    index_bytes: int
    incidents: int
    newer: int
    oldest: str | None
    newest: str | None
    families: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    run_folders: int = 0
    run_bytes: int = 0
    shipped_bytes: int = 0
    retention: Retention | None = None
    retention_error: str | None = None
    beyond_retention: int = 0
    """Incidents outside the retention now, not pruned yet."""
    config: Path | None = None


def log_stats(store: IncidentStore, now: datetime | None = None) -> LogStats:
    """Return the figures of the log of `store` (index entries and file sizes only)."""
    entries = store.entries()
    files = store.log_files()
    readable = [e for e in entries if not e.newer]
    stats = LogStats(
        home=store.home, files=len(files), log_bytes=sum(f.size for f in files),
        index_bytes=_size(store.index.path), incidents=len(entries),
        newer=len(entries) - len(readable),
        oldest=entries[0].created_at if entries else None,
        newest=entries[-1].created_at if entries else None,
        families=Counter(e.family or "?" for e in entries),
        modes=Counter(e.mode or "?" for e in readable),
        config=config_path(store.home),
    )
    stats.run_folders, stats.run_bytes = _folder_sizes(store.home / "runs")
    stats.shipped_bytes = _folder_sizes(store.home / SHIPPED_DIR, flat=True)[1]
    try:
        stats.retention = store.retention()
    except RetentionConfigError as exc:
        stats.retention_error = str(exc)
    else:
        stats.beyond_retention = len(stats.retention.fallen_out(entries, now))
    return stats


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _folder_sizes(folder: Path, flat: bool = False) -> tuple[int, int]:
    """(number of subfolders, or of files when `flat`; bytes of the files within)."""
    count = total = 0
    try:
        items = list(os.scandir(folder))
    except OSError:
        return 0, 0
    for item in items:
        if flat:
            count += 1
            total += item.stat().st_size if item.is_file() else 0
            continue
        if item.is_dir():
            count += 1
            with os.scandir(item.path) as inner:
                total += sum(f.stat().st_size for f in inner if f.is_file())
    return count, total


def run_listing(args: argparse.Namespace, store: IncidentStore | None = None) -> str:
    """Return what `incidents` prints for its parsed options (listing_options.py): the
    incidents the filters admit, the log's figures (--stats), or what a prune removed
    (--prune).

    Raises ListingError for options it cannot understand or combine, RetentionConfigError
    when the retention of config.json is needed and cannot be read."""
    from cudadiag.ui.render import render_stats, render_table

    store = store or IncidentStore()
    filters = make_filters(args.family, args.since, args.mode, args.cell)
    if (args.keep or args.keep_days) and not args.prune:
        raise ListingError("--keep and --keep-days go with --prune")
    if (args.stats or args.prune) and filters != Filters():
        raise ListingError(f"{'--stats' if args.stats else '--prune'} takes no filter "
                           f"({filters.describe()})")
    if args.stats:
        return render_stats(log_stats(store))
    if args.prune:
        return _prune(store, args.keep, args.keep_days)
    entries = store.entries()
    if not entries:
        return "no incidents recorded"
    return render_table(select(entries, filters),
                        empty=f"no incident matches {filters.describe()} "
                              f"({len(entries):,} in the log)")


def _prune(store: IncidentStore, keep: int | None, keep_days: float | None) -> str:
    if keep is not None and keep_days is not None:
        retention = Retention(incidents=keep, days=keep_days, source="this --prune")
    else:
        configured = store.retention()
        retention = Retention(
            incidents=keep if keep is not None else configured.incidents,
            days=keep_days if keep_days is not None else configured.days,
            source="this --prune" if keep or keep_days else configured.source)
    try:
        result = store.prune(retention)
    except OSError as exc:
        name = Path(exc.filename).name if exc.filename else "the log"
        raise ListingError(f"nothing was pruned: {write_failure(name, store.home, exc)}"
                           ) from None
    if not result.pruned:
        return f"cudadiag: nothing to prune; retention: {retention.describe()}"
    return result.message()
