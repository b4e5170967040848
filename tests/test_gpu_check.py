"""scripts/gpu_check.py without a GPU: its case list, its usage errors, and its simulated side
(the same child processes, fd capture and parsing that the GPU run uses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudadiag.contracts import CONTRACTS

SCRIPT = Path(__file__).parent.parent / "scripts" / "gpu_check.py"
EXTRA = {"two_violations", "index_put_accumulate", "one_hot_class_equals_num_classes",
         "cross_entropy_without_reduction"}


def gpu_check(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_lists_every_contract_row_the_extra_cases_and_the_scenarios():
    done = gpu_check("--dry-run")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    cases = {r["case"]: r for r in rows if "case" in r}
    assert set(cases) == set(CONTRACTS) | EXTRA
    for op, row in CONTRACTS.items():
        assert cases[op]["code"] == f"out = {row.example}" and cases[op]["op"] == op
    scenarios = {r["scenario"] for r in rows if "scenario" in r}
    assert {"item_after_assert_async_report",
            "backward_after_bad_target_in_a_training_step",
            "warm_fork_blocking_async_assert"} <= scenarios


def test_an_unknown_case_is_a_usage_error():
    done = gpu_check("--dry-run", "--case", "no_such_case")
    assert done.returncode == 2
    assert "unknown case no_such_case; --dry-run lists them" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_without_a_gpu_it_says_so_and_points_at_the_simulated_side():
    done = gpu_check("--case", "take")
    assert done.returncode == 2 and done.stdout == ""
    assert "no CUDA device here" in done.stderr and "--simulated" in done.stderr


@pytest.mark.slow
def test_the_simulated_side_reports_assertions_surfacing_and_stickiness():
    done = gpu_check("--simulated", "--jobs", "2", "--case", "nll_loss_forward",
                     "--case", "two_violations", "--case", "one_hot_class_equals_num_classes",
                     timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {r["case"]: r["simulated"] for r in map(json.loads, done.stdout.splitlines())}
    for result in rows.values():
        assert result["surfaced_at"] == "sync" and result["family"] == "device_assert"
        assert result["message"] == "CUDA error: device-side assert triggered"
        assert result["async_suffix"] and result["sticky"]
    assert rows["nll_loss_forward"]["assertions"] == [
        "Loss.cu:250 nll_loss_forward_reduce_cuda_kernel_2d: t >= 0 && t < n_classes"]
    assert rows["two_violations"]["assertions"] == [
        "Indexing.cu:1422 indexSelectLargeIndex: srcIndex < srcSelectDimSize"]
    assert rows["two_violations"]["assertion_count"] == 1
    assert rows["one_hot_class_equals_num_classes"]["assertions"] == [
        'ScatterGatherKernel.cu:367 operator(): idx_dim >= 0 && idx_dim < index_size && '
        '"index out of bounds"']


@pytest.mark.slow
def test_the_warm_case_raises_at_the_faulty_op_after_the_fork_on_the_simulated_device():
    done = gpu_check("--simulated", "--case", "warm_fork_blocking_async_assert", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = map(json.loads, done.stdout.splitlines())
    assert row["ok"] and row["warm"] and row["blocking_checked"]
    # the C++ tracer names the overload it saw fail (aten::index.Tensor, as on hardware); the
    # dispatch mode, below the simulator's mode, sees only the simulator's fault (aten::index)
    assert row["op"] in ("aten::index", "aten::index.Tensor"), row
    assert row["family"] == "device_assert"
    assert row["reported_at"].startswith("bad = x[")
