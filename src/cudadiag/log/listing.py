"""The `incidents` command, for the magic and the shell command: the incidents the filters
admit, the log's figures (--stats), or a prune by hand (--prune)."""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Callable

from cudadiag.i18n import _, msg
from cudadiag.log.database import write_failure_text
from cudadiag.log.entry import LogEntry
from cudadiag.log.query import Filters, ListingError, make_filters, select
from cudadiag.log.retention import Retention
from cudadiag.log.stats import log_stats
from cudadiag.log.store import IncidentStore
from cudadiag.log.view import NO_INCIDENTS, render_stats, render_table

_THIS_PRUNE = msg("this --prune")
"""Where a retention given to --prune comes from."""


def run_listing(args: argparse.Namespace, store: IncidentStore | None = None) -> str:
    """Return what `incidents` prints for its parsed options (options.py): the
    incidents the filters admit, the log's figures (--stats), or what a prune removed
    (--prune).

    Raises ListingError for options it cannot understand or combine, RetentionConfigError
    when the retention of config.json is needed and cannot be read."""
    store = store or IncidentStore()
    filters = make_filters(args.family, args.since, args.mode, args.cell)
    if (args.keep or args.keep_days) and not args.prune:
        raise ListingError(_("--keep and --keep-days go with --prune"))
    if (args.stats or args.prune) and filters != Filters():
        raise ListingError(_("{option} takes no filter ({filters})").format(
            option="--stats" if args.stats else "--prune", filters=filters.describe()))
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
        return _(NO_INCIDENTS)
    table = render_table(shown, empty=_("no incident matches {filters} ({count:,} in the "
                                        "log)").format(filters=filters.describe(), count=total),
                         summary_of=_summary_of(store, shown))
    return table + _not_shown(matching - len(shown), len(shown))


def _summary_of(store: IncidentStore, shown: list[LogEntry]) -> Callable[[LogEntry], str]:
    summaries = store.summaries(shown)
    return lambda entry: summaries[entry.id]


def _not_shown(older: int, shown: int) -> str:
    if older <= 0:
        return ""
    return "\n... " + _("{older:,} older incident(s) not shown (the newest {shown:,} are): "
                        "--all shows them, --last N the newest N, --since and --family "
                        "narrow the list").format(older=older, shown=shown)


def _prune(store: IncidentStore, keep: int | None, keep_days: float | None) -> str:
    if keep is not None and keep_days is not None:
        retention = Retention(incidents=keep, days=keep_days, source=_THIS_PRUNE)
    else:
        configured = store.retention()
        retention = Retention(
            incidents=keep if keep is not None else configured.incidents,
            days=keep_days if keep_days is not None else configured.days,
            source=_THIS_PRUNE if keep or keep_days else configured.source)
    try:
        result = store.prune(retention)
    except (OSError, sqlite3.Error) as exc:
        raise ListingError(_("nothing was pruned: {reason}").format(
            reason=write_failure_text(store.home, exc))) from None
    if not result.pruned:
        return _("cudadiag: nothing to prune; retention: {retention}").format(
            retention=retention.describe())
    return result.message()
