"""The incident log loses nothing: torn tails, short writes, a full disk, private modes."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import warnings
from pathlib import Path

import pytest

from cudadiag import classify
from cudadiag import store as store_module
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.store import IncidentNotSaved, IncidentStore
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


def _lines(store: IncidentStore) -> list[dict]:
    return [json.loads(line) for line in store.path.read_bytes().splitlines()]


def test_a_last_record_without_its_newline_does_not_swallow_the_next():
    store = IncidentStore()
    first, second = make_incident(), make_incident()
    store.append(first)
    store.path.write_bytes(store.path.read_bytes().rstrip(b"\n"))
    store.append(second)
    assert [r["id"] for r in _lines(store)] == [first.id, second.id]


def test_a_torn_fragment_is_set_aside_and_the_next_record_starts_on_its_own_line():
    store = IncidentStore()
    first, second = make_incident(), make_incident()
    store.append(first)
    fragment = json.dumps(make_incident().to_dict()).encode()[:150]
    with store.path.open("ab") as f:
        f.write(fragment)
    with pytest.warns(UserWarning, match="ended in a torn record"):
        store.append(second)
    assert [r["id"] for r in _lines(store)] == [first.id, second.id]
    assert (store.home / "incidents.torn").read_bytes() == fragment + b"\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unreadable is left in the log
        assert [i.id for i in store.load()] == [first.id, second.id]


def test_short_writes_are_completed(monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:100])))
    store = IncidentStore()
    incidents = [make_incident() for _ in range(3)]
    for incident in incidents:
        store.append(incident)
    assert [r["id"] for r in _lines(store)] == [i.id for i in incidents]


def _disk_full_after(monkeypatch, allowed: int) -> None:
    """os.write to a file of the incident log's folder writes `allowed` more bytes in all,
    then fails with ENOSPC; other writes (the terminal, pipes) are untouched."""
    real_write = os.write
    home = str(IncidentStore().home)
    budget = [allowed]

    def write(fd, data):
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(home):
            return real_write(fd, data)
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data[:budget[0]]))
        budget[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)


def test_a_failed_write_leaves_no_torn_line_and_is_written_with_the_next(monkeypatch):
    store = IncidentStore()
    saved, lost, later = make_incident(), make_incident(), make_incident()
    store.append(saved)
    with monkeypatch.context() as patch:
        _disk_full_after(patch, 200)  # half a record goes down, then the disk is full
        with pytest.raises(IncidentNotSaved) as caught:
            store.append(lost)
    message = str(caught.value)
    assert f"incident {lost.id} could not be saved to {store.path}" in message
    assert "No space left on device" in message and "kept in memory" in message
    assert [r["id"] for r in _lines(store)] == [saved.id]  # cut back: no torn line
    assert not store.is_saved(lost.id)
    assert [i.id for i in IncidentStore().load()] == [saved.id, lost.id]  # this process
    store.append(later)
    assert [r["id"] for r in _lines(store)] == [saved.id, lost.id, later.id]
    assert store.is_saved(lost.id) and store.is_saved(later.id)


def test_each_record_is_synced_to_disk(monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_size),
                                                 real_fsync(fd)))
    store = IncidentStore()
    store.append(make_incident())
    assert store.path.stat().st_size in synced


def test_the_home_and_every_file_in_it_are_private(tmp_path):
    home = tmp_path / "private" / "cudadiag"
    store = IncidentStore(home, max_bytes=5_000)
    for _ in range(6):
        store.append(make_incident())
    with store.path.open("ab") as f:
        f.write(b'{"torn')
    with pytest.warns(UserWarning, match="torn record"):
        store.append(make_incident())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    names = sorted(p.name for p in home.iterdir())
    assert names[:2] == [".lock", "incidents.index"]
    assert names[2:5] == ["incidents.jsonl", "incidents.jsonl.1", "incidents.jsonl.2"]
    assert names[-1] == "incidents.torn"
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.iterdir()} == dict.fromkeys(
        names, 0o600)


def test_a_log_readable_by_others_is_made_private_at_the_next_write():
    store = IncidentStore()
    store.append(make_incident())
    store.path.chmod(0o644)
    store.append(make_incident())
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (needs mount rights: root in a container that allows it)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                              str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


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


def _big_incident() -> Incident:
    """Larger than a page, so no record fits in the slack of the log's last page."""
    incident = make_incident()
    incident.error.text = ASSERT + "\n" + "device line\n" * 800
    return incident


def test_a_full_disk_loses_no_incident(tiny_disk):
    store = IncidentStore(tiny_disk / "home")
    before = _big_incident()
    store.append(before)
    filler = _fill(tiny_disk)
    during = [_big_incident(), _big_incident()]
    for incident in during:
        with pytest.raises(IncidentNotSaved, match="No space left on device"):
            store.append(incident)
    assert [r["id"] for r in _lines(store)] == [before.id]
    filler.unlink()
    after = _big_incident()
    store.append(after)
    assert [r["id"] for r in _lines(store)] == [before.id, *(i.id for i in during), after.id]


def test_an_unsaved_kernel_incident_says_so_and_gives_no_show_hint(shell, capsys, monkeypatch):
    run(shell, SETUP)
    run(shell, MODEL)
    capsys.readouterr()
    with monkeypatch.context() as patch:
        _disk_full_after(patch, 0)
        run(shell, "print('loss', loss.item())")
    err = capsys.readouterr().err
    (incident,) = IncidentStore().load()  # kept in this process's memory
    assert not IncidentStore().path.exists() or not IncidentStore().path.read_bytes()
    (line,) = [x for x in err.splitlines() if "could not be saved" in x]
    assert line == (f"cudadiag: incident {incident.id} could not be saved to "
                    f"{IncidentStore().path} (No space left on device); kept in memory, it "
                    "will be written with the next incident or when Python exits")
    assert f"cudadiag [{incident.id}]" in err  # the diagnosis itself is shown
    assert "show" not in err.replace(line, "")
    run(shell, "y = torch.ones(2) + 1")  # the next record: the disk has room again
    assert [r["id"] for r in _lines(IncidentStore())] == [incident.id]
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
    incident = make_incident()
    with monkeypatch.context() as patch:
        _disk_full_after(patch, 0)
        with pytest.raises(IncidentNotSaved):
            store.append(incident)
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


def test_records_of_a_newer_cudadiag_are_listed_and_show_says_why(shell, capsys):
    from IPython.core.error import UsageError

    store = IncidentStore()
    older = make_incident()
    store.append(older)
    newer = _newer_record()
    with store.path.open("a") as f:
        f.write(json.dumps(newer) + "\n")
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
    with store.path.open("a") as f:
        f.write(json.dumps(newer) + "\n")
    assert cli.main(["incidents"]) == 0
    assert "recorded by a newer cudadiag (schema 99)" in capsys.readouterr().out
    assert cli.main(["show", newer["id"]]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"cudadiag show: incident {newer['id']} was recorded by a newer")
