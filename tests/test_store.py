"""The incident log: a row per incident, unreadable records, two writers at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from cudadiag import Incident, classify, incidents
from cudadiag.errors import IncidentNotFound
from cudadiag.incident import ErrorInfo, RunInfo
from cudadiag.log.store import IncidentStore


def make_incident(message: str = "CUDA error: device-side assert triggered") -> Incident:
    return Incident(
        error=ErrorInfo(type="RuntimeError", message=message, text=message),
        diagnosis=classify(message),
        run=RunInfo(mode="kernel", cells=[3]),
    )


def test_appended_incidents_come_back_oldest_first(cudadiag_home):
    store = IncidentStore()
    first, second = make_incident(), make_incident("CUDA out of memory. Tried to allocate 2 GiB")
    store.append(first)
    store.append(second)
    assert [i.id for i in store.load()] == [first.id, second.id]
    assert [i.id for i in incidents()] == [first.id, second.id]
    assert store.path.parent == cudadiag_home


def test_an_updated_incident_replaces_its_earlier_record():
    store = IncidentStore()
    incident = make_incident()
    store.append(incident)
    incident.error.message = "updated"
    store.append(incident)
    (only,) = store.load()
    assert only.error.message == "updated"


def _rows(store: IncidentStore) -> list[tuple]:
    with sqlite3.connect(store.path) as db:
        return db.execute("SELECT id, family, mode, cell, record FROM incidents").fetchall()


def test_unreadable_records_are_skipped_with_one_warning_and_newer_ones_listed():
    store = IncidentStore()
    good = make_incident()
    store.append(good)
    newer = make_incident().to_dict()
    newer["schema"] = 99
    with sqlite3.connect(store.path) as db:
        for rid, record, schema in [("bad1", '{"truncated": ', 2), ("bad2", "not json", 2),
                                    (newer["id"], json.dumps(newer), 99)]:
            db.execute('INSERT INTO incidents (id, created_at, "schema", record) '
                       "VALUES (?, ?, ?, ?)", (rid, newer["created_at"], schema, record))
    with pytest.warns(UserWarning, match="skipped 2 unreadable") as caught:
        contents = store.contents()
    assert [i.id for i in contents.incidents] == [good.id]
    assert [r.id for r in contents.newer] == [newer["id"]]
    assert len(caught) == 1


def test_one_database_holds_a_row_per_incident_with_its_record(tmp_path):
    store = IncidentStore(tmp_path)
    written = [make_incident() for _ in range(60)]
    for incident in written:
        store.append(incident)
    assert sorted(p.name for p in tmp_path.glob("incidents*")) == [
        "incidents.sqlite3", "incidents.sqlite3-shm", "incidents.sqlite3-wal"]
    rows = _rows(store)
    assert [r[0] for r in rows] == [i.id for i in written]
    assert {r[1:4] for r in rows} == {("device_assert", "kernel", 3)}
    assert json.loads(rows[0][4])["id"] == written[0].id
    assert [i.id for i in store.load()] == [i.id for i in written]
    assert store.get(written[0].id[:8]).id == written[0].id


WRITER = """
import sys
from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.store import IncidentStore
store = IncidentStore(sys.argv[1])
for _ in range(int(sys.argv[2])):
    text = "CUDA error: device-side assert triggered"
    store.append(Incident(error=ErrorInfo(type="RuntimeError", message=text, text=text),
                          diagnosis=classify(text), run=RunInfo(mode="cli")))
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "40"])
             for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(IncidentStore(tmp_path).load()) == 80


def test_get_by_prefix_and_clear_errors():
    store = IncidentStore()
    with pytest.raises(IncidentNotFound, match="holds no incident"):
        store.get()
    incident = make_incident()
    store.append(incident)
    assert store.get(incident.id[:5]).id == incident.id
    assert store.get().id == incident.id
    with pytest.raises(IncidentNotFound, match="no incident with an id starting with 'zzz'"):
        store.get("zzz")
