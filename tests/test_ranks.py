"""Multi-process jobs (issue 15): `cudadiag run --nproc-per-node 2` runs a script as two
gloo ranks under torchrun on the CPU; the incident names the rank that failed first, the
other ranks' errors are its consequences, and a job where only collectives failed points at
the rank that was missing from them."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from cudadiag import classify, cli, incidents
from cudadiag.explain import is_consequence
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.isolate.job import Job
from cudadiag.isolate.rankfiles import LauncherFailure, LauncherReport, RankState
from cudadiag.isolate.ranks import TorchrunJob, with_own_rendezvous

JOB_LIMIT_S = 60
FIRST_AND_CONSEQUENCE = re.compile(
    r"rank 1 failed first at step 3 \(nll_loss, target 4\); rank 0 "
    r"((failed afterwards|was stopped) in all_reduce|was stopped at an unknown place) — "
    r"consequences")
"""The bad-target job's summary: under load torchrun may stop rank 0 before gloo tells it
that its peer is gone, or before rank 0 wrote where it was (its place then unknown); either
way rank 0's end is a consequence."""
TORCHRUN_DEFAULT_PORT = 29500
"""Each two-rank job must end within this (2 busy cores: torch imports dominate)."""

BAD_TARGET = """\
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from cudadiag.testing import simulated_cuda

simulated_cuda().start()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)  # 4 classes: 0..3
for step in range(5):
    x = torch.randn(5, 8)
    target = torch.tensor([0, 1, 2, 3, 1])
    if rank == 1 and step == 3 and "--clean" not in sys.argv:
        target[3] = 4
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    print(f"rank {rank} step {step}", flush=True)
dist.destroy_process_group()
"""

RANK0_HANGS = """\
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
grads = torch.ones(3)
if dist.get_rank() == 0:
    time.sleep(120)  # a rank that never reaches the collective
dist.all_reduce(grads)
"""

NOBODY_RAISES = """\
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # collectives wait 30 minutes
grads = torch.ones(3)
if dist.get_rank() == 0:
    signal.pause()  # hangs, raising nothing
dist.all_reduce(grads)
"""

RANK0_LEAVES = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
grads = torch.ones(3)
if dist.get_rank() == 1:
    dist.all_reduce(grads)  # rank 0 never comes: it ended
"""

RANK1_KILLED = """\
import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grads = torch.ones(3)
for step in range(5):
    if rank == 1 and step == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as the host's out-of-memory killer does
    dist.all_reduce(grads)
"""


def cudadiag_ranks(script: str, tmp_path: Path, *args: str,
                   options: tuple[str, ...] = ("--standalone",)
                   ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(script)
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "cudadiag.cli", "run", "--nproc-per-node", "2",
         *options, "--", "job.py", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=JOB_LIMIT_S * 3)
    elapsed = time.monotonic() - started
    assert elapsed < JOB_LIMIT_S, f"the job took {elapsed:.0f} s\n{ran.stderr[-3000:]}"
    return ran


def failed_job(script: str, tmp_path: Path, *args: str,
               options: tuple[str, ...] = ("--standalone",)
               ) -> tuple[subprocess.CompletedProcess[str], Incident]:
    """Run `script` as a two-rank job that must fail (torchrun's status 1) and leave one
    incident; return the run and the incident."""
    ran = cudadiag_ranks(script, tmp_path, *args, options=options)
    assert ran.returncode == 1, ran.stderr[-3000:]  # torchrun's status
    (incident,) = incidents()
    return ran, incident


@pytest.mark.slow
def test_the_rank_that_failed_first_is_the_incident_and_the_waiting_rank_a_consequence(
        tmp_path):
    ran, incident = failed_job(BAD_TARGET, tmp_path, options=("--json", "incident.json"))
    summary = FIRST_AND_CONSEQUENCE.search(ran.stderr)
    assert summary, ran.stderr[-3000:]
    assert "Root Cause (first observed failure)" in ran.stderr  # torchrun's own summary...
    root_cause = ran.stderr.split("Root Cause (first observed failure)")[1]
    assert "rank      : 1 (local_rank: 1)" in root_cause  # ...reads the error file we wrote
    assert "target 4 at position 3 outside [0, 4)" in root_cause
    assert incident.diagnosis.family == "device_assert" and incident.diagnosis.rank == 1
    assert incident.op.name == "aten::nll_loss_forward"
    assert incident.diagnosis.details["value"] == 4
    assert incident.diagnosis.details["torchrun_root_cause_rank"] == 1
    assert incident.loop.frames[-1].loops[-1].values["step"] == "3"
    if summary.group(1) == "failed afterwards":
        (later,) = incident.error.later
        assert later.rank == 0 and later.family == "distributed" and later.probable_consequence
        assert "Connection closed by peer" in later.message
    first, waiting = sorted(incident.run.ranks, key=lambda r: r.rank, reverse=True)
    assert (first.rank, first.local_rank, first.outcome) == (1, 1, "raised")
    assert first.node and (waiting.at is None or first.at < waiting.at)
    assert (waiting.rank, waiting.where, waiting.consequence) == (0, "all_reduce", True)
    assert incident.run.launcher == ["--nproc-per-node", "2", "--standalone"]
    assert incident.run.mode == "cli" and incident.run.exit_status == 1
    written = json.loads((tmp_path / "incident.json").read_text())
    assert written["id"] == incident.id and written["diagnosis"]["rank"] == 1


@pytest.mark.slow
def test_a_clean_job_exits_0_without_an_incident_beside_a_job_on_torchruns_port(tmp_path):
    with socket.socket() as other_job:  # a training job started with plain torchrun
        other_job.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # when the port is taken, it is taken already
            other_job.bind(("127.0.0.1", TORCHRUN_DEFAULT_PORT))
            other_job.listen()
        ran = cudadiag_ranks(BAD_TARGET, tmp_path, "--clean", options=())
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "rank 0 step 4" in ran.stdout and "rank 1 step 4" in ran.stdout
    assert "cudadiag: the job finished without error" in ran.stderr
    assert incidents() == []


@pytest.mark.slow
def test_when_only_a_collective_timed_out_the_hung_rank_is_named_not_a_kernel(tmp_path):
    ran, incident = failed_job(RANK0_HANGS, tmp_path)
    assert incident.diagnosis.family == "distributed"
    summary = incident.diagnosis.summary
    assert summary.startswith("no rank raised an error of its own: only collectives failed "
                              "(rank 1 in all_reduce")
    assert "rank 0 was still at job.py:10 in <module> when it was stopped" in summary
    assert summary.endswith("look at that rank, not at a kernel")
    assert summary in ran.stderr
    hung = next(r for r in incident.run.ranks if r.rank == 0)
    assert hung.outcome == "stopped" and not hung.consequence


@pytest.mark.slow
def test_a_hang_without_any_error_ends_at_the_timeout_with_where_each_rank_was(tmp_path):
    ran = cudadiag_ranks(NOBODY_RAISES, tmp_path, options=("--timeout", "30"))
    assert ran.returncode != 0, ran.stderr[-3000:]
    assert ("cudadiag: the job exceeded the timeout of 30 s; its whole process group was "
            "killed; no rank raised an error. Where each rank was: rank 0 at job.py:9 in "
            "<module>, rank 1 in all_reduce.") in ran.stderr
    assert incidents() == []


@pytest.mark.slow
def test_a_rank_that_ended_while_the_other_waits_is_named(tmp_path):
    _, incident = failed_job(RANK0_LEAVES, tmp_path)
    assert incident.diagnosis.rank == 1 and incident.diagnosis.family == "distributed"
    assert "rank 0 had already ended (exit status 0)" in incident.diagnosis.summary


@pytest.mark.slow
def test_a_rank_killed_by_sigkill_before_its_record_is_the_first_failure_not_its_peer(
        tmp_path):
    ran, incident = failed_job(RANK1_KILLED, tmp_path)
    assert incident.diagnosis.rank == 1
    summary = incident.diagnosis.summary
    assert summary.startswith("rank 1 failed first (killed by signal 9 (SIGKILL) — often the "
                              "host's out-of-memory killer; check `dmesg`)"), summary
    assert summary in ran.stderr
    killed = next(r for r in incident.run.ranks if r.rank == 1)
    assert (killed.outcome, killed.signal) == ("died", "SIGKILL")
    peer = next(r for r in incident.run.ranks if r.rank == 0)
    # the peer's "Connection reset by peer" (or torchrun's SIGTERM first) is a consequence
    assert peer.outcome == "stopped" or (peer.outcome == "raised" and peer.consequence)
    assert all(later.probable_consequence for later in incident.error.later)


NOTEBOOK_CELLS = (
    "%load_ext cudadiag",
    "import os\n"
    "import torch, torch.distributed as dist, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()",
    "for name, value in [('MASTER_ADDR', '127.0.0.1'), ('MASTER_PORT', '29531'),\n"
    "                    ('RANK', '0'), ('WORLD_SIZE', '1')]:\n"
    "    os.environ.setdefault(name, value)  # torchrun's values win in a rank\n"
    "dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(8, 4)",
    "for step in range(5):\n"
    "    x = torch.randn(5, 8)\n"
    "    target = torch.tensor([0, 1, 2, 3, 1])\n"
    "    if rank == 1 and step == 3:\n"
    "        target[3] = 4\n"
    "    loss = F.cross_entropy(model(x), target)\n"
    "    loss.backward()\n"
    "    for p in model.parameters():\n"
    "        dist.all_reduce(p.grad)\n"
    "print('rank', rank, 'done')",
    "%cuda_isolate 4 --nproc-per-node 2",
)


@pytest.mark.slow
def test_cuda_isolate_runs_a_notebooks_cells_as_two_ranks(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    started = time.monotonic()
    NotebookClient(nb, timeout=JOB_LIMIT_S * 3, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert time.monotonic() - started < JOB_LIMIT_S + 30  # the kernel's start and cells too
    ran_in_kernel = "".join(o.get("text", "") for o in nb.cells[3].outputs)
    assert "rank 0 done" in ran_in_kernel  # one process: rank 0 has no bad target
    shown = "".join(o.get("text", "") for o in nb.cells[4].outputs)
    assert "ship nothing" in shown  # each rank makes its own rank and process group
    summary = FIRST_AND_CONSEQUENCE.search(shown)
    assert summary and "device_assert — rank 1 failed first" in shown, shown
    (incident,) = incidents()
    assert incident.run.mode == "isolated" and incident.run.cells == [2, 3, 4]
    assert [r.rank for r in incident.run.ranks] == [0, 1]
    if summary.group(1) == "failed afterwards":
        assert incident.error.later[0].rank == 0


@pytest.mark.parametrize("text", [
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 "
    "milliseconds before timing out.",
    "RuntimeError: NCCL communicator was aborted on rank 0.",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
    "by peer [127.0.0.1]:29500",
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] "
    "Read error [127.0.0.1]:64235: Connection reset by peer. This is typically caused by a "
    "remote worker hanging or bugs in the application.",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
    "waiting 3000ms for recv operation to complete",
])
def test_collective_failures_are_consequences_whatever_the_backend_prints(text):
    assert is_consequence(classify(text))


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA error: device-side assert triggered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
])
def test_a_ranks_own_error_is_no_consequence(text):
    assert not is_consequence(classify(text))


@pytest.mark.parametrize(("options", "message"), [
    (["--bogus"], "torchrun does not know --bogus"),
    (["--max-restarts", "many"], "torchrun would refuse this: argument "
                                 "--max-restarts/--max_restarts: invalid int value: 'many'"),
    (["-m"], "-m, --no-python and --run-path are cudadiag's to set"),
    (["--nnodes", "2"], "--nnodes 2: say which node this agent is: --node-rank K (0 to 1)"),
    (["--nnodes=1:4"], "--nnodes 1:4: an elastic node count is not supported"),
])
def test_options_torchrun_would_refuse_exit_2_before_anything_runs(tmp_path, monkeypatch,
                                                                   capsys, options, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text("raise SystemExit('it ran')\n")
    status = cli.main(["run", "--nproc-per-node", "2", *options, "--", "job.py"])
    err = capsys.readouterr().err
    assert status == 2 and f"cudadiag run: {message}" in err and "it ran" not in err


@pytest.mark.parametrize(("options", "environ", "added"), [
    (["--nproc-per-node", "2"], {}, True),
    (["--nproc-per-node", "2", "--max-restarts", "1"], {}, True),
    (["--nproc-per-node", "2", "--standalone"], {}, False),
    (["--nproc-per-node", "2", "--master-port", "29611"], {}, False),
    (["--nproc-per-node", "2", "--rdzv-endpoint", "localhost:29612"], {}, False),
    (["--nproc-per-node", "2"], {"PET_MASTER_PORT": "29613"}, False),
])
def test_ranks_meet_on_a_free_port_unless_told_where(options, environ, added, monkeypatch):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert with_own_rendezvous(options) == ([*options, "--standalone"] if added else options)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_process_count_torchrun_would_refuse_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--nproc-per-node", value, "--", "job.py"])
    assert exit_.value.code == 2
    assert "expected a number of processes (1 or more)" in capsys.readouterr().err


def _rank_folder(tmp_path: Path, states: list[RankState], report: LauncherReport
                 ) -> TorchrunJob:
    """A job whose ranks and torchrun left these records (pids that run no process)."""
    job = TorchrunJob(["--nproc-per-node", str(len(states))], sys.executable)
    job.prepare(Job(tmp_path, []), None)
    for state in states:
        (job.folder / f"a0.rank{state.rank}.json").write_bytes(state.to_json())
    report.write(tmp_path / "torchrun.json")
    return job


def _state(rank: int, **fields) -> RankState:
    return RankState(rank=rank, local_rank=rank, node="gpu3", pid=2**31 - 1 - rank,
                     world_size=2, attempt=0, at=f"2025-01-01T00:00:0{rank}.000+00:00",
                     **fields)


def test_a_rank_killed_before_writing_its_incident_is_diagnosed_from_its_first_record(
        tmp_path):
    job = _rank_folder(tmp_path, [
        _state(0, outcome="raised", error_type="torch.AcceleratorError",
               message="CUDA error: device-side assert triggered",
               text="CUDA error: device-side assert triggered", where="train.py:9 in main"),
        _state(1)], LauncherReport(0, [LauncherFailure(0, 0, 2**31 - 1, -9, 1.7e9),
                                       LauncherFailure(1, 1, 2**31 - 2, -15, 1.7e9)]))
    incident = job.collect(stopped=False).incident
    job.complete(incident)
    assert incident.error.type == "torch.AcceleratorError"
    assert incident.diagnosis.family == "device_assert" and incident.diagnosis.rank == 0
    first, other = incident.run.ranks
    assert (first.outcome, first.where, first.signal) == ("raised", "train.py:9 in main",
                                                          "SIGKILL")
    assert (other.outcome, other.signal) == ("stopped", "SIGTERM")
    assert incident.diagnosis.summary.startswith("rank 0 failed first")


def test_a_rank_that_died_without_an_exception_is_a_dead_process_incident(tmp_path):
    job = _rank_folder(tmp_path, [_state(0), _state(1)], LauncherReport(
        0, [LauncherFailure(0, 0, 2**31 - 1, -11, 1.7e9)]))
    incident = job.collect(stopped=False).incident
    assert incident.error.type == "ProcessDied(SIGSEGV)"
    assert incident.error.message == "rank 0 was killed by SIGSEGV"
    assert incident.run.signal == "SIGSEGV"


def test_a_ranks_record_keeps_its_incident_typed(tmp_path):
    message = "CUDA error: device-side assert triggered"
    incident = Incident(error=ErrorInfo("RuntimeError", message, message),
                        diagnosis=classify(message), run=RunInfo(mode="isolated"))
    state = _state(1, outcome="raised", exit_code=1, incident=incident)
    back = RankState.from_json(state.to_json().decode())
    assert back == state and isinstance(back.incident, Incident)
    job = _rank_folder(tmp_path, [_state(0, outcome="finished", exit_code=0), state],
                       LauncherReport())
    assert job.collect(stopped=False).incident == incident


def test_a_rank_sigkilled_without_a_stack_is_the_first_failure_whatever_torchrun_ranks_first(
        tmp_path):
    # torchrun's timestamps are whole seconds: the peer's error file may tie and come first
    job = _rank_folder(tmp_path, [
        _state(0, outcome="raised", error_type="RuntimeError",
               message="[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:64235: "
                       "Connection reset by peer",
               text="[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:64235: "
                    "Connection reset by peer", where="all_reduce"),
        _state(1)], LauncherReport(0, [LauncherFailure(0, 0, 2**31 - 1, 1, 1.7e9),
                                       LauncherFailure(1, 1, 2**31 - 2, -9, 1.7e9)]))
    incident = job.collect(stopped=False).incident
    job.complete(incident)
    assert incident.diagnosis.rank == 1 and incident.run.signal == "SIGKILL"
    assert incident.diagnosis.summary == (
        "rank 1 failed first (killed by signal 9 (SIGKILL) — often the host's out-of-memory "
        "killer; check `dmesg`); rank 0 failed afterwards in all_reduce — consequences")


def test_a_rank_stopped_while_cudadiag_wrote_its_record_was_stopped_at_an_unknown_place(
        tmp_path):
    # found by CI: rank 0, stopped while writing that it raised, was said to stand in
    # dataclasses' `_asdict_inner`
    job = _rank_folder(tmp_path, [
        _state(0), _state(1, outcome="raised", error_type="RuntimeError",
                          message="CUDA error: device-side assert triggered",
                          text="CUDA error: device-side assert triggered",
                          where="train.py:18 in main")],
        LauncherReport(1, [LauncherFailure(1, 1, 2**31 - 2, 1, 1.7e9)]))
    (job.folder / "a0.rank0.stack").write_text(_stack_dumped_while_writing_a_record(tmp_path))
    incident = job.collect(stopped=False).incident
    job.complete(incident)
    (stopped,) = [r for r in incident.run.ranks if r.rank == 0]
    assert (stopped.rank, stopped.outcome, stopped.where) == (0, "stopped", None)
    assert incident.diagnosis.summary.endswith(
        "rank 0 was stopped at an unknown place — consequences")


def _stack_dumped_while_writing_a_record(tmp_path: Path) -> str:
    """faulthandler's dump of a thread stopped inside RankState.to_json (the thread's own
    block: the dump holds every thread)."""

    class DumpsWhenCopied(str):
        """A field value whose copy, made by dataclasses.asdict, dumps the stacks: deepcopy
        asks `__reduce_ex__(4)` how to rebuild it and calls what that returns."""

    dump = tmp_path / "dump"
    with dump.open("w") as out:
        value = DumpsWhenCopied("RuntimeError")
        value.__reduce_ex__ = {4: (faulthandler.dump_traceback, (out.fileno(), True))}.get
        writer = threading.Thread(target=_state(0, error_type=value).to_json)
        writer.start()
        writer.join()
    blocks = re.split(r"\n(?=\S)", dump.read_text())
    (current,) = [b for b in blocks if b.startswith("Current thread")]
    assert "_asdict_inner" in current and "rankfiles.py" in current
    return current
