"""A job across nodes: `cudadiag run --nnodes N --node-rank K --rdzv-backend c10d
--rdzv-endpoint HOST:PORT [torchrun options] -- train.py` on every node.

Each node's agent runs torchrun as a job on one node does (isolate/ranks.py) and records its
own ranks. Once its torchrun has ended, it leaves a report (its ranks' records and its first
failure's incident) on the board (isolate/board.py: the rendezvous store at the endpoint, or
`--record-dir`) and reads every other node's. All agents pick the job's first failure from
the same reports (ranks.first_failure), so each prints the same summary and each node's log
holds the same incident. While it runs, each agent beats on the board once a second; a node
whose beats stop for GONE_AFTER_S (its agent killed, the node lost) is reported as such.
The agent on the endpoint's host holds the store until the others have read the reports.
Times come from each node's clock: across nodes, "first" is as good as their clocks agree.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cudadiag.errors import NodesError
from cudadiag.i18n import Text, _, msg
from cudadiag.incident import Incident, RankRecord
from cudadiag.isolate.board import Board, FolderBoard, StoreBoard, host_or_join, join
from cudadiag.isolate.job import Job, JobResult
from cudadiag.isolate.ranks import TorchrunJob, TorchrunLauncher, first_failure, listed
from cudadiag.options.runs import NODE_RANK

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

    from cudadiag.isolate.launcher import Launcher
    from cudadiag.isolate.nodeplan import NodePlan

BEAT_S = 1.0
"""How often an agent says it is alive."""
GONE_AFTER_S = 10.0
"""An agent silent this long (its beats stopped) is gone: killed, or its node lost."""
SAY_WAITING_AFTER_S = 3.0
"""After this long waiting for other nodes' reports, one line says which."""


@dataclass
class NodeReport:
    """What one node's agent saw of the job."""

    node_rank: int
    host: str
    launcher_status: int | None
    """Its torchrun's exit status (negative: killed by that signal)."""
    records: list[RankRecord] = field(default_factory=list)
    first: dict[str, Any] | None = None
    """The incident of this node's first failure (Incident.to_dict())."""

    def to_json(self) -> bytes:
        """The report as the board keeps it."""
        return json.dumps(asdict(self), default=str).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NodeReport:
        """Read a report to_json wrote; raises ValueError, TypeError or KeyError for
        anything else."""
        raw = json.loads(data)
        return cls(raw["node_rank"], raw["host"], raw["launcher_status"],
                   [RankRecord(**r) for r in raw["records"]], raw["first"])


class NodeLink:
    """This agent's place on the job's board: its claim of the node rank, its beats, its
    report and the others'."""

    def __init__(self, plan: NodePlan) -> None:
        self.plan = plan
        self.store: Store | None = None
        self.holds_store = False
        self.lost = False
        """The board could not be read to the end (the store's holder ended)."""
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self.board = self._open()

    def _open(self) -> Board:
        if self.plan.record_dir is not None:
            return FolderBoard(self.plan.record_dir, self.plan.run_id)
        self.store, self.holds_store = host_or_join(self.plan)
        return StoreBoard(self.store, self.plan.run_id)

    def start(self) -> None:
        """Claim this node's rank and start beating. Raises NodesError when another agent
        claimed it already."""
        k = self.plan.node_rank
        if not self.board.claim(f"claim/{k}"):
            where = (_("in {folder} (or an earlier job with this id left {left}: remove "
                       "it)").format(folder=self.plan.record_dir,
                                     left=self.plan.record_dir / ("cudadiag-" +
                                                                  self.plan.run_id))
                     if self.plan.record_dir is not None
                     else _("at {host}:{port}").format(host=self.plan.host, port=self.plan.port))
            raise NodesError(
                _("--node-rank {rank} is taken: another agent of job {job} claimed it "
                  "{where}; give each node its own rank (0 to {last}), or a new "
                  "--rdzv-id").format(rank=k, job=repr(self.plan.run_id), where=where,
                                       last=self.plan.nnodes - 1))
        beats = self.board if self.plan.record_dir is not None else StoreBoard(
            join(self.plan), self.plan.run_id)  # a connection of its own: another thread
        self._beating = threading.Thread(target=self._beat, args=(beats,), daemon=True,
                                         name="cudadiag-node-beat")
        self._beating.start()

    def _beat(self, board: Board) -> None:
        count = 0
        while True:
            count += 1
            try:
                board.beat(f"alive/{self.plan.node_rank}", count)
            except (OSError, RuntimeError):
                return  # the store is gone: the others will find this node silent
            if self._stop.wait(BEAT_S):
                return

    def exchange(self, mine: NodeReport) -> tuple[list[NodeReport], list[int]]:
        """Leave `mine` on the board and wait for every other node's report (while its
        agent beats); return the reports, this node's among them, in node order, and the
        nodes that went silent without one. The agent that holds the store keeps it until
        the others have read theirs."""
        k = self.plan.node_rank
        try:
            self.board.put(f"report/{k}", mine.to_json())
            reports, gone = self._gather(k, mine)
            self.board.put(f"read/{k}", b"1")
            if self.holds_store:
                self._wait_for("read/{n}", [r.node_rank for r in reports if r.node_rank != k])
        except (RuntimeError, OSError):  # the store's holder ended: its node was lost
            self.lost = True
            reports, gone = [mine], [n for n in range(self.plan.nnodes) if n != k]
        finally:
            self._stop.set()
        return reports, gone

    def _gather(self, k: int, mine: NodeReport) -> tuple[list[NodeReport], list[int]]:
        found: dict[int, NodeReport] = {k: mine}
        others = [n for n in range(self.plan.nnodes) if n != k]
        gone = self._wait_for("report/{n}", others, found)
        return [found[n] for n in sorted(found)], gone

    def _wait_for(self, pattern: str, nodes: list[int],
                  found: dict[int, NodeReport] | None = None) -> list[int]:
        """Wait until each of `nodes` has written its key (`pattern` with {n}) or gone
        silent; keep the reports read in `found`; return the silent nodes."""
        started = time.monotonic()
        heard = {n: (self.board.beats(f"alive/{n}"), started) for n in nodes}
        waiting, said = set(nodes), False
        while waiting:
            for n in sorted(waiting):
                value = self.board.read(pattern.format(n=n))
                if value is not None:
                    waiting.discard(n)
                    if found is not None:
                        found[n] = _report_or_none(value, n)
                    continue
                beats = self.board.beats(f"alive/{n}")
                if beats != heard[n][0]:
                    heard[n] = (beats, time.monotonic())
            silent = {n for n in waiting if time.monotonic() - heard[n][1] > GONE_AFTER_S}
            if silent == waiting:
                return sorted(silent)
            if found is not None and not said and time.monotonic() - started > \
                    SAY_WAITING_AFTER_S:
                print(_("cudadiag: waiting for the report of {nodes}").format(nodes=", ".join(
                    (_("node {node} (its job is still ending)") if heard[n][0] else
                     _("node {node} (not heard from)")).format(node=n)
                    for n in sorted(waiting))), file=sys.stderr, flush=True)
                said = True
            time.sleep(0.2)
        return []


def _report_or_none(value: bytes, node: int) -> NodeReport:
    try:
        return NodeReport.from_json(value)
    except (ValueError, TypeError, KeyError):
        return NodeReport(node, "?", None)


@dataclass
class NodesJob(TorchrunJob):
    """A node's part of a job across nodes: torchrun on this node with `options`, the
    job's first failure agreed with the other nodes' agents (`plan`)."""

    plan: NodePlan | None = None
    link: NodeLink | None = field(default=None, init=False, repr=False)
    reports: list[NodeReport] = field(default_factory=list, init=False)
    gone: list[int] = field(default_factory=list, init=False)
    """Nodes whose agents went silent without a report."""

    launcher_name: ClassVar[str] = "torchrun"

    def prepare(self, job: Job, launcher: Launcher | None) -> TorchrunLauncher:
        """Reach the board (hold the store when this is the endpoint's host), claim this
        node's rank, then make the rank folder and torchrun's launcher. Raises NodesError
        when no store answers or the rank is taken."""
        assert self.plan is not None
        self.link = NodeLink(self.plan)
        self.link.start()
        if self.plan.from_slurm:
            print(_("cudadiag: from SLURM: {options}").format(
                options=" ".join(self.plan.from_slurm)), file=sys.stderr, flush=True)
        return super().prepare(job, launcher)

    def collect(self, stopped: bool, launcher_status: int | None = None) -> JobResult | None:
        """This node's ranks (TorchrunJob.collect), then every node's: the job's first
        failure and its incident, the same on every node."""
        assert self.plan is not None and self.link is not None and self.folder is not None
        local = super().collect(stopped, launcher_status)
        for record in self.records:
            record.node_rank = self.plan.node_rank
        first = local.incident if local is not None else None
        mine = NodeReport(self.plan.node_rank, socket.gethostname(), launcher_status,
                          list(self.records), first.to_dict() if first is not None else None)
        self.reports, self.gone = self.link.exchange(mine)
        self.records = sorted((r for report in self.reports for r in report.records),
                              key=lambda r: r.rank)
        self._first = first_failure(self.records)
        if self._first is None:
            return JobResult(None, 0)
        return JobResult(self._incident_of(self._first, first), 1)

    def _incident_of(self, record: RankRecord, local: Incident | None) -> Incident | None:
        report = next(r for r in self.reports if r.node_rank == record.node_rank)
        if report.first is None:
            return local
        return Incident.from_dict(report.first)

    def complete(self, incident: Incident) -> None:
        """TorchrunJob.complete, with the nodes: the summary also names the nodes whose
        agent was killed and those that sent no report."""
        super().complete(incident)
        if self._first is None:
            return
        notes: list[Text] = [
            msg("node {node}'s torchrun agent was killed by {signal}", node=r.node_rank,
                signal=signal.Signals(-r.launcher_status).name)
            for r in self.reports if r.launcher_status is not None and
                 r.launcher_status < 0 and -r.launcher_status in signal.valid_signals()]
        assert self.plan is not None and self.link is not None
        if self.link.lost:
            notes.append(msg("the rendezvous store at {host}:{port} is gone (the agent that "
                             "held it ended): this is what node {node} saw alone",
                             host=self.plan.host, port=self.plan.port,
                             node=self.plan.node_rank))
        else:
            notes += [msg("node {node} sent no report (its agent was killed or the node lost: "
                          "look at its own log)", node=n) for n in self.gone]
        if notes:
            incident.diagnosis.summary = msg("{earlier}; {next}",
                                             earlier=incident.diagnosis.summary,
                                             next=listed(notes, "; "))

    def launcher_words(self) -> list[str]:
        """torchrun's options, with this node's rank (which torchrun's c10d backend does
        not take)."""
        assert self.plan is not None
        if any(w.split("=")[0] in NODE_RANK.flags for w in self.options):
            return self.options
        return [*self.options, "--node-rank", str(self.plan.node_rank)]

