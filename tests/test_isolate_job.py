"""The runner-worker job: its file, its run folder's files, the worker's result."""

from __future__ import annotations

import torch

from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.isolate.job import (
    BATCH_FILE,
    RNG_FILE,
    SHIP_FILE,
    Job,
    JobCell,
    JobResult,
    ScriptTarget,
)


def test_a_job_reads_back_as_it_was_written(tmp_path):
    job = Job(tmp_path, [JobCell(3, "x = 1"), JobCell(5, "y = x + 1")], blocking=False,
              trace=False, env_vars={"A": "1"}, script=ScriptTarget("train.py", ["--lr", "1"]))
    job.ship_values({"x": 1})
    job.save_rng_states({3: {"random": (1, 2)}, 9: {"random": (3,)}})
    job.save_batch(7, torch.arange(4))
    job.write()
    assert Job.read(job.path) == job
    assert job.ship == tmp_path / SHIP_FILE


def test_the_job_names_the_files_its_incident_keeps(tmp_path):
    job = Job(tmp_path, [JobCell(1, "pass")])
    assert job.kept_files() == []
    job.save_rng_states({1: {"torch": torch.get_rng_state()}})
    job.save_batch(2, {"input_ids": torch.ones(2, 3, dtype=torch.long)})
    assert job.kept_files() == [tmp_path / RNG_FILE, tmp_path / BATCH_FILE]
    assert torch.equal(torch.load(tmp_path / BATCH_FILE)["input_ids"],
                       torch.ones(2, 3, dtype=torch.long))
    assert set(torch.load(tmp_path / RNG_FILE)) == {1}


def test_only_the_states_of_the_jobs_cells_are_saved(tmp_path):
    job = Job(tmp_path, [JobCell(1, "pass")])
    job.save_rng_states({4: {"random": (1,)}})
    assert not job.rng and job.kept_files() == []


def test_a_script_job_records_its_command_line():
    assert ScriptTarget("pkg.main", ["-v"], module=True).command() == ["-m", "pkg.main", "-v"]


def test_the_workers_result_carries_a_typed_incident(tmp_path):
    try:
        raise RuntimeError("CUDA error: device-side assert triggered")
    except RuntimeError as exc:
        incident = Incident(error=ErrorInfo.from_exception(exc), diagnosis=classify(exc),
                            run=RunInfo(mode="isolated"))
    JobResult(incident, 1).write(tmp_path / "result.json")
    back = JobResult.read(tmp_path / "result.json")
    assert back == JobResult(incident, 1)
    assert JobResult.read(tmp_path / "missing.json") is None
