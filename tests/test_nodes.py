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
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag import cli
from cudadiag.isolate.nodeplan import plan_nodes
from cudadiag.isolate.slurm import first_host, slurm_node
from node_agents import (
    AGENT_LIMIT_S,
    BAD_TARGET,
    Node,
    assert_same_job_incident,
    descendants,
    free_port,
    two_nodes,
    wait_until,
)

NODE1_WAITS = """\
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
grads = torch.ones(3)
dist.all_reduce(grads)
if os.environ["NODE"] == os.environ.get("WAITING_NODE", "1"):
    print(f"node {os.environ['NODE']} is waiting", flush=True)
    time.sleep(600)  # meanwhile its agent is killed
dist.all_reduce(grads)
"""


def _torchrun_agent(node: Node) -> int:
    """The pid of the torchrun agent a node's `cudadiag run` started."""
    for pid in descendants(node.process.pid):
        with contextlib.suppress(OSError):
            if b"cudadiag.isolate.torchrun" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError("no torchrun agent under node " + str(node.k))


@pytest.mark.slow
def test_two_nodes_of_one_process_each_print_the_same_first_failure_and_each_log_says_it(
        tmp_path):
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
    # node 0's own log shows only consequences (gloo's closed connection): `explain` of it
    # names the job's first failure from the agents' line, on node 0 and anywhere else
    explained = _explain(node0.err, node0.home)
    assert ("first failure, as cudadiag diagnosed the run (line " in explained
            and f"`cudadiag show {incident.id}`" in explained), explained
    assert f"  cudadiag [{incident.id}] device_assert — {summary}" in explained
    assert f"later errors (probable consequences of rank {first.rank}'s failure):" in explained
    assert re.search(r"^  rank 0, line \d+: distributed — RuntimeError: \[.*gloo", explained,
                     re.M), explained
    assert "  - target 4 for 4 output columns (valid [0, 4)" in explained  # the incident's
    elsewhere = _explain(node0.err, tmp_path / "another_machine")
    assert f"  cudadiag [{incident.id}] device_assert — {summary}" in elsewhere
    assert "Class targets must lie in [0, C)" in elsewhere  # device_assert's, for a log
    assert (f"restart: as the incident says (`cudadiag show {incident.id}` where the run was "
            "recorded)") in elsewhere
    assert not (tmp_path / "another_machine").exists()  # explain creates no log there
    explained1 = _explain(node1.err, node1.home)  # node 1 shows the failure itself
    assert "first error (line " in explained1 and "first failure, as" not in explained1


def _explain(log: Path, home: Path) -> str:
    """`cudadiag explain LOG` on a machine whose incident log is in `home`."""
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", str(log)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDADIAG_HOME": str(home)}).stdout


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
def test_when_the_node_holding_the_store_is_lost_the_other_says_it_saw_alone(tmp_path):
    node0, node1 = two_nodes(tmp_path, NODE1_WAITS, env={"WAITING_NODE": "0"})
    wait_until(lambda: "node 0 is waiting" in node0.out.read_text(), "node 0's rank waits")
    node0.kill()
    node1.wait()
    _, summary = node1.summary()
    assert "rank 1 on node 1 " in summary or "rank 0 on node 1 " in summary
    assert summary.endswith("is gone (the agent that held it ended): this is what node 1 saw "
                            "alone"), summary
    assert node1.incident().diagnosis.summary == summary


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


def test_a_node_rank_already_claimed_in_the_record_folder_is_refused(tmp_path):
    (tmp_path / "job.py").write_text("raise SystemExit('it ran')\n")
    (tmp_path / "shared" / "cudadiag-job").mkdir(parents=True)
    (tmp_path / "shared" / "cudadiag-job" / "claim-1").write_text("")  # an earlier job's
    ran = subprocess.run(
        [sys.executable, "-m", "cudadiag.cli", "run", "--nnodes", "2", "--node-rank", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-id", "job",
         "--record-dir", str(tmp_path / "shared"), "--", "job.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=AGENT_LIMIT_S)
    assert ran.returncode == 2, ran.stderr
    assert ("cudadiag run: --node-rank 1 is taken: another agent of job 'job' claimed it in "
            f"{tmp_path / 'shared'} (or an earlier job with this id left "
            f"{tmp_path / 'shared' / 'cudadiag-job'}: remove it)") in ran.stderr
    assert "it ran" not in ran.stderr + ran.stdout
