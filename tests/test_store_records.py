"""Compact records: the recent-ops history keeps names, tensors (each distinct one once) and
the scalar arguments near the failure; fields at their default are not written; a record
reads back whole, and reading one costs its JSON parse, not a type introspection."""

from __future__ import annotations

import json
import typing

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.records import record_json
from cudadiag.log.store import IncidentStore
from cudadiag.trace import NEAR_FAILURE, RECENT_OPS, OpTracer


def _traced_failure() -> OpTracer:
    """A small training step that runs many ops, then a loss with a label out of range."""
    torch.manual_seed(0)  # step 2 draws a label 4 (and a 0): not left to chance
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with pytest.raises(IndexError), OpTracer() as tracer:
        for step in range(3):
            x = torch.randn(32, 8)
            y = torch.randint(0, 4 if step < 2 else 5, (32,))
            F.cross_entropy(model(x), y).backward()
    return tracer


def _incident(tracer: OpTracer) -> Incident:
    text = str(tracer.failed.precheck)
    return Incident(error=ErrorInfo(type="cudadiag.trace.PrecheckError", message=text,
                                    text=text),
                    diagnosis=classify(text), run=RunInfo(mode="cli", command=["train.py"]),
                    op=tracer.failed)


def test_the_recent_ops_keep_names_tensors_once_and_scalars_near_the_failure():
    tracer = _traced_failure()
    traced = list(tracer.recent)
    op = tracer.failed
    assert op.name == "aten::nll_loss_forward" and op.precheck
    assert [c.name for c in op.recent] == [c.name for c in traced]
    assert len(op.recent) == RECENT_OPS
    assert len(op.recent_tensors) == len(set(op.recent_tensors)) < RECENT_OPS // 2
    for call, seen in zip(op.recent, traced, strict=True):
        tensors = [a for a in seen.args if a.kind == "tensor"]
        assert [op.recent_tensors[t] for t in call.tensors] == [
            f"{a.dtype.replace('torch.', '')}{a.shape}@{a.device}" for a in tensors]
    near = op.recent[-NEAR_FAILURE:]
    addmm = next(c for c in reversed(near) if c.name == "aten::_log_softmax")
    assert addmm.scalars == ["dim=1", "half_to_float=False"]
    assert all(not c.scalars for c in op.recent[:-NEAR_FAILURE])
    target = next(a for a in op.args if a.name == "target")  # the failing call: in full
    assert target.value == "0..4" and target.stride == [1] and target.contiguous is True


def test_a_traced_record_is_small_and_reads_back_whole():
    incident = _incident(_traced_failure())
    line = record_json(incident)
    # under 6 kB, plus the ids and arguments of its sentences (`texts`, about 1.8 kB here)
    assert len(line.encode()) < 8_000
    written = json.loads(line)
    assert written["schema"] == incident.schema and written["id"] == incident.id
    assert "env" not in written and "reported_at" not in written["error"]  # defaults left out
    assert "stride" not in json.dumps(written["op"]["recent"])
    store = IncidentStore()
    store.append(incident)
    assert store.get(incident.id).to_dict() == incident.to_dict()


def test_an_incident_with_every_default_reads_back_equal():
    incident = Incident(error=ErrorInfo(type="RuntimeError", message="", text=""),
                        diagnosis=classify("CUDA error: out of memory"),
                        run=RunInfo(mode="kernel", blocking=False, exit_status=0))
    store = IncidentStore()
    store.append(incident)
    assert store.get(incident.id).to_dict() == incident.to_dict()
    assert json.loads(record_json(incident))["run"] == {"mode": "kernel", "exit_status": 0}


def test_reading_records_resolves_no_type_hints(monkeypatch):
    store = IncidentStore()
    incident = _incident(_traced_failure())
    for _ in range(20):
        incident.id = incident.id[:-2] + f"{_:02d}"
        store.append(incident)
    store.load()  # every class seen once
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda *a, **k: calls.append(a) or real(
        *a, **k))
    assert len(store.load()) == 20
    assert calls == []
