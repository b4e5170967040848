"""The incident log in SQLite: listing and finding read the columns, never the records;
three writers and a prune at once; a locked, damaged or read-only database; a network
filesystem, and one whose locks fail."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudadiag import classify
from cudadiag.errors import IncidentNotSaved
from cudadiag.incident import ErrorInfo, Frame, Incident, RunInfo
from cudadiag.log import database
from cudadiag.log import store as store_module
from cudadiag.log.retention import Retention
from cudadiag.log.store import IncidentStore
from log_helpers import close_connections, mounted_tmpfs

ASSERT = "CUDA error: device-side assert triggered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


def make_incident(message: str = ASSERT, cell: int = 3, mode: str = "kernel",
                  created_at: str | None = None) -> Incident:
    incident = Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                        diagnosis=classify(message), run=RunInfo(mode=mode, cells=[cell]))
    if created_at:
        incident.created_at = created_at
    return incident


@pytest.fixture(autouse=True)
def no_unsaved_records_between_tests():
    store_module._unsaved.clear()
    yield
    store_module._unsaved.clear()


def _filled(n: int = 5) -> tuple[IncidentStore, list[Incident]]:
    store = IncidentStore()
    made = [make_incident(OOM if k % 2 else ASSERT, cell=k + 1,
                          created_at=f"2026-12-0{k + 1}T10:00:00+00:00") for k in range(n)]
    for incident in made:
        store.append(incident)
    return store, made


def _no_record_parsed(monkeypatch) -> None:
    def refuse(cls, data):
        raise AssertionError("a record was parsed")

    monkeypatch.setattr(Incident, "from_dict", classmethod(refuse))


def test_the_columns_hold_what_a_listing_shows():
    store, made = _filled(2)
    isolated = make_incident(cell=7, mode="isolated")
    isolated.run.cells = [5, 7]
    isolated.error.reported_at = Frame(file="<cell>", line=2, function="<module>", cell=7)
    store.append(isolated)
    entries = store.entries()
    assert [e.id for e in entries] == [*(i.id for i in made), isolated.id]
    first = entries[0]
    assert (first.family, first.sticky, first.mode, first.cell) == ("device_assert", True,
                                                                    "kernel", 1)
    summary = made[0].diagnosis.summary
    assert len(summary) > 90 and first.summary == summary[:89] + "…"  # as a listing cuts it
    assert entries[1].family == "oom" and not entries[1].sticky
    assert entries[-1].where() == "In[7]"  # the cell that raised, not the first replayed


def test_listing_and_finding_read_the_columns_and_one_record(monkeypatch, capsys):
    from cudadiag import cli

    _, made = _filled(6)
    parsed = []
    real = Incident.from_dict.__func__
    monkeypatch.setattr(Incident, "from_dict",
                        classmethod(lambda cls, data: parsed.append(data["id"]) or real(cls,
                                                                                         data)))
    assert cli.main(["incidents"]) == 0
    out = capsys.readouterr().out
    assert all(i.id in out for i in made)
    assert parsed == []
    assert cli.main(["show", made[2].id[:6]]) == 0
    assert f"Incident {made[2].id}" in capsys.readouterr().out
    assert parsed == [made[2].id]


def test_an_updated_incident_is_listed_once_with_its_latest_record():
    store, made = _filled(2)
    made[0].error.message = "updated"
    store.append(made[0])
    entries = store.entries()
    assert [e.id for e in entries] == [i.id for i in made]
    assert store.get(made[0].id).error.message == "updated"




WRITER = """
import sys
from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.store import IncidentStore
store = IncidentStore(sys.argv[1])
for n in range(int(sys.argv[2])):
    text = "CUDA error: device-side assert triggered" if n % 2 else "CUDA out of memory"
    incident = Incident(error=ErrorInfo(type="RuntimeError", message=text, text=text),
                        diagnosis=classify(text), run=RunInfo(mode="cli"))
    store.append(incident)
    print(incident.created_at, incident.id, flush=True)
"""

PRUNER = """
import sys
from cudadiag.log.retention import Retention
from cudadiag.log.store import IncidentStore
store = IncidentStore(sys.argv[1])
for _ in range(int(sys.argv[2])):
    store.prune(Retention(incidents=int(sys.argv[3])))
"""


def _writers(home: Path, count: int, env: dict | None = None) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", WRITER, str(home), str(count)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env) for _ in range(3)]


def _written(writers: list[subprocess.Popen]) -> list[tuple[str, str]]:
    made = []
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0 and "could not be saved" not in err, err
        made += [tuple(line.split()) for line in out.splitlines()]
    return made


@pytest.mark.slow
def test_three_writers_and_a_prune_at_once_lose_nothing_the_retention_keeps(tmp_path):
    (tmp_path / "config.json").write_text('{"retention": {"incidents": 100000}}')
    writers = _writers(tmp_path, 40)
    pruner = subprocess.run([sys.executable, "-c", PRUNER, str(tmp_path), "20", "30"],
                            capture_output=True, text=True, timeout=300)
    assert pruner.returncode == 0, pruner.stderr
    made = _written(writers)
    assert len(made) == 120
    kept = {e.id for e in IncidentStore(tmp_path).entries()}
    assert kept <= {rid for _created, rid in made}
    cut = sorted(made)[-30][0]  # times are to the second: the 30 newest may tie at the cut
    newest = {rid for created, rid in made if created > cut}
    assert newest <= kept  # a prune never drops the newest it keeps
    assert len(IncidentStore(tmp_path).prune(Retention(incidents=30)).pruned) == len(kept) - 30
    final = {e.id for e in IncidentStore(tmp_path).entries()}
    assert len(final) == 30 and newest <= final


def test_a_locked_database_keeps_the_incident_in_memory_and_writes_it_later(monkeypatch):
    store, made = _filled(1)
    monkeypatch.setattr(database, "BUSY_TIMEOUT_S", 0.2)
    close_connections()
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing for longer than the timeout
    waiting = make_incident(OOM)
    with pytest.raises(IncidentNotSaved, match="locked by another process") as caught:
        store.append(waiting)
    assert f"incident {waiting.id} could not be saved" in str(caught.value)
    assert [e.id for e in store.entries()] == [made[0].id, waiting.id]  # from memory
    holder.execute("ROLLBACK")
    holder.close()
    later = make_incident()
    store.append(later)
    assert store.is_saved(waiting.id)
    with sqlite3.connect(store.path) as db:
        assert [r[0] for r in db.execute("SELECT id FROM incidents ORDER BY rowid")] == [
            made[0].id, waiting.id, later.id]


def test_a_damaged_database_is_moved_aside_in_one_line_and_a_new_one_started(capsys):
    store, _made = _filled(2)
    close_connections()
    for side in store.home.glob("incidents.sqlite3-*"):
        side.unlink()
    store.path.write_bytes(b"this is not a database, a disk error left it so" * 100)
    incident = make_incident()
    store.append(incident)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"cudadiag: the incident log {store.path} is damaged (")
    (aside,) = store.home.glob("incidents-damaged-*.sqlite3")
    assert f"moved to {aside}, a new log is started" in line
    assert aside.read_bytes().startswith(b"this is not a database")
    assert [e.id for e in store.entries()] == [incident.id]


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs that can be made read-only (needs mount rights)."""
    with mounted_tmpfs(tmp_path / "disk", "4m") as mount_point:
        yield mount_point


def _read_only(mount_point: Path) -> None:
    close_connections()
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)


def test_a_read_only_home_lists_and_shows_and_keeps_new_incidents_in_memory(small_disk):
    store = IncidentStore(small_disk / "home")
    first = make_incident()
    store.append(first)
    _read_only(small_disk)
    assert [e.id for e in store.entries()] == [first.id]
    assert store.get(first.id[:6]).id == first.id
    later = make_incident(OOM)
    with pytest.raises(IncidentNotSaved, match="could not be saved"):
        store.append(later)
    assert [e.id for e in store.entries()] == [first.id, later.id]


def test_a_prune_on_a_read_only_home_says_so_in_one_line(small_disk, capsys, monkeypatch):
    from cudadiag import cli

    home = small_disk / "home"
    monkeypatch.setenv("CUDADIAG_HOME", str(home))
    for n in range(3):
        IncidentStore().append(make_incident(created_at=f"2026-12-0{n + 1}T10:00:00+00:00"))
    _read_only(small_disk)
    assert cli.main(["incidents", "--prune", "--keep", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudadiag incidents: nothing was pruned: could not write ")
    assert f" in {home}: " in err and err.count("\n") == 1
    assert len(IncidentStore().entries()) == 3


def test_a_network_filesystem_gets_a_rollback_journal(cudadiag_home, tmp_path, monkeypatch):
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {cudadiag_home.parent} nfs4 "
                      "rw,relatime 0 0\n")
    monkeypatch.setattr(database, "MOUNTS", mounts)
    assert database.filesystem_type(cudadiag_home) == "nfs4"
    store = IncidentStore()
    store.append(make_incident())
    conn = database.connect(store.home, lambda _conn: None)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not list(cudadiag_home.glob("*-wal"))


NO_LOCKS = """
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>

/* fcntl as on an NFS mount without its lock daemon: every lock request fails, ENOLCK */
static int is_lock(int cmd) {
    return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_GETLK
        || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK;
}

static int call(const char *name, int fd, int cmd, void *arg) {
    if (is_lock(cmd)) { errno = ENOLCK; return -1; }
    int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);
    return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...) {
    va_list ap; va_start(ap, cmd); void *arg = va_arg(ap, void *); va_end(ap);
    return call("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
    va_list ap; va_start(ap, cmd); void *arg = va_arg(ap, void *); va_end(ap);
    return call("fcntl64", fd, cmd, arg);
}
"""


@pytest.fixture
def failing_locks(tmp_path) -> Path:
    """A shared library that makes every fcntl lock fail with ENOLCK (LD_PRELOAD)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the failing-locks library")
    source = tmp_path / "nolocks.c"
    source.write_text(textwrap.dedent(NO_LOCKS))
    library = tmp_path / "nolocks.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"],
                   check=True)
    return library


@pytest.mark.slow
def test_where_file_locks_fail_three_writers_lose_nothing(tmp_path, failing_locks):
    import os

    env = {**os.environ, "LD_PRELOAD": str(failing_locks)}
    probe = subprocess.run([sys.executable, "-c", "import fcntl, sys; fcntl.lockf("
                            "open(sys.argv[1], 'w'), fcntl.LOCK_EX)", str(tmp_path / "p")],
                           env=env, capture_output=True, text=True)
    assert "No locks available" in probe.stderr  # the library does fail locks
    home = tmp_path / "home"
    made = _written(_writers(home, 20, env))
    assert len(made) == 60
    listed = subprocess.run([sys.executable, "-m", "cudadiag.cli", "incidents", "--all"],
                            env={**env, "CUDADIAG_HOME": str(home)}, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {line.split()[0] for line in listed.stdout.splitlines()[1:]} == {
        rid for _created, rid in made}
    assert not (home / "incidents.sqlite3-wal").exists()  # lock files, a rollback journal


def test_an_incident_written_from_another_thread_is_saved_beside_the_first(capsys):
    # a kernel files an incident, then an export running in a background thread records
    # its verdict in the same log (seen: "SQLite objects created in a thread can only be
    # used in that same thread", the verdict kept in memory only)
    import threading

    store = IncidentStore()
    first, second = make_incident(), make_incident(OOM, cell=4)
    store.append(first)
    failures: list[BaseException] = []

    def append_in_thread() -> None:
        try:
            IncidentStore().append(second)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=append_in_thread)
    worker.start()
    worker.join()
    assert failures == [] and "could not be saved" not in capsys.readouterr().err
    store_module._unsaved.clear()  # only what reached the database counts
    assert [e.id for e in IncidentStore().entries()] == [first.id, second.id]
    store.append(make_incident(cell=5))  # the first thread's connection still works
    assert len(IncidentStore().entries()) == 3
