"""The figures of `incidents --stats`: how much the log holds, by family and mode, the
isolated runs' files, and the retention. Read from the log's columns and file sizes only."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from cudadiag.log.retention import Retention, RetentionConfigError, config_path
from cudadiag.log.runfiles import RUNS_DIR, SHIPPED_DIR
from cudadiag.log.store import IncidentStore


@dataclass
class LogStats:
    """What `incidents --stats` shows: how much the log holds and what the retention is."""

    home: Path
    database: Path
    database_bytes: int
    """The database with its journal (a write-ahead log, or a rollback journal)."""
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
    """Return the figures of the log of `store` (its columns and file sizes only)."""
    entries = store.entries()
    readable = [e for e in entries if not e.newer]
    database = store.path
    stats = LogStats(
        home=store.home, database=database,
        database_bytes=sum(_size(database.with_name(database.name + suffix))
                           for suffix in ("", "-wal", "-journal")),
        incidents=len(entries),
        newer=len(entries) - len(readable),
        oldest=entries[0].created_at if entries else None,
        newest=entries[-1].created_at if entries else None,
        families=Counter(e.family or "?" for e in entries),
        modes=Counter(e.mode or "?" for e in readable),
        config=config_path(store.home),
    )
    stats.run_folders, stats.run_bytes = _folder_sizes(store.home / RUNS_DIR)
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
