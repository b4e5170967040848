"""The incident log: atomic appends, rotation, corrupt lines, two writers at once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cudadiag import Incident, classify, incidents
from cudadiag.incident import ErrorInfo, RunInfo
from cudadiag.store import IncidentNotFound, IncidentStore


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


def test_corrupt_lines_are_skipped_with_one_warning_and_newer_ones_listed():
    store = IncidentStore()
    good = make_incident()
    store.append(good)
    newer = make_incident().to_dict()
    newer["schema"] = 99
    with store.path.open("a") as f:
        f.write('{"truncated": \n')
        f.write("not json at all\n")
        f.write(json.dumps(newer) + "\n")
    with pytest.warns(UserWarning, match="skipped 2 unreadable") as caught:
        contents = store.contents()
    assert [i.id for i in contents.incidents] == [good.id]
    assert [r.id for r in contents.newer] == [newer["id"]]
    assert len(caught) == 1


def test_rotation_bounds_each_file_and_loses_no_incident(tmp_path):
    store = IncidentStore(tmp_path, max_bytes=20_000)
    written = [make_incident() for _ in range(60)]
    for incident in written:
        store.append(incident)
    files = sorted(p.name for p in tmp_path.glob("incidents.jsonl*"))
    assert len(files) > 3 and files[:2] == ["incidents.jsonl", "incidents.jsonl.1"]
    assert all(p.stat().st_size <= 20_000 for p in tmp_path.glob("incidents.jsonl*"))
    assert [i.id for i in store.load()] == [i.id for i in written]
    assert [e.id for e in store.entries()] == [i.id for i in written]
    assert store.get(written[0].id[:8]).id == written[0].id


WRITER = """
import sys
from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.store import IncidentStore
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
