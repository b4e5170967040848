"""The incident log on disk: JSON lines, appended whole and synced, in files of at most
8 MiB, with an index for listing and finding incidents and an explicit retention.

An incident that changes (a later error appended) is written again with the same id; the
last record of an id wins. The log lives in the user cache directory, or `$CUDADIAG_HOME`,
so it survives kernel restarts and is shared by every kernel and the `cudadiag` command.

Nothing is lost quietly: a write is looped until every byte is down and then synced; a write
that fails is cut back off the file, and the record stays in this process's memory to be
written with the next record (or at exit); a torn last line left by a writer that died is set
aside before the next append, so it never swallows the next record. When the current file
would pass 8 MiB it is renamed `incidents.jsonl.1` (older ones shift up); incidents leave
only by the retention (retention.py), pruned on purpose with a line that says so, with their
isolated runs' files. Listing and `get` read the index (incident_index.py) and one record by
its offset; the log stays the truth the index is rebuilt from. Everything created here is
private to the user (folders 0700, files 0600).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from cudadiag.durable import (
    PRIVATE_DIR,
    PRIVATE_FILE,
    append_whole,
    make_private,
    replace_atomically,
    sync_folder,
    write_all,
)
from cudadiag.errors import (
    IncidentFromNewerVersion,
    IncidentNotFound,
    IncidentNotSaved,
    IncidentSchemaError,
)
from cudadiag.incident import SCHEMA, Incident
from cudadiag.incident_index import (
    HEADER,
    IN_MEMORY,
    IncidentIndex,
    IndexEntry,
    IndexState,
    cover_line,
    entry_for_incident,
    entry_for_newer,
    entry_line,
    is_newer_schema,
    parse_index,
    row_coverage,
)
from cudadiag.privacy.secret_values import env_secret_mask, map_strings
from cudadiag.retention import Retention, RetentionConfigError, is_older, load_retention

try:
    import fcntl
except ImportError:  # Windows: appends of one write() each are still whole lines
    fcntl = None  # type: ignore[assignment]

LOG_NAME = "incidents.jsonl"
TORN_NAME = "incidents.torn"
"""Where torn last lines of the log are set aside (a writer died mid-record)."""
MAX_BYTES = 8 * 2**20
"""The size at which the current log file is renamed and a new one started."""
_TAIL_CHUNK = 64 * 2**10

_unsaved: dict[str, dict[str, tuple[bytes, IndexEntry]]] = {}
"""Records this process could not write, by log path, then incident id (oldest first),
each with its index entry."""
_exit_retry_registered = False
_config_errors_told: set[str] = set()
SHIPPED_DIR = "shipped"
SHIPPED_POINTER = "shipped.json"
SHIPPED_KEPT_MAX_BYTES = 256 * 2**20
"""Shipped values larger than this are not kept with the incident (export then says so)."""
SHIPPED_TOTAL_MAX_BYTES = 1 * 2**30
"""The kept shipped values of all incidents together; the least recently used go first."""


@dataclass(frozen=True)
class NewerRecord:
    """A record of the log written by a newer cudadiag: what can be told without reading it."""

    id: str
    created_at: str
    schema: Any
    family: str | None = None


@dataclass
class LogContents:
    """What the log holds: the incidents this version reads, and the newer records."""

    incidents: list[Incident]
    newer: list[NewerRecord]


class LogFile(NamedTuple):
    """One file of the log: its path, inode and size."""

    path: Path
    inode: int
    size: int


@dataclass
class PruneResult:
    """What a prune removed."""

    retention: Retention
    pruned: list[IndexEntry]
    """The incidents removed, oldest first."""
    too_old: int
    """How many of them were older than the retention's days."""
    bytes_freed: int
    run_folders: int
    """Isolated runs' folders removed with their incidents."""

    def message(self) -> str:
        """Return the line that tells the user what was pruned and why."""
        older = self.too_old
        beyond = len(self.pruned) - older
        why = [f"{older:,} older than {self.retention.days:g} days"] if older else []
        why += [f"{beyond:,} beyond the newest {self.retention.incidents:,}"] if beyond else []
        runs = f" and {self.run_folders:,} isolated runs' files" if self.run_folders else ""
        return (f"cudadiag: pruned {len(self.pruned):,} incident(s) from the log "
                f"({', '.join(why)}){runs}; retention: {self.retention.describe()} "
                f"({self.retention.source}; see `cudadiag incidents --stats`)")


def default_home() -> Path:
    """Return `$CUDADIAG_HOME`, else the user cache directory for cudadiag."""
    home = os.environ.get("CUDADIAG_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("cudadiag"))


class IncidentStore:
    """Append-only incident log with an index and a retention. Safe with several processes
    writing at once."""

    def __init__(self, home: Path | str | None = None, max_bytes: int = MAX_BYTES,
                 retention: Retention | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.max_bytes = max_bytes
        self.index = IncidentIndex(self.home)
        self._retention = retention

    @property
    def path(self) -> Path:
        """The current log file."""
        return self.home / LOG_NAME

    def retention(self) -> Retention:
        """The retention this store was given, else the one of its home's config.json.

        Raises RetentionConfigError when config.json cannot be read."""
        return self._retention or load_retention(self.home)

    def append(self, incident: Incident) -> None:
        """Write `incident` as one line, after any record of this process still unsaved,
        and list it in the index; prune what falls out of the retention (with a line on
        stderr saying so).

        Raises IncidentNotSaved when the log cannot be written: the record is kept in memory
        and written with the next append (or at exit).
        """
        mask = _secrets_mask(incident)
        entry = entry_for_incident(incident)
        entry = entry._replace(summary=mask(entry.summary),
                               script=mask(entry.script) if entry.script else entry.script)
        unsaved = _unsaved.setdefault(self._key, {})
        unsaved.pop(incident.id, None)
        unsaved[incident.id] = (record_line(incident, mask), entry)
        try:
            self._write_unsaved(unsaved)
        except OSError as exc:
            _retry_at_exit()
            raise IncidentNotSaved(self._not_saved_message(list(unsaved), exc)) from exc

    def is_saved(self, incident_id: str) -> bool:
        """Return False while the incident's latest record waits in memory to be written."""
        return incident_id not in _unsaved.get(self._key, {})

    def load(self) -> list[Incident]:
        """Return every incident this version reads, oldest first (see `contents`)."""
        return self.contents().incidents

    def contents(self) -> LogContents:
        """Return the incidents, oldest first, with the records still unsaved in this
        process, and the records written by a newer cudadiag. Unreadable lines are skipped
        with one warning. Reads every record: listing and finding one use `entries`."""
        latest: dict[str, Incident | NewerRecord] = {}
        skipped = 0
        for raw in self._records():
            entry = _read_record(raw)
            if entry is None:
                skipped += 1
                continue
            latest.pop(entry.id, None)
            latest[entry.id] = entry
        if skipped:
            warnings.warn(
                f"cudadiag: skipped {skipped} unreadable line(s) in the incident log {self.home}",
                stacklevel=2,
            )
        entries = sorted(latest.values(), key=lambda e: e.created_at)
        return LogContents(incidents=[e for e in entries if isinstance(e, Incident)],
                           newer=[e for e in entries if isinstance(e, NewerRecord)])

    def entries(self) -> list[IndexEntry]:
        """Return one index entry per incident (its latest record), oldest first, with the
        records still unsaved in this process and those of a newer cudadiag (`newer`).
        Reads the index only, caught up with the log or rebuilt from it first when needed."""
        unsaved = _unsaved.get(self._key, {}).values()
        return self._index_state().latest(entry for _record, entry in unsaved)

    def get(self, incident_id: str | None = None) -> Incident:
        """Return the incident whose id starts with `incident_id` (the newest when None).

        Raises IncidentNotFound when none or several match, IncidentFromNewerVersion when the
        one that matches was recorded by a newer cudadiag.
        """
        if incident_id is None:
            return self._newest()
        matches = self._find(incident_id)
        if len(matches) != 1:
            entries = self.entries()
            if not entries:
                raise IncidentNotFound(f"the incident log {self.path} holds no incident yet")
            known = ", ".join(e.id for e in [e for e in entries if not e.newer][-5:])
            what = "no incident" if not matches else f"{len(matches)} incidents"
            raise IncidentNotFound(
                f"{what} with an id starting with {incident_id!r}; recent ids: {known}"
            )
        return self.read(matches[0])

    def read(self, entry: IndexEntry) -> Incident:
        """Return the incident of an index entry, reading its one record.

        Raises IncidentFromNewerVersion for a record of a newer cudadiag, IncidentNotFound
        when the record is no longer in the log (pruned since the entry was read)."""
        if entry.newer:
            raise IncidentFromNewerVersion(
                f"incident {entry.id} was {entry.describe_newer()}; this cudadiag reads "
                f"schema {SCHEMA} and older. Upgrade cudadiag (pip install -U cudadiag) to "
                "show it.")
        incident = self._read_entry(entry)
        if incident is None:
            incident = self._read_after_resync(entry.id)
        if incident is None:
            raise IncidentNotFound(f"incident {entry.id} is no longer in the incident log "
                                   f"{self.path} (pruned by its retention)")
        return incident

    def log_files(self) -> list[LogFile]:
        """Return the files of the log, oldest first (the current file last)."""
        numbered = []
        with contextlib.suppress(OSError):
            for name in os.listdir(self.home):
                number = name[len(LOG_NAME) + 1:]
                if name.startswith(LOG_NAME + ".") and number.isdigit():
                    numbered.append((int(number), name))
        files = []
        for path in [*(self.home / n for _, n in sorted(numbered, reverse=True)), self.path]:
            try:
                st = os.stat(path)
            except OSError:
                continue
            files.append(LogFile(path, st.st_ino, st.st_size))
        return files

    def prune(self, retention: Retention | None = None,
              now: datetime | None = None) -> PruneResult:
        """Remove the incidents beyond `retention` (default: this store's) with their
        isolated runs' files, and the records superseded by a later one of the same id.

        Raises RetentionConfigError when config.json cannot be read, OSError when the log
        cannot be rewritten (each file is replaced whole: nothing is half-pruned)."""
        retention = retention or self.retention()
        self.home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        with self._locked():
            self._set_aside_torn_tail()  # a fragment is kept aside, never dropped in a rewrite
            return self._prune_locked(retention, now)

    def run_files(self, incident_id: str) -> Path:
        """The folder that keeps an isolated run's RNG states, recorded batch and a pointer
        to its shipped values."""
        return self.home / "runs" / incident_id

    @property
    def _key(self) -> str:
        return os.path.abspath(self.path)

    def _records(self) -> Iterator[bytes]:
        for log_file in self.log_files():
            try:
                yield from log_file.path.read_bytes().splitlines()
            except OSError:
                continue
        yield from [record for record, _entry in _unsaved.get(self._key, {}).values()]

    def _newest(self) -> Incident:
        entries = self.entries()
        if not entries:
            raise IncidentNotFound(f"the incident log {self.path} holds no incident yet")
        readable = [e for e in entries if not e.newer]
        if not readable:
            raise IncidentFromNewerVersion(
                f"every incident of {self.path} was {entries[-1].describe_newer()}; upgrade "
                "cudadiag (pip install -U cudadiag) to read them")
        return self.read(readable[-1])

    def _find(self, prefix: str) -> list[IndexEntry]:
        """The entries (one per incident) whose id starts with `prefix`: found in the index
        file's bytes without parsing it when the index is in step with the log."""
        data = self._current_index_bytes()
        if data is None:
            return [e for e in self.entries() if e.id.startswith(prefix)]
        needle = b'\n["' + json.dumps(prefix)[1:-1].encode()
        found: dict[str, IndexEntry] = {}
        at = data.find(needle)
        while at >= 0:
            line = data[at + 1: data.find(b"\n", at + 1) + 1]
            state = parse_index(HEADER + line)
            if state is None:
                return [e for e in self.entries() if e.id.startswith(prefix)]
            found.update((e.id, e) for e in state.entries)
            at = data.find(needle, at + 1)
        for _record, entry in _unsaved.get(self._key, {}).values():
            if entry.id.startswith(prefix):
                found[entry.id] = entry
        return list(found.values())

    def _current_index_bytes(self) -> bytes | None:
        """The index file's bytes when its last line covers the current log file to its
        end (every record written so far is listed), else None."""
        try:
            data = self.index.path.read_bytes()
            st = os.stat(self.path)
        except OSError:
            return None
        if not data.endswith(b"\n") or not data.startswith(HEADER):
            return None
        last = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]
        try:
            row = json.loads(last)
        except ValueError:
            return None
        if not isinstance(row, list) or row_coverage(row) != (st.st_ino, st.st_size):
            return None
        return data

    def _read_entry(self, entry: IndexEntry) -> Incident | None:
        """The incident at the entry's place, None when the place no longer holds it."""
        if entry.segment == IN_MEMORY:
            pending = _unsaved.get(self._key, {}).get(entry.id)
            found = _read_record(pending[0]) if pending else None
        else:
            path = next((f.path for f in self.log_files() if f.inode == entry.segment), None)
            if path is None:
                return None
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return None
            try:
                raw = os.pread(fd, entry.length, entry.offset)
            finally:
                os.close(fd)
            found = _read_record(raw) if raw.endswith(b"\n") else None
        return found if isinstance(found, Incident) and found.id == entry.id else None

    def _read_after_resync(self, incident_id: str) -> Incident | None:
        """Look an incident up again after the index was brought in step with the log, and
        after a rebuild if the index points at a place that does not hold it."""
        with self._locked(required=False):
            for rebuild in (False, True):
                state = self._rebuild() if rebuild else self._sync_locked()
                entry = next((e for e in reversed(state.entries) if e.id == incident_id),
                             None)
                if entry is None:
                    return None
                incident = self._read_entry(entry)
                if incident is not None:
                    return incident
        return None

    def _index_state(self) -> IndexState:
        """The index, in step with the log: caught up or rebuilt (under the lock) when not."""
        state = self.index.read()
        if state is not None and _in_step(state, self.log_files()):
            return state
        if not self.home.is_dir():
            return IndexState()
        with self._locked(required=False):
            return self._sync_locked()

    def _sync_locked(self) -> IndexState:
        """Under the lock: bring the index in step with the log files and return it."""
        state = self.index.read()
        files = self.log_files()
        if state is None or not _consistent(state, files):
            return self._rebuild(files)
        lines: list[bytes] = []
        for log_file in files:
            covered = state.covered.get(log_file.inode, 0)
            if log_file.size > covered:
                lines += _index_file(log_file, covered, state)
        self.index.append(lines, state.torn_at)
        state.torn_at = None
        return state

    def _rebuild(self, files: list[LogFile] | None = None) -> IndexState:
        """Index every record of the log again and replace the index file (when it can be
        written; the state is returned either way)."""
        state = IndexState()
        for log_file in files if files is not None else self.log_files():
            _index_file(log_file, 0, state)
        self.index.rewrite(state)
        return state

    def _write_unsaved(self, unsaved: dict[str, tuple[bytes, IndexEntry]]) -> None:
        self.home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        with self._locked():
            self._set_aside_torn_tail()
            count, torn_at = self._index_before_append()
            lines = []
            try:
                for incident_id, (record, entry) in list(unsaved.items()):
                    self._rotate_if_full(len(record))
                    segment, offset = self._write_record(record)
                    count += 1
                    lines.append(entry_line(entry._replace(
                        segment=segment, offset=offset, length=len(record)), count))
                    del unsaved[incident_id]
            finally:
                self.index.append(lines, torn_at)
            self._prune_if_due(count)

    def _index_before_append(self) -> tuple[int, int | None]:
        """Under the lock, before a record is appended: make sure the index lists every
        record already written (cheaply: its last line covers the current file to its end)
        and return its entry count and where a torn last line of it starts."""
        fits, row, torn_at = self.index.last_line()
        try:
            st = os.stat(self.path)
            current = (st.st_ino, st.st_size)
        except FileNotFoundError:
            current = None
        if fits:
            if row is None and current is None and len(self.log_files()) == 0:
                return 0, torn_at
            if row is not None and current is not None and row_coverage(row) == current:
                return row[-1], torn_at
        return self._sync_locked().count, None

    def _prune_if_due(self, count: int) -> None:
        """After an append: prune when the log holds more records than the retention keeps
        (with a 2 % margin) or its first record is older than the retention's days."""
        try:
            retention = self.retention()
        except RetentionConfigError as exc:
            if self._key not in _config_errors_told:
                _config_errors_told.add(self._key)
                print(f"cudadiag: nothing is pruned from the incident log: {exc}",
                      file=sys.stderr)
            return
        oldest = self.index.first_created_at()
        if not (retention.due(count) or (oldest and is_older(oldest, retention.cutoff()))):
            return
        try:
            result = self._prune_locked(retention, None)
        except OSError as exc:
            print(f"cudadiag: could not prune the incident log {self.home}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return
        if result.pruned:
            print(result.message(), file=sys.stderr)

    def _prune_locked(self, retention: Retention, now: datetime | None) -> PruneResult:
        state = self._sync_locked()
        latest = state.latest()
        pruned = retention.fallen_out(latest, now)
        gone = {e.id for e in pruned}
        kept = [e for e in latest if e.id not in gone]
        files = self.log_files()
        before = sum(f.size for f in files)
        if not gone and len(kept) == len(state.entries) and state.count == len(kept) \
                and sum(e.length for e in kept) == before:
            return PruneResult(retention, [], 0, 0, 0)
        new_state = IndexState()
        for log_file in files:
            _keep_in_file(log_file, [e for e in kept if e.segment == log_file.inode],
                          log_file.path == self.path, new_state)
        self._renumber_rotated()
        self.index.rewrite(new_state)
        cutoff = retention.cutoff(now)
        return PruneResult(retention, pruned,
                           too_old=sum(is_older(e.created_at, cutoff) for e in pruned),
                           bytes_freed=before - sum(f.size for f in self.log_files()),
                           run_folders=self._remove_run_files(gone))

    def _renumber_rotated(self) -> None:
        """Close the gaps left by removed files: incidents.jsonl.1 .. .N, the oldest last
        (renames keep each file's inode, which the index names it by)."""
        rotated = [f.path for f in self.log_files() if f.path != self.path]
        for number, path in enumerate(reversed(rotated), start=1):
            target = self.home / f"{LOG_NAME}.{number}"
            if path != target:
                path.replace(target)
        sync_folder(self.home)

    def _remove_run_files(self, incident_ids: set[str]) -> int:
        """Remove the run folders of these incidents, and the shipped values no remaining
        run points to; return how many folders were removed."""
        removed = shipped = 0
        for incident_id in incident_ids:
            folder = self.run_files(incident_id)
            if folder.is_dir():
                shipped += (folder / SHIPPED_POINTER).exists()
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        if shipped:
            self._drop_unreferenced_values()
        return removed

    def _drop_unreferenced_values(self) -> None:
        referenced = set()
        for pointer in (self.home / "runs").glob(f"*/{SHIPPED_POINTER}"):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                referenced.add(json.loads(pointer.read_text()).get("sha256"))
        for blob in (self.home / SHIPPED_DIR).glob("*.pkl"):
            if blob.stem not in referenced:
                blob.unlink(missing_ok=True)

    def _write_record(self, record: bytes) -> tuple[int, int]:
        """Append `record` whole and sync it (on failure the file is cut back to where it
        was); return the file's inode and the offset the record starts at."""
        created = not self.path.exists()
        start = append_whole(self.path, record, sync=True)
        if created:
            sync_folder(self.home)
        return os.stat(self.path).st_ino, start

    def _set_aside_torn_tail(self) -> None:
        """A last line without its newline is a record whose writer died: a whole record
        gets its newline, a fragment moves to incidents.torn (or, when that cannot be
        written, gets a newline of its own) so the next record starts on its own line."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            return
        try:
            make_private(fd)
            size = os.fstat(fd).st_size
            if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
                return
            start = _last_line_start(fd, size)
            tail = os.pread(fd, size - start, start)
            if _read_record(tail) is not None or not self._quarantine(tail):
                write_all(fd, b"\n")
            else:
                os.ftruncate(fd, start)
                warnings.warn(
                    f"cudadiag: the incident log {self.path} ended in a torn record "
                    f"({len(tail)} bytes from a write that did not finish); it was moved to "
                    f"{self.home / TORN_NAME}",
                    stacklevel=4,
                )
            os.fsync(fd)
        finally:
            os.close(fd)

    def _quarantine(self, fragment: bytes) -> bool:
        try:
            append_whole(self.home / TORN_NAME, fragment + b"\n", sync=True)
        except OSError:
            return False
        return True

    def _not_saved_message(self, ids: list[str], exc: OSError) -> str:
        what = f"incident {ids[0]}" if len(ids) == 1 else f"incidents {', '.join(ids)}"
        reason = exc.strerror or str(exc)
        return (f"{what} could not be saved to {self.path} ({reason}); kept in memory, it "
                "will be written with the next incident or when Python exits")

    def keep_run_file(self, incident_id: str, source: Path) -> Path:
        """Copy `source` into the incident's run folder under the same name (folders 0700,
        the file 0600); return the copy. Raises OSError when it cannot be written."""
        folder = self._private_dir("runs", incident_id)
        return _private_copy(source, folder / source.name)

    def keep_shipped(self, incident_id: str, pickled: Path) -> str | None:
        """Keep the pickled values an isolated run was shipped, content-addressed under
        `shipped/` (identical values are stored once) with a pointer in the run folder.

        Returns None when kept, else why not (larger than SHIPPED_KEPT_MAX_BYTES). Older
        value files are dropped to keep the folder under SHIPPED_TOTAL_MAX_BYTES. Raises
        OSError when the files cannot be written."""
        size = pickled.stat().st_size
        if size > SHIPPED_KEPT_MAX_BYTES:
            return (f"{size >> 20} MiB of shipped values, more than the "
                    f"{SHIPPED_KEPT_MAX_BYTES >> 20} MiB kept per incident")
        digest = _sha256(pickled)
        blobs = self._private_dir(SHIPPED_DIR)
        blob = blobs / f"{digest}.pkl"
        if blob.exists():
            os.utime(blob)  # recently used: dropped last
        else:
            self._drop_oldest_values(blobs, room=size)
            _private_copy(pickled, blob)
        pointer = self._private_dir("runs", incident_id) / SHIPPED_POINTER
        replace_atomically(pointer, json.dumps({"sha256": digest, "bytes": size}).encode())
        return None

    def shipped_file(self, incident_id: str) -> Path | None:
        """The pickled shipped values kept for an incident, or None when none are kept (or
        they were dropped to make room)."""
        try:
            pointer = json.loads((self.run_files(incident_id) / SHIPPED_POINTER).read_text())
        except (OSError, ValueError):
            return None
        blob = self.home / SHIPPED_DIR / f"{pointer.get('sha256')}.pkl"
        return blob if blob.is_file() else None

    def _private_dir(self, *parts: str) -> Path:
        """The folder home/parts..., each level created 0700 when missing."""
        folder = self.home
        folder.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        for part in parts:
            folder = folder / part
            folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)
            os.chmod(folder, PRIVATE_DIR)
        return folder

    def _drop_oldest_values(self, blobs: Path, room: int) -> None:
        files = sorted(blobs.glob("*.pkl"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        while files and total + room > SHIPPED_TOTAL_MAX_BYTES:
            oldest = files.pop(0)
            total -= oldest.stat().st_size
            oldest.unlink(missing_ok=True)

    def _rotate_if_full(self, incoming: int) -> None:
        """Rename the current file incidents.jsonl.1 (shifting the older ones up) when
        `incoming` bytes would take it past max_bytes."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0 or size + incoming <= self.max_bytes:
            return
        rotated = [f.path for f in self.log_files() if f.path != self.path]
        for number, path in reversed(list(enumerate(reversed(rotated), start=2))):
            path.replace(self.home / f"{LOG_NAME}.{number}")
        self.path.replace(self.home / f"{LOG_NAME}.1")
        sync_folder(self.home)

    @contextmanager
    def _locked(self, required: bool = True) -> Iterator[None]:
        """Hold the log's lock (every writer takes it). When not `required`, go on without
        it where it cannot be taken (a read-only home): readers then work from what they
        read, and writing the index may fail harmlessly."""
        fd = None
        if fcntl is not None:
            try:
                fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                if fd is not None:
                    os.close(fd)
                if required:
                    raise
                fd = None
        try:
            yield
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


def _in_step(state: IndexState, files: list[LogFile]) -> bool:
    """True when the index covers every log file to its end, and nothing else."""
    return _consistent(state, files) and all(
        state.covered.get(f.inode, 0) == f.size for f in files)


def _consistent(state: IndexState, files: list[LogFile]) -> bool:
    """True when every place the index names lies within a log file that exists (it may
    lag behind their ends: records to catch up)."""
    sizes = {f.inode: f.size for f in files}
    return all(segment in sizes and end <= sizes[segment]
               for segment, end in state.covered.items())


def _index_file(log_file: LogFile, start: int, state: IndexState) -> list[bytes]:
    """Index the whole lines of a log file from byte `start` into `state`; return the
    index lines to append (an entry per readable record, then a line covering the rest)."""
    try:
        with open(log_file.path, "rb") as f:
            f.seek(start)
            data = f.read(max(0, log_file.size - start))
    except OSError:
        return []
    end = data.rfind(b"\n") + 1  # a torn last line waits for the next writer
    lines, pos = [], 0
    while pos < end:
        stop = data.index(b"\n", pos) + 1
        raw = data[pos:stop]
        found = _read_record(raw)
        if isinstance(found, Incident):
            entry = entry_for_incident(found, log_file.inode, start + pos, len(raw))
        elif isinstance(found, NewerRecord):
            entry = entry_for_newer(found.id, found.created_at, found.schema, found.family,
                                    log_file.inode, start + pos, len(raw))
        else:
            entry = None
        if entry is not None:
            state.add(entry)
            lines.append(entry_line(entry, state.count))
        pos = stop
    if end and state.covered.get(log_file.inode, -1) < start + end:
        state.cover(log_file.inode, start + end)
        lines.append(cover_line(log_file.inode, start + end, state.count))
    return lines


def _keep_in_file(log_file: LogFile, kept: list[IndexEntry], is_current: bool,
                  state: IndexState) -> None:
    """Leave only the `kept` records in a log file (replaced whole; a rotated file left
    empty is removed) and add their entries, at their new places, to `state`."""
    kept = sorted(kept, key=lambda e: e.offset)
    if sum(e.length for e in kept) == log_file.size:
        for entry in kept:
            state.add(entry)
        state.cover(log_file.inode, log_file.size)
        return
    if not kept and not is_current:
        log_file.path.unlink()
        return
    data = log_file.path.read_bytes()
    moved, offset = [], 0
    for entry in kept:
        moved.append(entry._replace(offset=offset))
        offset += entry.length
    inode = replace_atomically(log_file.path,
                               b"".join(data[e.offset: e.offset + e.length] for e in kept))
    for entry in moved:
        state.add(entry._replace(segment=inode))
    state.cover(inode, offset)


def _secrets_mask(incident: Incident) -> Callable[[str], str]:
    """What masks the values of the secret variables this process knows, in its environment
    and in the run's (`run.env_vars`), wherever a record of `incident` holds them (an error
    message that quotes a key): a report printed later, from a shell that does not know
    them, cannot show them."""
    return env_secret_mask({**os.environ, **incident.run.env_vars})


def record_line(incident: Incident, mask: Callable[[str], str] = str) -> bytes:
    """The log line of `incident`: its JSON without the fields that hold their default
    (reading the record gives them back), its schema always named, `mask` applied to
    every string."""
    data = map_strings(_without_defaults(incident), mask)
    data["schema"] = incident.schema
    return (json.dumps(data, default=str, separators=(",", ":")) + "\n").encode()


def _without_defaults(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _without_defaults(v) for name, default in _defaults(type(value))
                if (v := getattr(value, name)) is not default and (
                    default is _NO_DEFAULT or v != default)}
    if isinstance(value, (list, tuple)):
        return [_without_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_defaults(v) for k, v in value.items()}
    return value


_NO_DEFAULT = object()


@functools.cache
def _defaults(cls: type) -> tuple[tuple[str, Any], ...]:
    """(field name, default) of each field of a dataclass; _NO_DEFAULT for a field that has
    none or one made fresh for each instance (an id, a time), which is always written."""
    found = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            found.append((f.name, f.default))
        elif f.default_factory in (list, dict):
            found.append((f.name, f.default_factory()))
        else:
            found.append((f.name, _NO_DEFAULT))
    return tuple(found)


def _read_record(raw: bytes) -> Incident | NewerRecord | None:
    """The incident a line holds, a NewerRecord for a newer schema, None if unreadable."""
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if isinstance(data, dict) and is_newer_schema(data.get("schema")) and "id" in data:
        diagnosis = data.get("diagnosis")
        family = diagnosis.get("family") if isinstance(diagnosis, dict) else None
        return NewerRecord(id=str(data["id"]), created_at=str(data.get("created_at", "")),
                           schema=data.get("schema"),
                           family=family if isinstance(family, str) else None)
    try:
        return Incident.from_dict(data)
    except (ValueError, TypeError, KeyError, IncidentSchemaError):
        return None


def _last_line_start(fd: int, size: int) -> int:
    """The offset just after the last newline before `size` (0 if there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_CHUNK)
        at = os.pread(fd, end - begin, begin).rfind(b"\n")
        if at >= 0:
            return begin + at + 1
        end = begin
    return 0


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
        except OSError as exc:
            print(f"cudadiag: incident(s) {', '.join(unsaved)} could not be saved to {key} "
                  f"({exc.strerror or exc}) and are lost with this process",
                  file=sys.stderr)


def _private_copy(source: Path, target: Path) -> Path:
    replace_atomically(target, source.read_bytes())
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
