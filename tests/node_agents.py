"""Two `cudadiag run` agents of a job across nodes on this machine (tests/test_nodes.py,
tests/test_export_ranks.py): two processes stand for two nodes, c10d on 127.0.0.1, each
node with its own incident log."""

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

from cudadiag.incident import Incident
from cudadiag.log.store import IncidentStore

AGENT_LIMIT_S = 240
"""The most a test waits for an agent (two busy cores, four torch imports per job)."""
SUMMARY = re.compile(r"^cudadiag \[(?P<id>\w+)\] (?P<family>[\w-]+) — (?P<summary>.*?)"
                     r"(?: \[(?:simulated|シミュレーション)\])?$", re.MULTILINE)
"""The headline `cudadiag run` prints: the incident's id, its family, its summary (in
English or in Japanese, whose tag for the simulated device is its own)."""

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
        found = list(SUMMARY.finditer(self.stderr()))
        assert found, self.stderr()[-4000:]
        return found[-1]["id"], found[-1]["summary"]

    def incident(self) -> Incident:
        """The one incident in this node's log."""
        (incident,) = IncidentStore(self.home).load()
        return incident

    def kill(self) -> None:
        """SIGKILL the agent and everything it started, as a node that is lost."""
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=AGENT_LIMIT_S)


def descendants(pid: int) -> list[int]:
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


