"""The `incidents` command, for the magic and the shell command: the incidents the filters
admit, the log's figures (--stats), or a prune by hand (--prune)."""

from __future__ import annotations

import argparse
import sqlite3

from cudadiag.log.database import write_failure_text
from cudadiag.log.query import Filters, ListingError, make_filters, select
from cudadiag.log.retention import Retention
from cudadiag.log.stats import log_stats
from cudadiag.log.store import IncidentStore
from cudadiag.log.view import render_stats, render_table


def run_listing(args: argparse.Namespace, store: IncidentStore | None = None) -> str:
    """Return what `incidents` prints for its parsed options (options.py): the
    incidents the filters admit, the log's figures (--stats), or what a prune removed
    (--prune).

    Raises ListingError for options it cannot understand or combine, RetentionConfigError
    when the retention of config.json is needed and cannot be read."""
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
    limit = None if args.all else args.last
    if filters == Filters() and limit is not None:
        shown, total = store.newest_entries(limit)
        matching = total
    else:
        entries = store.entries()
        total = len(entries)
        chosen = select(entries, filters)
        matching = len(chosen)
        shown = chosen if limit is None else chosen[-limit:]
    if not total:
        return "no incidents recorded"
    table = render_table(shown, empty=f"no incident matches {filters.describe()} "
                                      f"({total:,} in the log)")
    return table + _not_shown(matching - len(shown), len(shown))


def _not_shown(older: int, shown: int) -> str:
    if older <= 0:
        return ""
    return (f"\n... {older:,} older incident(s) not shown (the newest {shown:,} are): "
            "--all shows them, --last N the newest N, --since and --family narrow the list")


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
    except (OSError, sqlite3.Error) as exc:
        raise ListingError(f"nothing was pruned: {write_failure_text(store.home, exc)}"
                           ) from None
    if not result.pruned:
        return f"cudadiag: nothing to prune; retention: {retention.describe()}"
    return result.message()
