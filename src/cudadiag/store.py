"""The incident log on disk: JSON lines, appended whole and synced, bounded by rotation.

An incident that changes (a later error appended) is written again with the same id; the
last record of an id wins. The log lives in the user cache directory, or `$CUDADIAG_HOME`,
so it survives kernel restarts and is shared by every kernel and the `cudadiag` command.

Nothing is lost quietly: a write is looped until every byte is down and then synced; a write
that fails is cut back off the file, and the record stays in this process's memory to be
written with the next record (or at exit); a torn last line left by a writer that died is set
aside before the next append, so it never swallows the next record. Everything created here
is private to the user (folders 0700, files 0600).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudadiag.errors import (
    IncidentFromNewerVersion,
    IncidentNotFound,
    IncidentNotSaved,
    IncidentSchemaError,
)
from cudadiag.incident import SCHEMA, Incident

try:
    import fcntl
except ImportError:  # Windows: appends of one write() each are still whole lines
    fcntl = None  # type: ignore[assignment]

LOG_NAME = "incidents.jsonl"
TORN_NAME = "incidents.torn"
"""Where torn last lines of the log are set aside (a writer died mid-record)."""
MAX_BYTES = 8 * 2**20
KEEP_ROTATED = 3
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_TAIL_CHUNK = 64 * 2**10

_unsaved: dict[str, dict[str, bytes]] = {}
"""Records this process could not write, by log path, then incident id (oldest first)."""
_exit_retry_registered = False
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

    def describe(self) -> str:
        """Return `recorded by a newer cudadiag (schema N)`."""
        return f"recorded by a newer cudadiag (schema {self.schema})"


@dataclass
class LogContents:
    """What the log holds: the incidents this version reads, and the newer records."""

    incidents: list[Incident]
    newer: list[NewerRecord]


def default_home() -> Path:
    """Return `$CUDADIAG_HOME`, else the user cache directory for cudadiag."""
    home = os.environ.get("CUDADIAG_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("cudadiag"))


class IncidentStore:
    """Append-only incident log with rotation. Safe with several processes writing at once."""

    def __init__(self, home: Path | str | None = None, max_bytes: int = MAX_BYTES,
                 keep: int = KEEP_ROTATED) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.max_bytes = max_bytes
        self.keep = keep

    @property
    def path(self) -> Path:
        """The current log file."""
        return self.home / LOG_NAME

    def append(self, incident: Incident) -> None:
        """Write `incident` as one line, after any record of this process still unsaved.

        Raises IncidentNotSaved when the log cannot be written: the record is kept in memory
        and written with the next append (or at exit).
        """
        record = (json.dumps(incident.to_dict(), default=str) + "\n").encode()
        unsaved = _unsaved.setdefault(self._key, {})
        unsaved.pop(incident.id, None)
        unsaved[incident.id] = record
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
        with one warning."""
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

    def get(self, incident_id: str | None = None) -> Incident:
        """Return the incident whose id starts with `incident_id` (the newest when None).

        Raises IncidentNotFound when none or several match, IncidentFromNewerVersion when the
        one that matches was recorded by a newer cudadiag.
        """
        contents = self.contents()
        incidents, newer = contents.incidents, contents.newer
        if not incidents and not newer:
            raise IncidentNotFound(f"the incident log {self.path} holds no incident yet")
        if incident_id is None:
            if incidents:
                return incidents[-1]
            raise IncidentFromNewerVersion(
                f"every incident of {self.path} was {newer[-1].describe()}; upgrade cudadiag "
                "(pip install -U cudadiag) to read them")
        matches = [e for e in (*incidents, *newer) if e.id.startswith(incident_id)]
        if len(matches) != 1:
            known = ", ".join(i.id for i in incidents[-5:])
            what = "no incident" if not matches else f"{len(matches)} incidents"
            raise IncidentNotFound(
                f"{what} with an id starting with {incident_id!r}; recent ids: {known}"
            )
        (match,) = matches
        if isinstance(match, NewerRecord):
            raise IncidentFromNewerVersion(
                f"incident {match.id} was {match.describe()}; this cudadiag reads schema "
                f"{SCHEMA} and older. Upgrade cudadiag (pip install -U cudadiag) to show it.")
        return match

    def run_files(self, incident_id: str) -> Path:
        """The folder that keeps an isolated run's RNG states, recorded batch and a pointer
        to its shipped values."""
        return self.home / "runs" / incident_id

    @property
    def _key(self) -> str:
        return os.path.abspath(self.path)

    def _records(self) -> Iterator[bytes]:
        for path in self._files_oldest_first():
            try:
                yield from path.read_bytes().splitlines()
            except OSError:
                continue
        yield from list(_unsaved.get(self._key, {}).values())

    def _write_unsaved(self, unsaved: dict[str, bytes]) -> None:
        self.home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        with self._locked():
            self._set_aside_torn_tail()
            for incident_id, record in list(unsaved.items()):
                self._rotate_if_full(len(record))
                self._write_record(record)
                del unsaved[incident_id]

    def _write_record(self, record: bytes) -> None:
        """Append `record` whole and sync it; on failure cut the file back to where it was."""
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
        try:
            start = os.fstat(fd).st_size
            try:
                _write_all(fd, record)
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
        if created:
            _sync_folder(self.home)

    def _set_aside_torn_tail(self) -> None:
        """A last line without its newline is a record whose writer died: a whole record
        gets its newline, a fragment moves to incidents.torn (or, when that cannot be
        written, gets a newline of its own) so the next record starts on its own line."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            return
        try:
            _make_private(fd)
            size = os.fstat(fd).st_size
            if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
                return
            start = _last_line_start(fd, size)
            tail = os.pread(fd, size - start, start)
            if _read_record(tail) is not None or not self._quarantine(tail):
                _write_all(fd, b"\n")
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
        path = self.home / TORN_NAME
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
        except OSError:
            return False
        try:
            start = os.fstat(fd).st_size
            _write_all(fd, fragment + b"\n")
            os.fsync(fd)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            return False
        finally:
            os.close(fd)

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
        _private_write(pointer, json.dumps({"sha256": digest, "bytes": size}).encode())
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

    def _files_oldest_first(self) -> list[Path]:
        rotated = [self.home / f"{LOG_NAME}.{n}" for n in range(self.keep, 0, -1)]
        return [p for p in (*rotated, self.path) if p.exists()]

    def _rotate_if_full(self, incoming: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + incoming <= self.max_bytes:
            return
        for n in range(self.keep - 1, 0, -1):
            older = self.home / f"{LOG_NAME}.{n}"
            if older.exists():
                older.replace(self.home / f"{LOG_NAME}.{n + 1}")
        self.path.replace(self.home / f"{LOG_NAME}.1")
        _sync_folder(self.home)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_record(raw: bytes) -> Incident | NewerRecord | None:
    """The incident a line holds, a NewerRecord for a newer schema, None if unreadable."""
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if isinstance(data, dict) and _is_newer(data.get("schema")) and "id" in data:
        diagnosis = data.get("diagnosis")
        family = diagnosis.get("family") if isinstance(diagnosis, dict) else None
        return NewerRecord(id=str(data["id"]), created_at=str(data.get("created_at", "")),
                           schema=data.get("schema"),
                           family=family if isinstance(family, str) else None)
    try:
        return Incident.from_dict(data)
    except (ValueError, TypeError, KeyError, IncidentSchemaError):
        return None


def _is_newer(schema: Any) -> bool:
    return schema is not None and (not isinstance(schema, int) or schema > SCHEMA)


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may be short on a nearly full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"write returned {written} with {len(view)} bytes left")
        view = view[written:]


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


def _make_private(fd: int) -> None:
    """Logs written by older versions may be readable by others: make them the user's."""
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, PRIVATE_FILE)


def _sync_folder(folder: Path) -> None:
    """Make a new or renamed file's name durable (no-op where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
def _private_write(target: Path, data: bytes) -> None:
    """Write `data` to `target` as a 0600 file, through a temporary name and a rename."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        partial.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(partial, target)


def _private_copy(source: Path, target: Path) -> Path:
    _private_write(target, source.read_bytes())
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
