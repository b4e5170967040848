"""Jobs across nodes (issue 26, item 3): `cudadiag run --nnodes 2 --node-rank K --rdzv-backend
c10d --rdzv-endpoint HOST:PORT -- job.py`, run as two agents on this machine (two processes
stand for two nodes: c10d on 127.0.0.1, gloo ranks on the CPU, each node with its own
incident log). The agents agree on the job's first failure, so both print the same summary
and both logs hold the same incident; a node whose agent is killed is named as such."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudadiag import cli
from cudadiag.incident import Incident
from cudadiag.isolate.nodeplan import plan_nodes
from cudadiag.isolate.slurm import first_host, slurm_node
from cudadiag.log.store import IncidentStore

AGENT_LIMIT_S = 240
"""The most a test waits for an agent (two busy cores, four torch imports per job)."""
SUMMARY = re.compile(r"^cudadiag \[(?P<id>\w+)\] (?P<summary>.*?)(?: \[simulated\])?$",
                     re.MULTILINE)

BAD_TARGET = """\
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from cudadiag.testing import simulated_cuda

simulated_cuda().start()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)  # 4 classes: 0..3
for step in range(5):
    x = torch.randn(5, 8)
    target = torch.tensor([0, 1, 2, 3, 1])
    if os.environ["NODE"] == "1" and os.environ["LOCAL_RANK"] == os.environ["BAD_LOCAL"] \\
            and step == 3:
        target[3] = 4
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
dist.destroy_process_group()
"""

NODE1_WAITS = """\
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
grads = torch.ones(3)
dist.all_reduce(grads)
if os.environ["NODE"] == "1":
    print("node 1 is waiting", flush=True)
    time.sleep(600)  # meanwhile its agent is killed
dist.all_reduce(grads)
"""


class Node:
    """One node's agent: `cudadiag run` in its own session, its output in files, its own
    incident log."""

    def __init__(self, folder: Path, k: int, options: list[str], env: dict[str, str]) -> None:
        self.folder, self.k = folder, k
        self.home = folder / f"home{k}"
        self.out, self.err = folder / f"node{k}.out", folder / f"node{k}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cudadiag.cli", "run", *options, "--", "job.py"],
                cwd=folder, stdout=out, stderr=err,
                env={**os.environ, **env, "NODE": str(k), "CUDADIAG_HOME": str(self.home)},
                start_new_session=True)

    def wait(self) -> int:
        """The agent's exit status, once it has ended."""
        return self.process.wait(timeout=AGENT_LIMIT_S)

    def stderr(self) -> str:
        """What the agent printed on stderr."""
        return self.err.read_text()

    def summary(self) -> tuple[str, str]:
        """(incident id, summary) of the line the agent printed last."""
        found = SUMMARY.findall(self.stderr())
        assert found, self.stderr()[-4000:]
        return found[-1]

    def incident(self) -> Incident:
        """The one incident in this node's log."""
        (incident,) = IncidentStore(self.home).load()
        return incident

    def kill(self) -> None:
        """SIGKILL the agent and everything it started, as a node that is lost."""
        for pid in [self.process.pid, *_descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=AGENT_LIMIT_S)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _torchrun_agent(node: Node) -> int:
    """The pid of the torchrun agent a node's `cudadiag run` started."""
    for pid in _descendants(node.process.pid):
        with contextlib.suppress(OSError):
            if b"cudadiag.isolate.torchrun" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError("no torchrun agent under node " + str(node.k))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + AGENT_LIMIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def two_nodes(tmp_path: Path, script: str, *, nproc: int = 1, extra: tuple[str, ...] = (),
              env: dict[str, str] | None = None, node_rank_option: bool = True
              ) -> tuple[Node, Node]:
    """Start node 0's agent, wait until it holds the rendezvous store, start node 1's."""
    (tmp_path / "job.py").write_text(script)
    port = free_port()
    nodes = []
    for k in (0, 1):
        options = ["--nproc-per-node", str(nproc), "--rdzv-endpoint", f"127.0.0.1:{port}",
                   *extra]
        if node_rank_option:
            options += ["--nnodes", "2", "--node-rank", str(k), "--rdzv-backend", "c10d",
                        "--rdzv-id", "job"]
        node_env = {"BAD_LOCAL": str(nproc - 1), **(env or {})}
        if not node_rank_option:
            node_env |= {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": str(k),
                         "SLURM_JOB_NODELIST": "127.0.0.1"}
        nodes.append(Node(tmp_path, k, options, node_env))
        if k == 0 and "--record-dir" not in extra:
            wait_until(lambda: accepts(port) or nodes[0].process.poll() is not None,
                       "node 0 holds the store")
    return nodes[0], nodes[1]


def assert_same_job_incident(node0: Node, node1: Node) -> tuple[str, Incident]:
    """Both agents printed the same summary and both logs hold that incident; return the
    summary and node 0's incident."""
    (id0, summary0), (id1, summary1) = node0.summary(), node1.summary()
    assert (id0, summary0) == (id1, summary1), (node0.stderr()[-3000:], node1.stderr()[-3000:])
    incident0, incident1 = node0.incident(), node1.incident()
    assert incident0.id == incident1.id == id0
    assert incident0.diagnosis.summary == incident1.diagnosis.summary == summary0
    return summary0, incident0


@pytest.mark.slow
def test_two_nodes_of_one_process_each_print_the_same_first_failure(tmp_path):
    node0, node1 = two_nodes(tmp_path, BAD_TARGET)
    assert (node0.wait(), node1.wait()) == (1, 1)  # torchrun's status on each node
    summary, incident = assert_same_job_incident(node0, node1)
    first = next(r for r in incident.run.ranks if r.node_rank == 1)
    other = next(r for r in incident.run.ranks if r.node_rank == 0)
    assert re.fullmatch(
        rf"rank {first.rank} on node 1 failed first at step 3 \(nll_loss, target 4\); "
        rf"rank {other.rank} on node 0 (failed afterwards|was stopped) in all_reduce — "
        r"consequences", summary), summary
    assert incident.diagnosis.rank == first.rank and first.outcome == "raised"
    assert incident.diagnosis.family == "device_assert" and other.consequence
    assert incident.op.name == "aten::nll_loss_forward"
    assert incident.run.launcher[-2:] == ["--node-rank", "0"]
    assert incident.run.cwd == str(tmp_path)
    assert "node_rank is only used for static" not in node0.stderr()  # not passed on


@pytest.mark.slow
def test_two_nodes_of_two_processes_each_name_the_failing_rank_and_node(tmp_path):
    node0, node1 = two_nodes(tmp_path, BAD_TARGET, nproc=2)
    assert (node0.wait(), node1.wait()) == (1, 1)
    summary, incident = assert_same_job_incident(node0, node1)
    ranks = {r.rank: r for r in incident.run.ranks}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert sorted(r.node_rank for r in ranks.values()) == [0, 0, 1, 1]
    first = ranks[incident.diagnosis.rank]
    assert (first.node_rank, first.local_rank) == (1, 1)
    assert summary.startswith(f"rank {first.rank} on node 1 failed first at step 3 "
                              "(nll_loss, target 4); ")
    assert summary.endswith(" — consequences")
    for rank in ranks.values():
        if rank is not first:
            assert f"rank {rank.rank} on node {rank.node_rank} " in summary


@pytest.mark.slow
def test_when_a_nodes_torchrun_agent_is_killed_both_agents_name_it_and_its_rank(tmp_path):
    node0, node1 = two_nodes(tmp_path, NODE1_WAITS)
    wait_until(lambda: "node 1 is waiting" in node1.out.read_text(), "node 1's rank waits")
    os.kill(_torchrun_agent(node1), signal.SIGKILL)
    assert node1.wait() == 128 + signal.SIGKILL  # its torchrun's end, as a shell says it
    assert node0.wait() == 1
    summary, incident = assert_same_job_incident(node0, node1)
    waiting = next(r for r in incident.run.ranks if r.node_rank == 1)
    assert summary.startswith("no rank raised an error of its own: only collectives failed")
    assert (f"rank {waiting.rank} on node 1 was still at job.py:12 in <module> when it was "
            "stopped") in summary
    assert summary.endswith("node 1's torchrun agent was killed by SIGKILL")


@pytest.mark.slow
def test_a_node_lost_whole_is_named_by_the_agent_that_is_left(tmp_path):
    node0, node1 = two_nodes(tmp_path, NODE1_WAITS)
    wait_until(lambda: "node 1 is waiting" in node1.out.read_text(), "node 1's rank waits")
    node1.kill()
    assert node0.wait() == 1
    _, summary = node0.summary()
    assert summary.startswith("no rank raised an error of its own: only collectives failed "
                              "(rank 0 on node 0 in all_reduce")
    assert summary.endswith("node 1 sent no report (its agent was killed or the node lost: "
                            "look at its own log)")
    assert node0.incident().diagnosis.summary == summary


@pytest.mark.slow
def test_the_nodes_agree_through_a_shared_record_folder(tmp_path):
    shared = tmp_path / "shared"
    node0, node1 = two_nodes(tmp_path, BAD_TARGET, extra=("--record-dir", str(shared)))
    assert (node0.wait(), node1.wait()) == (1, 1)
    summary, _ = assert_same_job_incident(node0, node1)
    assert " on node 1 failed first at step 3 (nll_loss, target 4); " in summary
    reports = sorted(p.name for p in (shared / "cudadiag-job").iterdir())
    assert {"report-0", "report-1"} <= set(reports)
    assert oct((shared / "cudadiag-job").stat().st_mode & 0o777) == "0o700"


@pytest.mark.slow
def test_under_slurm_the_node_rank_comes_from_its_variables(tmp_path):
    node0, node1 = two_nodes(tmp_path, BAD_TARGET, node_rank_option=False)
    assert (node0.wait(), node1.wait()) == (1, 1)
    summary, incident = assert_same_job_incident(node0, node1)
    assert " on node 1 failed first at step 3 (nll_loss, target 4); " in summary
    assert ("cudadiag: from SLURM: --node-rank 1 --nnodes 2 --rdzv-backend c10d --rdzv-id "
            "4242\n") in node1.stderr()  # the endpoint given is kept
    assert incident.run.launcher[-2:] == ["--node-rank", "0"]


@pytest.mark.parametrize(("options", "message"), [
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400"],
     "--nnodes 2: say which node this agent is: --node-rank K (0 to 1)"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-backend", "c10d",
      "--rdzv-endpoint", "127.0.0.1:29400"],
     "--node-rank 2 is out of range for --nnodes 2 (0 to 1)"),
    (["--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d"],
     "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "1"],
     "--nnodes 2: across nodes cudadiag needs --rdzv-backend c10d"),
    (["--nnodes", "1:2", "--node-rank", "1"],
     "--nnodes 1:2: an elastic node count is not supported"),
    (["--node-rank", "1"], "--node-rank is for a job across nodes: give --nnodes N too"),
])
def test_a_job_across_nodes_that_cannot_meet_is_refused_before_anything_runs(
        tmp_path, monkeypatch, capsys, options, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text("raise SystemExit('it ran')\n")
    status = cli.main(["run", "--nproc-per-node", "1", *options, "--", "job.py"])
    err = capsys.readouterr().err
    assert status == 2 and f"cudadiag run: {message}" in err and "it ran" not in err


UNREACHABLE = "192.0.2.1"
"""An address of TEST-NET-1 (RFC 5737): no machine answers there."""


def test_an_endpoint_nobody_answers_at_ends_after_the_join_timeout(tmp_path):
    (tmp_path / "job.py").write_text("raise SystemExit('it ran')\n")
    port = free_port()
    ran = subprocess.run(
        [sys.executable, "-m", "cudadiag.cli", "run", "--nnodes", "2", "--node-rank", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{UNREACHABLE}:{port}",
         "--rdzv-conf", "join_timeout=2", "--", "job.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=AGENT_LIMIT_S)
    assert ran.returncode == 2, ran.stderr
    assert (f"cudadiag run: no rendezvous store answered at {UNREACHABLE}:{port} within 2 s "
            "(node 1 of 2)") in ran.stderr
    assert "it ran" not in ran.stderr + ran.stdout


@pytest.mark.parametrize(("nodelist", "first"), [
    ("gpu-[03-05,9],cpu1", "gpu-03"), ("node7", "node7"), ("a1,b2", "a1"),
    ("n[1-4]", "n1"), ("", None), ("n[x-y]", None)])
def test_the_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


def test_slurm_fills_what_the_user_left_out_and_keeps_what_they_gave():
    environ = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "4", "SLURM_NODEID": "2",
               "SLURM_JOB_NODELIST": "gpu-[10-13]"}
    assert slurm_node(environ).first_host == "gpu-10"
    options, plan = plan_nodes(["--nproc-per-node", "8"], None, None, environ)
    assert options == ["--nproc-per-node", "8", "--nnodes", "4", "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", "gpu-10:29400", "--rdzv-id", "77"]
    assert (plan.nnodes, plan.node_rank, plan.host, plan.port, plan.run_id) == (
        4, 2, "gpu-10", 29400, "77")
    options, plan = plan_nodes(["--nproc-per-node", "8", "--rdzv-endpoint", "head:1234"], 0,
                               None, environ)
    assert (plan.node_rank, plan.host, plan.port) == (0, "head", 1234)
    assert "gpu-10:29400" not in options
    assert plan_nodes(["--nproc-per-node", "8"], None, None,
                      {**environ, "SLURM_NNODES": "1"}) == (["--nproc-per-node", "8"], None)
