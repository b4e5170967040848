"""The incident log loses nothing: a writer killed mid-write, a full disk, synced commits,
private modes, records of a newer cudadiag."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cudadiag import classify
from cudadiag.errors import IncidentNotSaved
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log import database
from cudadiag.log import store as store_module
from cudadiag.log.store import IncidentStore
from log_helpers import close_connections, mounted_tmpfs
from scenarios import MODEL, SETUP, run

ASSERT = "CUDA error: device-side assert triggered"


def make_incident(message: str = ASSERT) -> Incident:
    return Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                    diagnosis=classify(message), run=RunInfo(mode="kernel", cells=[3]))


@pytest.fixture(autouse=True)
def no_unsaved_records_between_tests():
    store_module._unsaved.clear()
    yield
    store_module._unsaved.clear()


def _ids(store: IncidentStore) -> list[str]:
    """The ids of the rows on disk (not this process's unsaved records)."""
    if not store.path.exists():
        return []
    with sqlite3.connect(store.path) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE name = 'incidents'")
        if not tables.fetchall():
            return []
        return [r[0] for r in db.execute("SELECT id FROM incidents ORDER BY created_at, rowid")]


def _database_full(monkeypatch) -> None:
    """Connections opened from now on cannot grow the database (SQLite's max_page_count:
    the same SQLITE_FULL a full disk gives); the cached ones are dropped first."""
    real_connect = sqlite3.connect
    close_connections()

    def connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {max(pages, 1)}")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)


def _big_incident() -> Incident:
    """Larger than a page, so that its record needs new pages of the database."""
    incident = make_incident()
    incident.error.text = ASSERT + "\n" + "device line\n" * 800
    return incident


KILLED_MID_WRITE = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO incidents (id, created_at, record) VALUES ('half', 'x', '{')")
os._exit(9)
"""


def test_a_writer_killed_mid_write_leaves_the_log_whole():
    store = IncidentStore()
    first, second = make_incident(), make_incident()
    store.append(first)
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(store.path)])
    assert killed.returncode == 9
    store.append(second)
    assert _ids(store) == [first.id, second.id]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unreadable is left in the log
        assert [i.id for i in store.load()] == [first.id, second.id]


def test_a_failed_write_is_kept_in_memory_and_written_with_the_next(monkeypatch):
    store = IncidentStore()
    saved, lost, later = make_incident(), _big_incident(), make_incident()
    store.append(saved)
    with monkeypatch.context() as patch:
        _database_full(patch)
        with pytest.raises(IncidentNotSaved) as caught:
            store.append(lost)
    close_connections()
    message = str(caught.value)
    assert f"incident {lost.id} could not be saved to {store.path}" in message
    assert "No space left on device" in message and "kept in memory" in message
    assert _ids(store) == [saved.id]
    assert not store.is_saved(lost.id)
    assert [i.id for i in IncidentStore().load()] == [saved.id, lost.id]  # this process
    store.append(later)
    assert _ids(store) == [saved.id, lost.id, later.id]
    assert store.is_saved(lost.id) and store.is_saved(later.id)


def test_each_commit_is_synced_and_the_journal_is_a_write_ahead_log_on_a_local_disk():
    store = IncidentStore()
    store.append(make_incident())
    conn = database.connect(store.home, lambda _conn: None)
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000


def test_the_home_and_every_file_in_it_are_private(tmp_path):
    home = tmp_path / "private" / "cudadiag"
    store = IncidentStore(home)
    for _ in range(6):
        store.append(make_incident())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    names = sorted(p.name for p in home.iterdir())
    assert names == ["incidents.sqlite3", "incidents.sqlite3-shm", "incidents.sqlite3-wal",
                     "lock-probe"]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.iterdir()} == dict.fromkeys(
        names, 0o600)


def test_a_log_readable_by_others_is_made_private_when_opened(cudadiag_home):
    cudadiag_home.mkdir()
    sqlite3.connect(cudadiag_home / "incidents.sqlite3").close()
    (cudadiag_home / "incidents.sqlite3").chmod(0o644)
    store = IncidentStore()
    store.append(make_incident())
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (needs mount rights: root in a container that allows it)."""
    with mounted_tmpfs(tmp_path / "tiny", "1m") as mount_point:
        yield mount_point


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_loses_no_incident(tiny_disk):
    store = IncidentStore(tiny_disk / "home")
    before = _big_incident()
    store.append(before)
    filler = _fill(tiny_disk)
    during = [_big_incident(), _big_incident()]
    for incident in during:
        with pytest.raises(IncidentNotSaved, match="No space left on device"):
            store.append(incident)
    assert _ids(store) == [before.id]
    filler.unlink()
    after = _big_incident()
    store.append(after)
    assert _ids(store) == [before.id, *(i.id for i in during), after.id]


def fail_on_a_full_disk(shell, capsys, monkeypatch):
    """A cell that fails while the log's disk is full: what it wrote on stderr, and the
    incident (kept in this process's memory)."""
    run(shell, SETUP)
    run(shell, MODEL)
    capsys.readouterr()
    with monkeypatch.context() as patch:
        _database_full(patch)
        run(shell, "print('loss', loss.item())")
    close_connections()
    err = capsys.readouterr().err
    (incident,) = IncidentStore().load()
    return err, incident


def test_an_unsaved_kernel_incident_says_so_and_gives_no_show_hint(shell, capsys, monkeypatch):
    err, incident = fail_on_a_full_disk(shell, capsys, monkeypatch)
    assert _ids(IncidentStore()) == []
    (line,) = [x for x in err.splitlines() if "could not be saved" in x]
    assert line == (f"cudadiag: incident {incident.id} could not be saved to "
                    f"{IncidentStore().path} (No space left on device); kept in memory, it "
                    "will be written with the next incident or when Python exits")
    assert f"cudadiag [{incident.id}]" in err  # the diagnosis itself is shown
    assert "show" not in err.replace(line, "")
    run(shell, "y = torch.ones(2) + 1")  # the next record: the disk has room again
    assert _ids(IncidentStore()) == [incident.id]
    capsys.readouterr()
    run(shell, f"%cudadiag show {incident.id}")
    assert f"Incident {incident.id}" in capsys.readouterr().out


def test_a_saved_kernel_incident_hints_at_the_magic(shell, capsys):
    run(shell, SETUP)
    run(shell, MODEL)
    run(shell, "print('loss', loss.item())")
    (incident,) = IncidentStore().load()
    assert f"details: %cudadiag show {incident.id}" in capsys.readouterr().err


def test_the_panel_text_gives_no_hint_for_an_unsaved_incident(monkeypatch):
    from cudadiag import Panel

    store = IncidentStore()
    incident = _big_incident()
    with monkeypatch.context() as patch:
        _database_full(patch)
        with pytest.raises(IncidentNotSaved):
            store.append(incident)
    close_connections()
    text = Panel(incident, store=store)._repr_mimebundle_()["text/plain"]
    assert f"cudadiag [{incident.id}]" in text and "show" not in text
    store.append(make_incident())
    text = Panel(incident, store=store)._repr_mimebundle_()["text/plain"]
    assert f"details: %cudadiag show {incident.id}" in text


SCRIPT = ("import torch, torch.nn.functional as F\n"
          "F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))\n")


@pytest.mark.slow
@pytest.mark.parametrize("writable", [True, False])
def test_cudadiag_run_hints_at_the_shell_command_only_when_saved(
        tmp_path, monkeypatch, capsys, writable):
    from cudadiag import cli

    (tmp_path / "train.py").write_text(SCRIPT)
    if not writable:
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("CUDADIAG_HOME", str(tmp_path / "a-file" / "home"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "train.py"]) == 1
    err = capsys.readouterr().err
    (short,) = [x for x in err.splitlines() if x.startswith("cudadiag [")]
    incident_id = short.split("[")[1].split("]")[0]
    if writable:
        assert f"  details: cudadiag show {incident_id}" in err
        assert "%cudadiag" not in err
    else:
        assert f"incident {incident_id} could not be saved to" in err
        assert "show" not in err.replace("could not be saved", "")


def _newer_record() -> dict:
    record = make_incident().to_dict()
    record.update(schema=99, created_at="2030-01-01T00:00:00+00:00", extra={"new": "field"})
    return record


def _insert_raw(store: IncidentStore, record: dict) -> None:
    """Write a row as a newer cudadiag would: its columns and its JSON."""
    with sqlite3.connect(store.path) as db:
        db.execute('INSERT INTO incidents (id, created_at, family, "schema", record) '
                   "VALUES (?, ?, ?, ?, ?)", (record["id"], record["created_at"],
                                              record["diagnosis"]["family"], record["schema"],
                                              json.dumps(record)))


def test_records_of_a_newer_cudadiag_are_listed_and_show_says_why(shell, capsys):
    from IPython.core.error import UsageError

    store = IncidentStore()
    older = make_incident()
    store.append(older)
    newer = _newer_record()
    _insert_raw(store, newer)
    capsys.readouterr()
    run(shell, "%cudadiag incidents")
    out = capsys.readouterr().out
    assert older.id in out
    (row,) = [x for x in out.splitlines() if x.startswith(newer["id"])]
    assert "recorded by a newer cudadiag (schema 99)" in row and "device_assert" in row
    result, _ = run(shell, f"%cudadiag show {newer['id'][:6]}")
    assert isinstance(result.error_in_exec, UsageError)
    assert f"incident {newer['id']} was recorded by a newer cudadiag (schema 99)" in str(
        result.error_in_exec)
    assert "Upgrade cudadiag" in str(result.error_in_exec)


def test_the_shell_commands_list_and_explain_newer_records(capsys):
    from cudadiag import cli

    store = IncidentStore()
    store.append(make_incident())
    newer = _newer_record()
    _insert_raw(store, newer)
    assert cli.main(["incidents"]) == 0
    assert "recorded by a newer cudadiag (schema 99)" in capsys.readouterr().out
    assert cli.main(["show", newer["id"]]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"cudadiag show: incident {newer['id']} was recorded by a newer")
