"""The incident log's index: listing and finding read it, never the records; it is rebuilt
from the log when missing, corrupt or stale, and stays whole with two writers at once."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest
from cudadiag.incident_index import HEADER, INDEX_NAME

from cudadiag import classify
from cudadiag.incident import ErrorInfo, Frame, Incident, RunInfo
from cudadiag.log import store as store_module
from cudadiag.log.store import IncidentStore

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


def _entry_lines(store: IncidentStore) -> list[list]:
    lines = store.index.path.read_bytes()[len(HEADER):].splitlines()
    return [row for row in map(json.loads, lines) if len(row) > 3]


def _no_record_parsed(monkeypatch) -> None:
    def refuse(cls, data):
        raise AssertionError("a record was parsed")

    monkeypatch.setattr(Incident, "from_dict", classmethod(refuse))


def test_the_index_lists_each_incident_with_what_a_listing_shows():
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


def test_listing_and_finding_read_the_index_and_one_record(monkeypatch, capsys):
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


def test_a_missing_index_is_rebuilt_from_the_log():
    store, made = _filled(4)
    store.index.path.unlink()
    assert [e.id for e in store.entries()] == [i.id for i in made]
    assert len(_entry_lines(store)) == 4
    assert store.get(made[1].id).id == made[1].id


@pytest.mark.parametrize("damage", [
    lambda data: data[:40] + b"\x00garbage\xff\n" + data[40:],
    lambda data: b"not an index\n" + data,
    lambda data: data.replace(b'",', b'"', 3),
    lambda data: data[: len(HEADER)] + b'["short"]\n' + data[len(HEADER):],
])
def test_a_corrupt_index_is_rebuilt_and_the_log_is_untouched(damage):
    store, made = _filled(4)
    log = store.path.read_bytes()
    store.index.path.write_bytes(damage(store.index.path.read_bytes()))
    assert [e.id for e in store.entries()] == [i.id for i in made]
    assert store.index.path.read_bytes().startswith(HEADER)
    assert len(_entry_lines(store)) == 4
    assert store.path.read_bytes() == log


def test_an_index_pointing_at_the_wrong_places_is_rebuilt_when_a_record_is_read():
    store, made = _filled(3)
    data = store.index.path.read_bytes()
    rows = [json.loads(line) for line in data[len(HEADER):].splitlines()]
    first, second = rows[0], rows[1]
    first[11], second[11] = second[11], first[11]  # offsets swapped, lengths kept
    first[12], second[12] = second[12], first[12]
    store.index.path.write_bytes(HEADER + b"".join(
        json.dumps(r).encode() + b"\n" for r in rows))
    assert store.get(made[0].id).id == made[0].id
    assert store.get(made[1].id).id == made[1].id


def test_records_written_without_the_index_are_caught_up(monkeypatch):
    store, made = _filled(2)
    older_writer = make_incident(OOM)  # an older cudadiag appends the log only
    with store.path.open("ab") as f:
        f.write(json.dumps(older_writer.to_dict()).encode() + b"\n")
        f.write(b"an unreadable line\n")
    assert [e.id for e in store.entries()] == [*(i.id for i in made), older_writer.id]
    assert store.entries()[-1].family == "oom"
    _no_record_parsed(monkeypatch)  # caught up once: listed from the index from now on
    assert [e.id for e in store.entries()] == [*(i.id for i in made), older_writer.id]
    monkeypatch.undo()
    assert len(_entry_lines(store)) == 3
    assert store.get(older_writer.id).id == older_writer.id


def test_a_torn_index_line_is_ignored_and_cut_by_the_next_writer():
    store, made = _filled(2)
    with store.index.path.open("ab") as f:
        f.write(b'["deadbeef0000","2026-')  # a writer died mid-line
    assert [e.id for e in store.entries()] == [i.id for i in made]
    later = make_incident()
    store.append(later)
    assert [row[0] for row in _entry_lines(store)] == [*(i.id for i in made), later.id]
    assert store.index.path.read_bytes().endswith(b"\n")


def test_an_index_line_lost_in_a_crash_is_caught_up():
    store, made = _filled(3)
    data = store.index.path.read_bytes()
    store.index.path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    assert [e.id for e in store.entries()] == [i.id for i in made]
    assert store.get(made[-1].id[:6]).id == made[-1].id


def test_an_index_that_cannot_be_written_does_not_stop_an_append(monkeypatch):
    store, made = _filled(1)
    monkeypatch.setattr(type(store.index), "append", lambda self, lines, torn_at=None: False)
    later = make_incident(OOM)
    store.append(later)
    assert store.is_saved(later.id)
    monkeypatch.undo()
    assert [e.id for e in store.entries()] == [made[0].id, later.id]


def test_the_index_is_private_and_replaced_whole(cudadiag_home):
    store, _ = _filled(2)
    store.index.path.unlink()
    store.entries()
    assert stat.S_IMODE(store.index.path.stat().st_mode) == 0o600
    assert not [p for p in cudadiag_home.iterdir() if p.name.endswith(".partial")]
    assert INDEX_NAME == store.index.path.name


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
store = IncidentStore(sys.argv[1], max_bytes=30_000)
for n in range(int(sys.argv[2])):
    text = "CUDA error: device-side assert triggered" if n % 2 else "CUDA out of memory"
    store.append(Incident(error=ErrorInfo(type="RuntimeError", message=text, text=text),
                          diagnosis=classify(text), run=RunInfo(mode="cli")))
"""

READER = """
import sys, time
from cudadiag.log.store import IncidentStore
store = IncidentStore(sys.argv[1])
seen = 0
deadline = time.monotonic() + 60
while seen < int(sys.argv[2]) and time.monotonic() < deadline:
    entries = store.entries()
    assert len(entries) >= seen, (len(entries), seen)
    seen = len(entries)
    if entries:
        assert store.read(entries[-1]).id == entries[-1].id
print(seen)
"""


@pytest.mark.slow
def test_two_writers_and_a_reader_at_once_keep_the_index_whole(tmp_path):
    reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path), "120"],
                              stdout=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "60"])
               for _ in range(2)]
    assert [p.wait(timeout=120) for p in writers] == [0, 0]
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0 and out.strip() == "120"
    store = IncidentStore(tmp_path)
    rows = _entry_lines(store)
    assert len(rows) == len({row[0] for row in rows}) == 120  # each record listed once
    assert len(list(tmp_path.glob("incidents.jsonl.*"))) >= 2  # rotated meanwhile
    entries = store.entries()
    assert {e.id for e in entries} == {i.id for i in store.load()}
    assert all(store.read(e).id == e.id for e in entries[::10])
