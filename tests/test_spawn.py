"""DDP code written in a notebook with torch.multiprocessing.spawn (issue 15, item 3): in the
kernel the incident is the failed child's own error with its rank, the spawn start method's
pitfall (a notebook function the children cannot load) says so and points at %cuda_isolate;
isolated, every process the cells start is a rank of its own, and the incident names the
rank that failed first, the others' errors as its consequences."""

from __future__ import annotations

import time

import nbformat
import pytest
from nbclient import NotebookClient

from cudadiag import classify, incidents
from cudadiag.errors import IsolatedRunFailed, RanksAfterCudaError
from cudadiag.isolate.spawn import calls_spawn, ranks_as_processes
from cudadiag.isolate.verdict import verdict_line

JOB_LIMIT_S = 60
"""Each two-rank job must end within this (2 busy cores: torch imports dominate)."""

IMPORTS = (
    "import os\n"
    "import torch, torch.distributed as dist, torch.nn.functional as F\n"
    "import torch.multiprocessing as mp\n"
)
WORKER = (
    "def worker(rank, world_size, port):\n"
    "    os.environ['MASTER_ADDR'] = '127.0.0.1'\n"
    "    os.environ['MASTER_PORT'] = str(port)\n"
    "    dist.init_process_group('gloo', rank=rank, world_size=world_size)\n"
    "    torch.manual_seed(0)\n"
    "    model = torch.nn.Linear(8, 4)  # 4 classes: 0..3\n"
    "    for step in range(5):\n"
    "        x = torch.randn(5, 8)\n"
    "        target = torch.tensor([0, 1, 2, 3, 1])\n"
    "        if rank == 1 and step == 3 and not CLEAN:\n"
    "            target[3] = 4\n"
    "        loss = F.cross_entropy(model(x), target)\n"
    "        loss.backward()\n"
    "        seen = loss.item()  # the asynchronous error surfaces here\n"
    "        for p in model.parameters():\n"
    "            dist.all_reduce(p.grad)\n"
    "    print(f'rank {rank} done', flush=True)\n"
    "    dist.destroy_process_group()"
)
NOTEBOOK_CELLS = (
    "%load_ext cudadiag",
    IMPORTS + "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()\n"
              "CLEAN = False",
    WORKER,
    "mp.spawn(worker, args=(2, 29541), nprocs=2)",  # In[4]: the pitfall
    "%cuda_isolate 4",
    "mp.start_processes(worker, args=(2, 29542), nprocs=2, start_method='fork')",  # In[6]
)


@pytest.fixture(scope="module")
def spawn_notebook(tmp_path_factory):
    """The notebook above, run once in a real kernel with its own incident log: (cells'
    outputs as text, the log's folder, seconds it took)."""
    folder = tmp_path_factory.mktemp("spawn-notebook")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDADIAG_HOME", str(folder / "home"))
        NotebookClient(nb, timeout=JOB_LIMIT_S * 3, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(folder)}}).execute()
    took = time.monotonic() - started
    shown = ["".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                     for o in cell.outputs) for cell in nb.cells]
    return shown, folder / "home", took


def logged(home, monkeypatch, mode):
    monkeypatch.setenv("CUDADIAG_HOME", str(home))
    return [i for i in incidents() if i.run.mode == mode]


@pytest.mark.slow
def test_the_spawn_pitfall_in_a_notebook_says_so_and_points_at_cuda_isolate(
        spawn_notebook, monkeypatch):
    shown, home, _ = spawn_notebook
    assert "Can't get attribute 'worker' on <module '__main__'" in shown[3]  # the child's
    assert ("A process started with the 'spawn' start method cannot load a function defined "
            "in the notebook") in " ".join(shown[3].split())  # the lead, unwrapped
    pitfall = next(i for i in logged(home, monkeypatch, "kernel") if i.run.cells == [4])
    assert pitfall.diagnosis.details["pitfall"] == "notebook_function_in_child"
    assert pitfall.diagnosis.details["function"] == "worker"
    assert pitfall.diagnosis.rank in (0, 1)
    assert "%cuda_isolate" in pitfall.diagnosis.first_checks[1]
    assert "move the function" in pitfall.diagnosis.first_checks[2]


@pytest.mark.slow
def test_a_failed_child_is_the_kernel_incident_with_its_own_error_and_rank(
        spawn_notebook, monkeypatch):
    shown, home, _ = spawn_notebook
    child = next(i for i in logged(home, monkeypatch, "kernel") if i.run.cells == [6])
    assert child.diagnosis.rank == 1
    assert child.diagnosis.family == "device_assert"  # the child's, not the wrapper's
    assert child.error.type == "cudadiag.testing.SimulatedAcceleratorError"
    assert child.error.message.startswith("CUDA error: device-side assert triggered")
    noticed = child.error.reported_at
    assert (noticed.cell, noticed.function) == (3, "worker")
    assert noticed.source.startswith("seen = loss.item()")
    assert "rank 1 raised it in its own process at In[3], line" in child.diagnosis.summary
    assert "rank 1 raised it in its own process" in shown[5]
    assert not child.diagnosis.sticky  # the child's context died with it, not the kernel's
    assert "restart" not in child.diagnosis.summary


@pytest.mark.slow
def test_cuda_isolate_runs_each_spawned_process_as_a_rank_and_names_the_first_failure(
        spawn_notebook, monkeypatch):
    shown, home, took = spawn_notebook
    assert took < JOB_LIMIT_S + 30  # the kernel's start and the three jobs
    isolated = shown[4]
    assert "plan: replay In[2], In[3], In[4]; ship nothing" in isolated
    assert "each one runs as a rank of its own" in isolated
    assert "the original failure was the spawn start method's" in isolated
    assert ("device_assert — rank 1 failed first at step 3 (nll_loss, target 4); rank 0 "
            "failed afterwards in all_reduce — consequences") in isolated
    (incident,) = logged(home, monkeypatch, "isolated")
    assert incident.diagnosis.rank == 1 and incident.op.name == "aten::nll_loss_forward"
    assert incident.error.reported_at.cell == 3
    (later,) = incident.error.later
    assert later.rank == 0 and later.family == "distributed" and later.probable_consequence
    first, waiting = sorted(incident.run.ranks, key=lambda r: r.rank, reverse=True)
    assert first.outcome == "raised" and first.at < waiting.at
    assert (waiting.where, waiting.consequence) == ("all_reduce", True)
    assert incident.run.launcher == ["torch.multiprocessing.start_processes",
                                     "start_method=fork"]


def isolate_spawn_cell(shell, capsys, *, clean: bool, spawn: str, options: str = ""
                       ) -> tuple[str, BaseException | None]:
    """Define the worker in `shell`, then run `spawn` under %%blocking_launch; return what
    was printed and what the cell raised."""
    shell.run_cell(IMPORTS + f"CLEAN = {clean}", store_history=True)
    shell.run_cell(WORKER, store_history=True)
    capsys.readouterr()
    started = time.monotonic()
    result = shell.run_cell(f"%%blocking_launch {options}\n{spawn}", store_history=True)
    assert time.monotonic() - started < JOB_LIMIT_S
    return capsys.readouterr().out, result.error_in_exec


@pytest.mark.slow
def test_a_clean_spawn_job_finishes_without_an_incident(shell, capsys):
    out, raised = isolate_spawn_cell(shell, capsys, clean=True,
                                     spawn="mp.spawn(worker, args=(2, 29543), nprocs=2)")
    assert raised is None, out
    assert "rank 0 done" in out and "rank 1 done" in out
    assert "cudadiag: the job finished without error" in out
    assert incidents() == []


HANG = ("def hang(rank):\n"
        "    import time\n"
        "    if rank == 0:\n"
        "        time.sleep(120)  # never comes back\n"
        "mp.start_processes(hang, nprocs=2, start_method='spawn')")


@pytest.mark.slow
def test_a_hung_spawn_job_ends_at_the_timeout_with_where_each_rank_was(shell, capsys):
    out, raised = isolate_spawn_cell(shell, capsys, clean=True, spawn=HANG,
                                     options="--timeout 20")
    assert isinstance(raised, IsolatedRunFailed)
    assert "the job exceeded the timeout of 20 s; its whole process group was killed" in out
    assert "no rank raised an error. Where each rank was: rank 0 at In[4]:4 in hang" in out
    assert incidents() == []


@pytest.mark.parametrize("cells", [
    ["import torch.multiprocessing as mp", "mp.spawn(worker, nprocs=2)"],
    ["from torch.multiprocessing import start_processes\nstart_processes(f, nprocs=2)"],
    ["import torch\ntorch.multiprocessing.spawn(f, args=(2,), nprocs=2, join=True)"],
    ["from torch import multiprocessing as tmp\ntmp.start_processes(f, start_method='fork')"],
])
def test_cells_that_start_processes_with_torch_multiprocessing_are_found(cells):
    assert calls_spawn(cells)


@pytest.mark.parametrize("cells", [
    ["import multiprocessing as mp\nmp.get_context('spawn').Process(target=f).start()"],
    ["import pexpect\npexpect.spawn('ls')"],
    ["spawn(f)"],  # no import names it
    ["%load_ext cudadiag", "x = ("],  # not Python: skipped
])
def test_other_process_starts_are_not_taken_for_spawned_ranks(cells):
    assert not calls_spawn(cells)


def test_the_pitfall_is_read_from_pasted_text_too():
    diagnosis = classify("Traceback (most recent call last):\n  File \"<string>\", line 1, in "
                         "<module>\nAttributeError: Can't get attribute 'train' on <module "
                         "'__main__' (built-in)>")
    assert diagnosis.details["function"] == "train"
    assert diagnosis.summary.startswith("A process started with the 'spawn' start method")
    assert "%cuda_isolate" in diagnosis.first_checks[1]


def test_an_isolated_run_after_the_pitfall_says_what_the_ranks_did_instead():
    from cudadiag.incident import ErrorInfo, Incident, RunInfo

    original = Incident(error=ErrorInfo("ProcessExitedException", "process 0 terminated", ""),
                        diagnosis=classify("Can't get attribute 'worker' on <module "
                                           "'__main__' (built-in)>"), run=RunInfo("kernel"))
    assert verdict_line(original, None) == (
        "cudadiag: the original failure was the spawn start method's (its processes could "
        "not load the notebook's function); here each rank was forked with it, so this is "
        "what the ranks themselves do: they finished without error")


def test_ranks_are_not_forked_after_the_cells_initialised_cuda(tmp_path, monkeypatch):
    import torch
    import torch.multiprocessing as mp

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with ranks_as_processes(tmp_path / "ranks", lambda exc: None), \
            pytest.raises(RanksAfterCudaError, match=r"Move the CUDA calls .* into the function"):
        mp.spawn(print, nprocs=2)
    assert not (tmp_path / "ranks").exists()  # no process started
