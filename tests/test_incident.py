"""Incident: JSON round trip, ids, schema versions."""

from __future__ import annotations

import json

import pytest

from cudadiag import Incident, IncidentSchemaError, classify
from cudadiag.incident import (
    SCHEMA,
    ErrorInfo,
    Frame,
    LaterError,
    OpInfo,
    RunInfo,
    StepInfo,
    TensorArg,
)


def _incident() -> Incident:
    try:
        raise RuntimeError("CUDA error: device-side assert triggered")
    except RuntimeError as exc:
        error = ErrorInfo.from_exception(exc)
        diagnosis = classify(exc)
    error.later.append(LaterError(type="RuntimeError", message="again", family="device_assert",
                                  at="2026-01-01T00:00:00+00:00", cell=7))
    return Incident(
        error=error, diagnosis=diagnosis, run=RunInfo(mode="kernel", cells=[5], simulated=True),
        op=OpInfo(name="aten::nll_loss_forward",
                  args=[TensorArg(name="target", kind="tensor", shape=[3], dtype="torch.int64",
                                  device="cuda:0", stride=[1], contiguous=True, value="0..4")]),
        step=StepInfo(iteration=3, last_completed=2, last_incomplete=True),
        batch={"tensors": [{"path": "batch[1]", "shape": [6]}]},
    )


def test_round_trip_through_json_keeps_every_field():
    incident = _incident()
    data = json.loads(json.dumps(incident.to_dict()))
    back = Incident.from_dict(data)
    assert back == incident
    assert isinstance(back.error.reported_at, Frame)
    assert back.error.later[0].cell == 7
    assert back.op.args[0].shape == [3]


def test_contract_keys_are_present():
    data = _incident().to_dict()
    for key in ("error", "diagnosis", "op", "step", "batch", "env", "run", "id", "created_at",
                "schema"):
        assert key in data
    for key in ("type", "message", "text", "traceback", "reported_at", "later"):
        assert key in data["error"]
    for key in ("family", "sticky", "first_checks", "avoid", "details", "summary"):
        assert key in data["diagnosis"]
    assert data["schema"] == SCHEMA


def test_ids_are_unique():
    assert _incident().id != _incident().id


def test_reported_at_is_the_deepest_user_frame():
    incident = _incident()
    assert incident.error.reported_at.function == "_incident"
    assert incident.error.reported_at.source.startswith("raise RuntimeError")


def test_newer_schema_gives_a_clear_error():
    data = _incident().to_dict()
    data["schema"] = SCHEMA + 1
    with pytest.raises(IncidentSchemaError, match=r"newer cudadiag.*Upgrade"):
        Incident.from_dict(data)


def test_a_record_that_is_not_an_incident_is_refused():
    with pytest.raises(IncidentSchemaError, match="not an incident"):
        Incident.from_dict({"hello": 1})


def test_unknown_keys_from_the_same_schema_are_ignored():
    data = _incident().to_dict()
    data["error"]["added_later"] = "x"
    assert Incident.from_dict(data).error.message.startswith("CUDA error")
