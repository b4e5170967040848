"""Logs written by earlier versions read as typed incidents (schema 1 upgraded to 2)."""

from __future__ import annotations

import json
import shutil
import typing
import warnings
from pathlib import Path

import pytest

from cudadiag.incident import (
    SCHEMA,
    BatchInfo,
    Incident,
    Observed,
    ReproInfo,
    Signature,
    TensorSummary,
)
from cudadiag.log.store import IncidentStore
from cudadiag.log.view import render_table
from cudadiag.repro.report import render_report
from cudadiag.ui.render import render_text

DATA = Path(__file__).parent / "data"
LOGS = sorted(DATA.glob("incidents-*.jsonl"))


def _store_with(log: Path, home: Path) -> IncidentStore:
    home.mkdir()
    shutil.copy(log, home / "incidents.jsonl")
    return IncidentStore(home)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_an_earlier_log_reads_whole_and_typed(log, tmp_path):
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["schema"] for r in records} == {1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the store warns about each line it cannot read
        found = _store_with(log, tmp_path / "home").load()
    assert [i.run.mode for i in found] == ["kernel", "isolated", "cli"]
    kernel, isolated, script = found
    assert all(i.schema == SCHEMA for i in found)
    assert isinstance(kernel.batch, BatchInfo) and kernel.batch.step == 1
    assert isinstance(kernel.batch.tensors[1], TensorSummary)
    assert kernel.batch.tensor("batch[1]").max == 4 and kernel.batch.kept_copy
    assert [x.type.rsplit(".", 1)[-1] for x in kernel.error.later] == [
        "SimulatedAcceleratorError", "SimulatedOutOfMemoryError"]
    assert kernel.step.loader == "train" and kernel.step.iteration == 1
    assert isinstance(isolated.repro, ReproInfo)
    assert isolated.repro.path.endswith("repro.ipynb") and isolated.repro.reproduces is True
    assert isinstance(isolated.repro.observed, Observed)
    assert isolated.repro.observed.family == "device_assert"
    assert isolated.repro.signature == Signature(
        "device_assert", "cudadiag.trace.PrecheckError", "aten::nll_loss_forward",
        *((4, (0, 4)) if isolated.repro.signature.value is not None else ()))
    assert isolated.op.name == "aten::nll_loss_forward" and isolated.op.precheck
    assert isolated.op.recent[-1].tensors  # the release kept each call's arguments in full
    assert "float32[3, 4]@cpu" in isolated.op.recent_tensors
    assert script.run.command[0].endswith("train.py") and script.op.name == "aten::embedding"


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_every_view_of_an_earlier_incident_renders(log, tmp_path):
    store = _store_with(log, tmp_path / "home")
    found = store.load()
    assert len(render_table(store.entries()).splitlines()) == 4
    for incident in found:
        text = render_text(incident)
        assert incident.diagnosis.summary.splitlines()[0][:40] in text
        report = render_report(incident)
        assert report.startswith(f"## {incident.diagnosis.family}: ")
    kernel, isolated, _ = found
    named = "target (batch[1])" if kernel.loop else "batch[1]"  # the loop names the tensor
    assert f"{named} | [3] | int64 | cpu | [1] | 0 | 4" in render_text(kernel)
    assert "**Minimized code:**" in render_report(isolated)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_an_upgraded_record_round_trips_as_schema_2(log):
    for line in log.read_text().splitlines():
        incident = Incident.from_dict(json.loads(line))
        data = json.loads(json.dumps(incident.to_dict()))
        assert data["schema"] == SCHEMA
        assert Incident.from_dict(data) == incident
        if incident.repro is not None:
            assert "notebook" not in data["repro"] and data["repro"]["path"]


def test_reading_records_resolves_type_hints_once_per_class(monkeypatch):
    line = LOGS[0].read_text().splitlines()[-1]
    Incident.from_dict(json.loads(line))

    def refuse(*args, **kwargs):
        raise AssertionError("type hints resolved again while reading a record")

    monkeypatch.setattr(typing, "get_type_hints", refuse)
    for _ in range(3):
        assert Incident.from_dict(json.loads(line)).batch is not None


def test_a_malformed_record_is_a_schema_error():
    from cudadiag.errors import IncidentSchemaError

    record = json.loads(LOGS[0].read_text().splitlines()[0])
    record["batch"] = "not a batch"
    with pytest.raises(IncidentSchemaError, match="malformed"):
        Incident.from_dict(record)
    record["schema"] = 0
    with pytest.raises(IncidentSchemaError, match="no such schema"):
        Incident.from_dict(record)


def test_rotated_earlier_logs_are_imported_once_oldest_first_with_one_line(tmp_path, capsys):
    records = (DATA / "incidents-main-27e6c3b.jsonl").read_text().splitlines()
    first = json.loads(records[0])
    updated = json.dumps({**first, "created_at": "2030-01-01T00:00:00+00:00"})
    home = tmp_path / "home"
    home.mkdir()
    (home / "incidents.jsonl.2").write_text("\n".join([records[0], records[1]]) + "\n")
    (home / "incidents.jsonl.1").write_text("\n".join(records[2:4]) + "\n")
    (home / "incidents.jsonl").write_text("\n".join([*records[4:], updated]) + "\n"
                                          + records[1][: len(records[1]) // 2])

    listed = IncidentStore(home).entries()

    said = capsys.readouterr().err
    assert said.count("cudadiag: imported") == 1
    ids = {json.loads(r)["id"] for r in records}
    assert f"imported {len(ids)} incident(s)" in said
    assert "incidents.jsonl.2, incidents.jsonl.1, incidents.jsonl, left in place" in said
    assert "1 unreadable line(s) skipped" in said
    assert sorted(e.id for e in listed) == sorted(ids)
    assert IncidentStore(home).get(first["id"]).created_at == "2030-01-01T00:00:00+00:00"
    assert (home / "incidents.jsonl.2").exists() and (home / "incidents.sqlite3").exists()

    IncidentStore(home).append(IncidentStore(home).get(json.loads(records[2])["id"]))
    assert len(IncidentStore(home).entries()) == len(ids)
    assert "imported" not in capsys.readouterr().err
