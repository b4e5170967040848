"""The log's SQLite database: where it lives, how it is opened (pragmas, locking, network
filesystems), its table, and what its failures mean to a user.

Every kernel and `cudadiag run` writes through SQLite's own locking, waiting up to
BUSY_TIMEOUT_S for another writer. On a local disk the journal is a write-ahead log (WAL):
readers never wait for a writer. WAL needs memory shared between processes, which a network
filesystem does not give, so there the journal is a rollback journal (DELETE). Where file
locks fail (an NFS mount without its lock daemon: ENOLCK), SQLite's fcntl locks would read
as "database is locked" for ever; a probe on open sees it and the database is opened with
lock files instead (SQLite's unix-dotfile VFS), a lock left by a writer that died being
removed once it is older than STALE_LOCK_S. Every write is synced (synchronous=FULL).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from cudadiag.durable import FREE_SPACE, PRIVATE_DIR, PRIVATE_FILE, WRITABLE, YOURS, write_failure
from cudadiag.i18n import N_, _
from cudadiag.log.entry import LogEntry

try:
    import fcntl
except ImportError:  # Windows: SQLite locks with its own calls
    fcntl = None  # type: ignore[assignment]

DB_NAME = "incidents.sqlite3"
FORMAT = 1
"""The database's format (PRAGMA user_version); 0 is a database not set up yet."""
BUSY_TIMEOUT_S = 10.0
STALE_LOCK_S = 60.0
"""A lock file older than this is one a writer that died left (no write takes so long)."""
MOUNTS = Path("/proc/mounts")
LOCK_PROBE = "lock-probe"

NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "fuse.ceph",
    "glusterfs", "fuse.glusterfs", "fuse.sshfs", "sshfs", "9p", "afs", "beegfs",
    "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "panfs", "pvfs2",
    "orangefs", "wekafs", "fuse.weka",
})
"""Filesystem types (/proc/mounts) where WAL must not be used: "WAL does not work over a
network filesystem" (https://www.sqlite.org/wal.html, section 8, and
https://www.sqlite.org/useovernet.html)."""

_FAILURES = {
    "SQLITE_FULL": (N_("No space left on device"), FREE_SPACE),
    "SQLITE_READONLY": (N_("read-only"), WRITABLE),
    "SQLITE_CANTOPEN": (N_("cannot open the database file"), YOURS),
    "SQLITE_BUSY": (N_("locked by another process for more than {seconds:g} s"),
                    N_("; try again when it is done")),
    "SQLITE_IOERR": (N_("input/output error"), N_("; check the disk")),
    "SQLITE_NOTADB": (N_("the database is damaged"), N_("; move it aside")),
    "SQLITE_CORRUPT": (N_("the database is damaged"), N_("; move it aside")),
}
"""What an SQLite error means to a user (its primary code, sqlite3.Error.sqlite_errorname
without its extended part): the reason, then what to do (in English: shown with `_`)."""
DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")

TABLES = """
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY NOT NULL,
    created_at TEXT NOT NULL,
    family TEXT,
    sticky INTEGER NOT NULL DEFAULT 0,
    mode TEXT,
    cell INTEGER,
    script TEXT,
    summary TEXT NOT NULL DEFAULT '',
    simulated INTEGER NOT NULL DEFAULT 0,
    "schema",
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_by_time ON incidents (
    created_at, id, family, sticky, mode, cell, script, summary, simulated, "schema");
"""
"""The index holds every column a listing reads: a listing reads the index alone, never the
table's pages, where each row's record (kilobytes) sits beside its columns."""
COLUMNS = 'id, created_at, family, sticky, mode, cell, script, summary, simulated, "schema"'
_PUT = (f"INSERT INTO incidents ({COLUMNS}, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in [*COLUMNS.split(", "), "record"][1:]))

CACHED_CONNECTIONS = 4
"""Connections kept open per process (the homes used last): an append then costs its
commit, not an open and the checkpoint of a close."""
_connections: OrderedDict[tuple[str, int], tuple[int, int, sqlite3.Connection]] = OrderedDict()
"""Open connections by database path and thread (sqlite3 refuses a connection to any thread
but its own: an export's verdict is written from a background thread), with the process and
the database's inode they were opened for (a database moved aside or removed is opened
again; a forked child opens its own)."""
_inherited: list[sqlite3.Connection] = []
"""Connections a forked child inherited, or another thread's that were let go: kept, never
closed here, so that closing them cannot touch the parent's journal (nor raise in a thread
that does not own them)."""
_locks_work: dict[str, bool] = {}
"""Whether file locks work in a home, probed once per process."""


@dataclass(frozen=True)
class Opening:
    """How the database of a home is opened: its VFS (None: SQLite's default, fcntl locks)
    and journal mode."""

    vfs: str | None
    journal: str


def database_path(home: Path) -> Path:
    """The log's database in `home`."""
    return home / DB_NAME


def filesystem_type(path: Path, mounts: Path | None = None) -> str | None:
    """The type of the filesystem `path` lies on (the longest mount point above it in
    /proc/mounts), None where that cannot be read."""
    try:
        lines = (mounts or MOUNTS).read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, found = -1, None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, found = len(point), fields[2]
    return found


def locks_work(home: Path) -> bool:
    """True unless taking a file lock in `home` fails with ENOLCK (or is not supported):
    probed once per process on a file of its own, never on the database (closing another
    descriptor of the database would drop SQLite's locks)."""
    key = os.path.abspath(home)
    if key not in _locks_work:
        _locks_work[key] = _probe_locks(home / LOCK_PROBE)
    return _locks_work[key]


def _probe_locks(probe: Path) -> bool:
    if fcntl is None:
        return True
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    except OSError:
        return True  # an unwritable home: nothing is written, nothing to lock
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as exc:
        return exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
    finally:
        os.close(fd)
    return True


def opening(home: Path) -> Opening:
    """How to open the database of `home`: lock files where locks fail, a rollback journal
    on a network filesystem, else WAL."""
    if not locks_work(home):
        return Opening(vfs="unix-dotfile", journal="DELETE")
    network = filesystem_type(home) in NETWORK_FILESYSTEMS
    return Opening(vfs=None, journal="DELETE" if network else "WAL")


def connect(home: Path, prepare: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    """The open connection to the database of `home` for writing (home 0700 and files 0600,
    created when missing; kept open for the next call: never close it), set up on first
    open with `prepare` (inside the transaction that creates the table). A damaged
    database is moved aside, with one line on stderr, and a new one started.

    Raises OSError or sqlite3.Error when it cannot be opened or set up."""
    path = database_path(home)
    key = (os.path.abspath(path), threading.get_ident())
    cached = _connections.get(key)
    if cached is not None:
        pid, inode, conn = cached
        if pid == os.getpid() and _inode(path) == inode:
            _connections.move_to_end(key)
            return conn
        _forget(key)
    home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    try:
        conn = _open_prepared(home, path, prepare)
    except sqlite3.DatabaseError as exc:
        if error_name(exc) not in DAMAGED:
            raise
        _set_aside(path, exc)
        conn = _open_prepared(home, path, prepare)
    _connections[key] = (os.getpid(), _inode(path), conn)
    while len(_connections) > CACHED_CONNECTIONS:
        _forget(next(iter(_connections)))
    return conn


@contextlib.contextmanager
def reading(home: Path, prepare: Callable[[sqlite3.Connection], None]
            ) -> Iterator[sqlite3.Connection | None]:
    """A connection to read the database of `home`: the writing one where the home allows
    (so that a first open sets it up), else read-only; an unwritable home that has no
    database yet but older logs gets one in memory, filled by `prepare`. None when there
    is nothing to read.

    Raises sqlite3.Error when an existing database cannot be read."""
    path = database_path(home)
    if not home.is_dir():
        yield None
        return
    kept = True
    try:
        conn = connect(home, prepare)
    except (OSError, sqlite3.Error):
        kept = False
        if path.exists():
            try:
                conn = _read_only(path, immutable=False)
            except sqlite3.Error:
                conn = _read_only(path, immutable=True)
        else:
            conn = sqlite3.connect(":memory:", isolation_level=None)
            _set_up(conn, prepare)
    try:
        yield conn
    finally:
        if not kept:
            conn.close()


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


def _forget(key: tuple[str, int]) -> None:
    pid, _inode_number, conn = _connections.pop(key)
    if pid == os.getpid() and key[1] == threading.get_ident():
        conn.close()
    else:
        _inherited.append(conn)


def _read_only(path: Path, immutable: bool) -> sqlite3.Connection:
    flag = "&immutable=1" if immutable else ""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro{flag}", uri=True,
                           timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute("SELECT count(*) FROM incidents").fetchone()
    return conn


def _open_prepared(home: Path, path: Path, prepare: Callable[[sqlite3.Connection], None]
                   ) -> sqlite3.Connection:
    how = opening(home)
    _create_private(path)
    vfs = f"&vfs={how.vfs}" if how.vfs else ""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rwc{vfs}", uri=True,
                           timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        if how.vfs == "unix-dotfile":
            _clear_stale_lock(path)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if conn.execute("PRAGMA user_version").fetchone()[0] < FORMAT:
            _set_up(conn, prepare)
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.upper() != how.journal:
            conn.execute(f"PRAGMA journal_mode = {how.journal}")
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _set_up(conn: sqlite3.Connection, prepare: Callable[[sqlite3.Connection], None]) -> None:
    """Create the table and run `prepare` in one transaction, once: a second process that
    waited for the first finds the format set and does nothing."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table: prunes free
    with transaction(conn):
        if conn.execute("PRAGMA user_version").fetchone()[0] >= FORMAT:
            return
        for statement in TABLES.split(";"):
            if statement.strip():
                conn.execute(statement)
        prepare(conn)
        conn.execute(f"PRAGMA user_version = {FORMAT}")


def _create_private(path: Path) -> None:
    """Create the database file 0600 before SQLite does (its journals take its mode), and
    make an existing one private."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def _clear_stale_lock(path: Path) -> None:
    """Remove the lock file (a folder) of the unix-dotfile VFS when a writer that died left
    it: older than STALE_LOCK_S."""
    lock = path.with_name(path.name + ".lock")
    with contextlib.suppress(OSError):
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            if lock.is_dir():
                lock.rmdir()
            else:
                lock.unlink()


def _set_aside(path: Path, exc: sqlite3.Error) -> Path:
    """Move a damaged database (and its journals) to incidents-damaged-TIME.sqlite3 and say
    so in one line; return where it went. Raises OSError when it cannot be moved."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"incidents-damaged-{stamp}.sqlite3")
    for suffix in ("-wal", "-shm", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            shutil.move(side, target.with_name(target.name + suffix))
    path.replace(target)
    print(_("cudadiag: the incident log {path} is damaged ({error}); moved to {target}, a "
            "new log is started (earlier log files are imported again)").format(
        path=path, error=exc, target=target), file=sys.stderr)
    return target


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction (BEGIN IMMEDIATE: the write lock is taken first, waiting up to
    the busy timeout), committed at the end, rolled back on an error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def put(conn: sqlite3.Connection, entry: LogEntry, record: str) -> None:
    """Write the row of an incident (replacing its earlier row, if any)."""
    schema = entry.schema if isinstance(entry.schema, (int, str)) or entry.schema is None \
        else repr(entry.schema)
    conn.execute(_PUT, (*entry[:-1], schema, record))


def entry_of_row(row: tuple[object, ...]) -> LogEntry:
    """The log entry of a row of COLUMNS."""
    rid, created, family, sticky, mode, cell, script, summary, simulated, schema = row
    return LogEntry(str(rid), str(created), family if isinstance(family, str) else None,
                    bool(sticky), mode if isinstance(mode, str) else None,
                    cell if isinstance(cell, int) else None,
                    script if isinstance(script, str) else None, str(summary or ""),
                    bool(simulated), schema)


def error_name(exc: sqlite3.Error) -> str:
    """The primary SQLite code of an error (`SQLITE_FULL` for SQLITE_FULL_...), '' if none."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    parts = name.split("_")
    return "_".join(parts[:2]) if len(parts) > 1 else name


def failure_reason(exc: OSError | sqlite3.Error) -> str:
    """What went wrong, in a few words (`No space left on device`, `read-only`...)."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    known = _FAILURES.get(error_name(exc))
    return _(known[0]).format(seconds=BUSY_TIMEOUT_S) if known else str(exc)


def write_failure_text(home: Path, exc: OSError | sqlite3.Error) -> str:
    """Return `could not write NAME in HOME: REASON; WHAT TO DO`."""
    if isinstance(exc, OSError):
        name = Path(exc.filename).name if exc.filename else DB_NAME
        return write_failure(name, home, exc)
    _reason, hint = _FAILURES.get(error_name(exc), ("", ""))
    return (_("could not write {name} in {folder}: {reason}").format(
        name=DB_NAME, folder=home, reason=failure_reason(exc)) + _(hint))
