"""IncidentStore: the incident log of a home, one row per incident in its SQLite database
(database.py), with its retention and its isolated runs' files.

An incident that changes (a later error appended) is written again with the same id and
replaces its row. The home is the user cache directory, or `$CUDADIAG_HOME`, so the log
survives kernel restarts and is shared by every kernel and the `cudadiag` command.

Nothing is lost quietly: a record that cannot be written (a full disk, a read-only home, a
database locked past the busy timeout or damaged and not movable) stays in this process's
memory, is listed and shown from there, and is written with the next record or at exit.
Incidents leave only by the retention (retention.py), pruned on purpose with a line that
says so, with their isolated runs' files (runfiles.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cudadiag.errors import (
    CudadiagError,
    IncidentFromNewerVersion,
    IncidentNotFound,
    IncidentNotSaved,
)
from cudadiag.home import default_home
from cudadiag.i18n import N_, _, current_code, localize
from cudadiag.i18n.width import cut_to_width, display_width
from cudadiag.incident import SCHEMA, Incident
from cudadiag.log import runfiles
from cudadiag.log.database import (
    COLUMNS,
    connect,
    database_path,
    entry_of_row,
    failure_reason,
    put,
    reading,
    transaction,
)
from cudadiag.log.entry import SUMMARY_MAX, LogEntry
from cudadiag.log.legacy import import_legacy_logs
from cudadiag.log.records import (
    NewerRecord,
    masked_entry,
    read_record,
    record_json,
    secrets_mask,
)
from cudadiag.log.retention import Retention, RetentionConfigError, is_older, load_retention

_unsaved: dict[str, dict[str, tuple[str, LogEntry]]] = {}
"""Records this process could not write, by database path, then incident id (oldest
first), each with its log entry."""
_exit_retry_registered = False
_config_errors_told: set[str] = set()
_ID_END = "\U0010ffff"
EMPTY_LOG = N_("the incident log {path} holds no incident yet")
"""Above every character an id holds: ids starting with P lie in [P, P + _ID_END)."""


@dataclass
class LogContents:
    """What the log holds: the incidents this version reads, and the newer records."""

    incidents: list[Incident]
    newer: list[NewerRecord]


@dataclass
class PruneResult:
    """What a prune removed."""

    retention: Retention
    pruned: list[LogEntry]
    """The incidents removed, oldest first."""
    too_old: int
    """How many of them were older than the retention's days."""
    run_folders: int
    """Isolated runs' folders removed with their incidents."""

    def message(self) -> str:
        """Return the line that tells the user what was pruned and why."""
        older = self.too_old
        beyond = len(self.pruned) - older
        why = [_("{count:,} older than {days:g} days").format(
            count=older, days=self.retention.days)] if older else []
        why += [_("{count:,} beyond the newest {kept:,}").format(
            count=beyond, kept=self.retention.incidents)] if beyond else []
        line = (_("cudadiag: pruned {count:,} incident(s) from the log ({why}) and {runs:,} "
                  "isolated runs' files; retention: {retention} ({source}; see `cudadiag "
                  "incidents --stats`)") if self.run_folders else
                _("cudadiag: pruned {count:,} incident(s) from the log ({why}); retention: "
                  "{retention} ({source}; see `cudadiag incidents --stats`)"))
        return line.format(count=len(self.pruned), why=", ".join(why), runs=self.run_folders,
                           retention=self.retention.describe(),
                           source=localize(self.retention.source))


class IncidentStore:
    """The incident log with its retention. Safe with several processes writing at once."""

    def __init__(self, home: Path | str | None = None,
                 retention: Retention | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()
        self._retention = retention

    @property
    def path(self) -> Path:
        """The log's database."""
        return database_path(self.home)

    def retention(self) -> Retention:
        """The retention this store was given, else the one of its home's config.json.

        Raises RetentionConfigError when config.json cannot be read."""
        return self._retention or load_retention(self.home)

    def append(self, incident: Incident) -> None:
        """Write `incident`'s row, after any record of this process still unsaved; prune
        what falls out of the retention (with a line on stderr saying so).

        Raises IncidentNotSaved when the log cannot be written: the record is kept in memory
        and written with the next append (or at exit).
        """
        mask = secrets_mask(incident)
        unsaved = _unsaved.setdefault(self._key, {})
        unsaved.pop(incident.id, None)
        unsaved[incident.id] = (record_json(incident, mask), masked_entry(incident, mask))
        try:
            self._write_unsaved(unsaved)
        except (OSError, sqlite3.Error) as exc:
            _retry_at_exit()
            raise IncidentNotSaved(self._not_saved_message(list(unsaved), exc)) from exc
        self._prune_if_due()

    def is_saved(self, incident_id: str) -> bool:
        """Return False while the incident's latest record waits in memory to be written."""
        return incident_id not in _unsaved.get(self._key, {})

    def load(self) -> list[Incident]:
        """Return every incident this version reads, oldest first (see `contents`)."""
        return self.contents().incidents

    def contents(self) -> LogContents:
        """Return the incidents, oldest first, with the records still unsaved in this
        process, and the records written by a newer cudadiag. Unreadable records are
        skipped with one warning. Reads every record: listing and finding one use
        `entries` and `get`."""
        rows = self._query(f"SELECT id, record FROM incidents ORDER BY {_BY_TIME}")
        latest: dict[str, str] = {str(rid): str(record) for rid, record in rows}
        for incident_id, (record, _entry) in self._pending().items():
            latest.pop(incident_id, None)
            latest[incident_id] = record
        found = [read_record(record) for record in latest.values()]
        readable = [f for f in found if f is not None]
        if len(readable) < len(found):
            warnings.warn(_("cudadiag: skipped {count} unreadable record(s) in the incident "
                            "log {path}").format(count=len(found) - len(readable),
                                                 path=self.path), stacklevel=2)
        readable.sort(key=lambda f: f.created_at)
        return LogContents(incidents=[f for f in readable if isinstance(f, Incident)],
                           newer=[f for f in readable if isinstance(f, NewerRecord)])

    def entries(self) -> list[LogEntry]:
        """Return one entry per incident, oldest first, with the records still unsaved in
        this process and those of a newer cudadiag (`newer`). Reads the columns only."""
        rows = self._query(f"SELECT {COLUMNS} FROM incidents ORDER BY {_BY_TIME}")
        return self._with_pending(list(map(entry_of_row, rows)), lambda _id: True)

    def newest_entries(self, limit: int) -> tuple[list[LogEntry], int]:
        """Return the newest `limit` entries, oldest first (as `entries`, reading only
        their rows), and how many incidents the log holds in all."""
        rows = self._query(f"SELECT {COLUMNS} FROM incidents ORDER BY {_BY_TIME_DESC} "
                           "LIMIT ?", (str(limit),))
        newest = self._with_pending([entry_of_row(r) for r in reversed(rows)], lambda _id: True)
        ((count,),) = self._query("SELECT count(*) FROM incidents") or [(0,)]
        unsaved = [i for i in self._pending()
                   if not self._query("SELECT 1 FROM incidents WHERE id = ?", (i,))]
        return newest[-limit:], int(str(count)) + len(unsaved)

    def get(self, incident_id: str | None = None) -> Incident:
        """Return the incident whose id starts with `incident_id` (the newest when None).

        Raises IncidentNotFound when none or several match, IncidentFromNewerVersion when the
        one that matches was recorded by a newer cudadiag.
        """
        if incident_id is None:
            return self._newest()
        rows = self._query(f"SELECT {COLUMNS} FROM incidents WHERE id >= ? AND id < ?",
                           (incident_id, incident_id + _ID_END))
        matches = self._with_pending([entry_of_row(r) for r in rows],
                                     lambda found: found.startswith(incident_id))
        if len(matches) != 1:
            entries = self.entries()
            if not entries:
                raise IncidentNotFound(_(EMPTY_LOG).format(path=self.path))
            known = ", ".join(e.id for e in [e for e in entries if not e.newer][-5:])
            what = (_("no incident with an id starting with {prefix!r}; recent ids: {known}")
                    if not matches else
                    _("{count} incidents with an id starting with {prefix!r}; recent ids: "
                      "{known}"))
            raise IncidentNotFound(what.format(count=len(matches), prefix=incident_id,
                                               known=known))
        return self.read(matches[0])

    def summaries(self, entries: list[LogEntry]) -> dict[str, str]:
        """Return each entry's summary in the language of the moment, by id: the log's
        column in English; in another language, the summary its record keeps written again
        in it (cut as the column is), the column itself where the record cannot be read."""
        if current_code() == "en":
            return {entry.id: entry.summary for entry in entries}
        found = {}
        for entry in entries:
            summary = entry.summary
            if not entry.newer:
                with contextlib.suppress(CudadiagError):
                    summary = localize(self.read(entry).diagnosis.summary)
            if display_width(summary) > SUMMARY_MAX:
                summary = cut_to_width(summary, SUMMARY_MAX - 1) + "…"
            found[entry.id] = summary
        return found

    def read(self, entry: LogEntry) -> Incident:
        """Return the incident of a log entry, reading its one record.

        Raises IncidentFromNewerVersion for a record of a newer cudadiag, IncidentNotFound
        when the record is no longer in the log (pruned since the entry was read) or cannot
        be read."""
        if entry.newer:
            raise IncidentFromNewerVersion(
                _("incident {id} was {newer}; this cudadiag reads schema {schema} and older. "
                  "Upgrade cudadiag (pip install -U cudadiag) to show it.").format(
                    id=entry.id, newer=entry.describe_newer(), schema=SCHEMA))
        pending = self._pending().get(entry.id)
        if pending is not None:
            record: str | None = pending[0]
        else:
            rows = self._query("SELECT record FROM incidents WHERE id = ?", (entry.id,))
            record = str(rows[0][0]) if rows else None
        if record is None:
            raise IncidentNotFound(_("incident {id} is no longer in the incident log {path} "
                                     "(pruned by its retention)").format(id=entry.id,
                                                                        path=self.path))
        found = read_record(record)
        if not isinstance(found, Incident):
            raise IncidentNotFound(_("the record of incident {id} in {path} cannot be "
                                     "read").format(id=entry.id, path=self.path))
        return found

    def prune(self, retention: Retention | None = None,
              now: datetime | None = None) -> PruneResult:
        """Delete the incidents beyond `retention` (default: this store's) with their
        isolated runs' files.

        Raises RetentionConfigError when config.json cannot be read, OSError or
        sqlite3.Error when the log cannot be written (nothing is then pruned)."""
        retention = retention or self.retention()
        conn = self._connect()
        with transaction(conn):
            rows = conn.execute(f"SELECT {COLUMNS} FROM incidents ORDER BY {_BY_TIME}")
            pruned = retention.fallen_out(list(map(entry_of_row, rows)), now)
            conn.executemany("DELETE FROM incidents WHERE id = ?", [(e.id,) for e in pruned])
        if pruned:
            conn.executescript("PRAGMA incremental_vacuum;")  # execute() frees one page
        cutoff = retention.cutoff(now)
        return PruneResult(retention, pruned,
                           too_old=sum(is_older(e.created_at, cutoff) for e in pruned),
                           run_folders=runfiles.remove_run_files(
                               self.home, (e.id for e in pruned)))

    def run_files(self, incident_id: str) -> Path:
        """The folder that keeps an isolated run's RNG states, recorded batch and a pointer
        to its shipped values."""
        return runfiles.run_folder(self.home, incident_id)

    def keep_run_file(self, incident_id: str, source: Path) -> Path:
        """Copy `source` into the incident's run folder under the same name (folders 0700,
        the file 0600); return the copy. Raises OSError when it cannot be written."""
        return runfiles.keep_run_file(self.home, incident_id, source)

    def keep_shipped(self, incident_id: str, pickled: Path) -> str | None:
        """Keep the pickled values an isolated run was shipped (runfiles.keep_shipped);
        return None when kept, else why not. Raises OSError when they cannot be written."""
        return runfiles.keep_shipped(self.home, incident_id, pickled)

    def shipped_file(self, incident_id: str) -> Path | None:
        """The pickled shipped values kept for an incident, or None when none are kept (or
        they were dropped to make room)."""
        return runfiles.shipped_file(self.home, incident_id)

    @property
    def _key(self) -> str:
        return os.path.abspath(self.path)

    def _pending(self) -> dict[str, tuple[str, LogEntry]]:
        return _unsaved.get(self._key, {})

    def _with_pending(self, entries: list[LogEntry],
                      admits: Callable[[str], bool]) -> list[LogEntry]:
        """`entries` with this process's unsaved records (those whose id `admits`) in place
        of their rows, oldest first."""
        pending = [e for _record, e in self._pending().values()
                   if admits(e.id)]
        if not pending:
            return entries
        latest = {e.id: e for e in entries}
        latest.update((e.id, e) for e in pending)
        return sorted(latest.values(), key=lambda e: e.created_at)

    def _connect(self) -> sqlite3.Connection:
        return connect(self.home, self._import_legacy)

    def _import_legacy(self, conn: sqlite3.Connection) -> None:
        import_legacy_logs(conn, self.home)

    def _query(self, sql: str, parameters: tuple[str, ...] = ()) -> list[tuple[object, ...]]:
        """The rows of a read; none when the log does not exist yet.

        Raises sqlite3.Error when an existing database cannot be read."""
        with reading(self.home, self._import_legacy) as conn:
            return conn.execute(sql, parameters).fetchall() if conn is not None else []

    def _newest(self) -> Incident:
        entries = self.entries()
        if not entries:
            raise IncidentNotFound(_(EMPTY_LOG).format(path=self.path))
        readable = [e for e in entries if not e.newer]
        if not readable:
            raise IncidentFromNewerVersion(
                _("every incident of {path} was {newer}; upgrade cudadiag (pip install -U "
                  "cudadiag) to read them").format(path=self.path,
                                                   newer=entries[-1].describe_newer()))
        return self.read(readable[-1])

    def _write_unsaved(self, unsaved: dict[str, tuple[str, LogEntry]]) -> None:
        """Write every unsaved record in one transaction; they leave memory once committed."""
        conn = self._connect()
        with transaction(conn):
            for record, entry in unsaved.values():
                put(conn, entry, record)
        unsaved.clear()

    def _prune_if_due(self) -> None:
        """After an append: prune when the log holds more incidents than the retention keeps
        (with a 2 % margin) or its oldest is older than the retention's days."""
        try:
            retention = self.retention()
        except RetentionConfigError as exc:
            if self._key not in _config_errors_told:
                _config_errors_told.add(self._key)
                print(_("cudadiag: nothing is pruned from the incident log: {error}").format(
                    error=exc), file=sys.stderr)
            return
        try:
            if not self._due(retention):
                return
            result = self.prune(retention)
        except (OSError, sqlite3.Error) as exc:
            print(_("cudadiag: could not prune the incident log {path}: {reason}").format(
                path=self.path, reason=failure_reason(exc)), file=sys.stderr)
            return
        if result.pruned:
            print(result.message(), file=sys.stderr)

    def _due(self, retention: Retention) -> bool:
        """True when the log holds more incidents than `retention` keeps (with its margin)
        or its oldest is too old. Counts rows only when the span of row ids, an upper bound
        read from the table's ends, passes the limit."""
        # One aggregate per query: SQLite answers a lone min() or max() from an index or
        # the table's ends, but scans the table for several in one SELECT.
        ((oldest,),) = self._query("SELECT min(created_at) FROM incidents")
        ((first,),) = self._query("SELECT min(rowid) FROM incidents")
        ((last,),) = self._query("SELECT max(rowid) FROM incidents")
        span = last - first + 1 if isinstance(first, int) and isinstance(last, int) else None
        if isinstance(oldest, str) and is_older(oldest, retention.cutoff()):
            return True
        if not isinstance(span, int) or not retention.due(span):
            return False
        ((count,),) = self._query("SELECT count(*) FROM incidents")
        return isinstance(count, int) and retention.due(count)

    def _not_saved_message(self, ids: list[str], exc: OSError | sqlite3.Error) -> str:
        what = (_("incident {ids} could not be saved to {path} ({reason}); kept in memory, it "
                  "will be written with the next incident or when Python exits")
                if len(ids) == 1 else
                _("incidents {ids} could not be saved to {path} ({reason}); kept in memory, "
                  "it will be written with the next incident or when Python exits"))
        return what.format(ids=", ".join(ids), path=self.path, reason=failure_reason(exc))


_BY_TIME = "created_at, rowid"
_BY_TIME_DESC = "created_at DESC, rowid DESC"


def _retry_at_exit() -> None:
    global _exit_retry_registered
    if not _exit_retry_registered:
        atexit.register(_write_unsaved_at_exit)
        _exit_retry_registered = True


def _write_unsaved_at_exit() -> None:
    """Last chance for records that could not be written: try once more, say what is lost."""
    for key, unsaved in list(_unsaved.items()):
        if not unsaved:
            continue
        store = IncidentStore(Path(key).parent)
        try:
            store._write_unsaved(unsaved)
        except (OSError, sqlite3.Error) as exc:
            print(_("cudadiag: incident(s) {ids} could not be saved to {path} ({reason}) and "
                    "are lost with this process").format(ids=", ".join(unsaved), path=key,
                                                         reason=failure_reason(exc)),
                  file=sys.stderr)
