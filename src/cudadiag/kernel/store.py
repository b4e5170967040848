"""The incident log on disk: JSON lines, appended atomically, bounded by rotation.

An incident that changes (a later error appended) is written again with the same id; the
last record of an id wins. The log lives in the user cache directory, or `$CUDADIAG_HOME`,
so it survives kernel restarts and is shared by every kernel and the `cudadiag` command.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cudadiag.incident import Incident, IncidentSchemaError

try:
    import fcntl
except ImportError:  # Windows: appends of one write() each are still whole lines
    fcntl = None  # type: ignore[assignment]

LOG_NAME = "incidents.jsonl"
MAX_BYTES = 8 * 2**20
KEEP_ROTATED = 3
SHIPPED_DIR = "shipped"
SHIPPED_POINTER = "shipped.json"
SHIPPED_KEPT_MAX_BYTES = 256 * 2**20
"""Shipped values larger than this are not kept with the incident (export then says so)."""
SHIPPED_TOTAL_MAX_BYTES = 1 * 2**30
"""The kept shipped values of all incidents together; the least recently used go first."""


class IncidentNotFound(LookupError):
    """No incident, or more than one, matches the id given."""


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
        """Write `incident` as one line. Raises OSError when the log cannot be written."""
        line = (json.dumps(incident.to_dict(), default=str) + "\n").encode()
        self.home.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._rotate_if_full(len(line))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def load(self) -> list[Incident]:
        """Return every incident, oldest first; unreadable lines are skipped with one warning."""
        latest: dict[str, Incident] = {}
        skipped = 0
        for path in self._files_oldest_first():
            try:
                lines = path.read_bytes().splitlines()
            except OSError:
                continue
            for raw in lines:
                if not raw.strip():
                    continue
                try:
                    incident = Incident.from_dict(json.loads(raw))
                except (ValueError, TypeError, KeyError, IncidentSchemaError):
                    skipped += 1
                    continue
                latest.pop(incident.id, None)
                latest[incident.id] = incident
        if skipped:
            warnings.warn(
                f"cudadiag: skipped {skipped} unreadable line(s) in the incident log {self.home}",
                stacklevel=2,
            )
        return sorted(latest.values(), key=lambda i: i.created_at)

    def get(self, incident_id: str | None = None) -> Incident:
        """Return the incident whose id starts with `incident_id` (the newest when None).

        Raises IncidentNotFound when none or several match.
        """
        incidents = self.load()
        if not incidents:
            raise IncidentNotFound(f"the incident log {self.path} holds no incident yet")
        if incident_id is None:
            return incidents[-1]
        matches = [i for i in incidents if i.id.startswith(incident_id)]
        if len(matches) != 1:
            known = ", ".join(i.id for i in incidents[-5:])
            what = "no incident" if not matches else f"{len(matches)} incidents"
            raise IncidentNotFound(
                f"{what} with an id starting with {incident_id!r}; recent ids: {known}"
            )
        return matches[0]

    def run_files(self, incident_id: str) -> Path:
        """The folder that keeps an isolated run's RNG states, recorded batch and a pointer
        to its shipped values."""
        return self.home / "runs" / incident_id

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
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for part in parts:
            folder = folder / part
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)
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

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _private_write(target: Path, data: bytes) -> None:
    """Write `data` to `target` as a 0600 file, through a temporary name and a rename."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
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
