"""Incident: JSON round trip, ids, schema versions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cudadiag import Incident, IncidentSchemaError, classify
from cudadiag.incident import (
    SCHEMA,
    Alternative,
    BatchInfo,
    BatchPosition,
    CompatCheck,
    Diagnosis,
    EnvInfo,
    ErrorInfo,
    Frame,
    FrameContext,
    LaterError,
    LoopContext,
    LoopInfo,
    ModelFacts,
    Observed,
    OpCall,
    OpInfo,
    RankRecord,
    ReproInfo,
    RunInfo,
    Signature,
    StepInfo,
    TensorArg,
    TensorSummary,
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
        batch=BatchInfo(structure="tuple[Tensor, Tensor]", tensors=[TensorSummary(
            path="batch[1]", shape=[6], dtype="int64", device="cpu", stride=[1],
            contiguous=True, numel=6, min=0, max=4)], step=3, indices=[6, 7]),
    )


def _every_field_set() -> Incident:
    """An incident in which no field holds None or an empty container."""
    frame = Frame(file="<ipython-input-5>", line=3, function="train", source="loss.item()",
                  cell=5, user=True)
    arg = TensorArg(name="target", kind="tensor", shape=[3], dtype="torch.int64",
                    device="cuda:0", stride=[1], contiguous=True, value="0..4")
    tensor = TensorSummary(path="batch[1]", shape=[6], dtype="int64", device="cpu",
                           stride=[1], contiguous=True, numel=6, min=0, max=4, negatives=1,
                           distinct=5, nan=2, inf=3, values_skipped="on cuda:0",
                           counts=[[0, 2], [4, 1]], max_at=[7], min_at=[6])
    return Incident(
        error=ErrorInfo(type="torch.AcceleratorError", message="m", text="t", traceback=[frame],
                        reported_at=frame,
                        later=[LaterError("RuntimeError", "again", "device_assert", "at", 7,
                                          rank=1)]),
        diagnosis=Diagnosis(family="device_assert", sticky=True, first_checks=["c"],
                            avoid=["a"], details={"value": 4}, summary="s", asynchronous=True,
                            evidence="e", alternatives=[Alternative("oom", "x")], rank=1),
        run=RunInfo(mode="isolated", blocking=True, env_vars={"K": "V"}, exit_status=1,
                    signal="SIGSEGV", wall_s=1.5, cells=[5], simulated=True,
                    ingested_late=True, batch_replay=3, sources={"5": "x"},
                    command=["train.py"], cwd="/w", files_read=["/w/d.csv"],
                    local_modules={"mingpt.model": "/w/mingpt/model.py"},
                    environ={"GPT_SMALL": "1", "FAULT": None}, shipped=["model"],
                    launcher=["--nproc-per-node", "2"],
                    ranks=[RankRecord(rank=1, local_rank=1, node="gpu3", pid=812,
                                      outcome="raised", at="t", exit_status=1,
                                      signal="SIGABRT", error_type="RuntimeError",
                                      message="m", family="device_assert",
                                      where="aten::mm", consequence=True)]),
        env=EnvInfo(python="3.11", platform="Linux", torch="2.13", cuda="12.4", hip="6.0",
                    cudnn="9", backend="cuda", device_name="H200", capability="sm_90",
                    arch_list=["sm_90"], device_in_arch_list=True, gpu_count="1",
                    code_revision="abc", code_dirty=True, extensions={"triton": "3"},
                    cuda_initialized=True,
                    compat=[CompatCheck("driver", "fail", "too old", "upgrade", "NVIDIA")]),
        op=OpInfo(name="aten::nll_loss_forward", args=[arg],
                  recent=[OpCall(name="aten::mm", tensors=[0], scalars=["alpha=1"])],
                  precheck="target 4", recent_tensors=["int64[3]@cuda:0"],
                  vocabularies=[50257],
                  in_batch=BatchPosition(tensor="batch['labels']", index=[2, 10],
                                         dataset_index=45)),
        step=StepInfo(iteration=3, last_completed=2, batch_index=3, last_incomplete=True,
                      is_last=True, loader="train", framework="transformers.Trainer",
                      epoch=1, global_step=7, micro_step=1, accumulation=2),
        batch=BatchInfo(structure="tuple[Tensor, Tensor]", tensors=[tensor],
                        others={"batch[2]": "str 'a'"}, batch_size=6, lengths=[5, 6],
                        step=3, indices=[6, 7], kept_copy=True, note="n", replayed="r"),
        model=ModelFacts(model="BertForSequenceClassification", num_labels=3, vocab_size=64,
                         pad_token_id=0, problem_type="single_label_classification",
                         tokenizer_length=64, label_names=["labels"]),
        loop=LoopContext(frames=[FrameContext(
            file="<ipython-input-5>", line=3, function="train", cell=5,
            statement="loss.item()", statement_line=3,
            loops=[LoopInfo("for", 2, "for i in range(9):", {"i": "3"})],
            scalars={"lr": "0.1"}, scalars_omitted=2)], frames_omitted=1),
        repro=ReproInfo(path="repro.ipynb", cells={"5": "x"}, reproduces=True,
                        observed=Observed("RuntimeError", "device_assert", "v", "n"),
                        signature=Signature("device_assert", "RuntimeError", "aten::mm", 4,
                                            (0, 4)),
                        trials=3, stopped="timeout", files_read=["/w/d.csv"], bundled=True),
    )


def _unset(value: object, path: str = "incident") -> list[str]:
    """The paths of the fields of `value` (a dataclass tree) that are None or empty."""
    if dataclasses.is_dataclass(value):
        return [p for f in dataclasses.fields(value)
                for p in _unset(getattr(value, f.name), f"{path}.{f.name}")]
    if isinstance(value, (list, tuple)):
        return [p for i, item in enumerate(value) for p in _unset(item, f"{path}[{i}]")] \
            if value else [path]
    if isinstance(value, dict):
        return [] if value else [path]
    return [path] if value is None else []


def test_round_trip_through_json_keeps_every_field():
    incident = _every_field_set()
    assert _unset(incident) == []
    back = Incident.from_dict(json.loads(json.dumps(incident.to_dict())))
    assert back == incident
    assert _unset(back) == []
    assert isinstance(back.error.reported_at, Frame)
    assert isinstance(back.batch.tensors[0], TensorSummary)
    assert isinstance(back.run.ranks[0], RankRecord)
    assert back.repro.signature.valid_range == (0, 4)


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
