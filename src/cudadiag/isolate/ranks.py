"""Multi-process runs: `cudadiag run --nproc-per-node N [torchrun options] -- script.py`,
`%cuda_isolate --nproc-per-node N`, and `%cuda_isolate` on cells that start their ranks with
torch.multiprocessing.spawn (isolate/spawn.py).

PyTorch's own launcher runs the job (`torch.distributed.run`: rendezvous, restarts, error
files, its "Root Cause" summary); every rank is a cudadiag worker (blocking launches, the
tracer, the prechecks) that leaves its record (isolate/rankfiles.py). From those records and
the failures torchrun reports comes one incident. Its first error is the rank that failed
first in time with an error of its own (collective failures are what other ranks' errors
lead to: explain.is_consequence); the other ranks' errors are its probable consequences.
When only collectives failed (timeouts, aborted communicators, a peer gone), the diagnosis
says so and points at the ranks that were not in the collective: the slowest or missing.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from cudadiag.classification import classify
from cudadiag.diagnose import incident_from_recorded_error, incident_of_dead_process
from cudadiag.errors import TorchrunOptionsError
from cudadiag.explain import is_consequence
from cudadiag.i18n import N_, Text, _, localize, msg
from cudadiag.incident import Diagnosis, Incident, LaterError, RankRecord, RunInfo
from cudadiag.isolate.job import Job, JobResult
from cudadiag.isolate.launcher import Launcher, SubprocessLauncher, WorkerProcess
from cudadiag.isolate.procgroup import describe, group_members, kill_and_wait, kill_group
from cudadiag.isolate.rankfiles import (
    LauncherFailure,
    LauncherReport,
    RankFiles,
    RankState,
    read_rank_files,
)
from cudadiag.isolate.spawn import EXITS_FILE, START_METHOD
from cudadiag.knowledge import FAMILIES, process_end_words

if TYPE_CHECKING:
    from cudadiag.isolate.result import IsolatedResult

STOP_GRACE_S = 5.0
"""How long ranks left running get, after SIGTERM, to dump their stacks and exit."""
STOPPED_BY = ("SIGTERM", "SIGINT")
"""Signals torchrun (or cudadiag's timeout) stops the other ranks with. SIGKILL too, but only
after SIGTERM, which leaves the rank's stack file: a rank killed by SIGKILL without one was
stopped only when cudadiag's timeout stopped the job; else something outside killed it (the
host's out-of-memory killer) and it failed on its own."""
OUTCOME_WORDS = {
    "raised": N_("{rank} failed afterwards {place}"),
    "stopped": N_("{rank} was stopped {place}"),
    "finished": N_("{rank} had already ended (exit status {status})"),
    "died": N_("{rank} ended without a Python exception ({status})"),
    "unknown": N_("{rank} left no trace (it may never have started)"),
}
"""How a rank other than the first is described in the summary, by outcome."""
MISSING_WORDS = {
    "stopped": N_("{rank} was still {place} when it was stopped"),
    "finished": N_("{rank} had already ended (exit status {status})"),
    "died": N_("{rank} had ended without a Python exception ({status})"),
    "unknown": N_("{rank} left no trace (it may never have started)"),
}
"""How a rank that was not in the failed collective is described."""


def check_torchrun_options(options: list[str]) -> None:
    """Check `options` with torchrun's own parser. Raises TorchrunOptionsError for an
    unknown option or a bad value, and for `-m`, `--no-python` and
    `--run-path`: cudadiag puts its worker there (the script, or `-m module`, goes after
    `--`)."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        known, unknown = parser.parse_known_args([*options, "script.py"])
    except argparse.ArgumentError as exc:
        raise TorchrunOptionsError(_("torchrun would refuse this: {error}").format(
            error=exc)) from None
    if unknown:
        raise TorchrunOptionsError(
            _("torchrun does not know {options} (see `torchrun --help`); cudadiag's own "
              "options and torchrun's go before `--`, the script after it").format(
                options=" ".join(unknown)))
    if known.module or known.no_python or known.run_path:
        raise TorchrunOptionsError(
            _("-m, --no-python and --run-path are cudadiag's to set (each rank runs "
              "cudadiag's worker); name the module after `--`: cudadiag run --nproc-per-node "
              "N -- -m package.module"))


RENDEZVOUS_SETTINGS = ("standalone", "rdzv_endpoint", "rdzv_backend", "rdzv_id",
                       "master_addr", "master_port", "nnodes")
"""torchrun's settings that say where the ranks meet (as its parser names them)."""


def with_own_rendezvous(options: list[str]) -> list[str]:
    """`options` with `--standalone` added when they (and torchrun's PET_* variables) say
    nothing of where the ranks meet: torchrun then picks a free port. Recent torchrun does
    so itself (pytorch/pytorch#175699, 2026); before it, the default 127.0.0.1:29500
    collided with any other job on the machine, one started with plain torchrun among
    them."""
    from torch.distributed.run import get_args_parser

    if any(f"PET_{name.upper()}" in os.environ for name in RENDEZVOUS_SETTINGS):
        return options
    given, _ = get_args_parser().parse_known_args([*options, "script.py"])
    default, _ = get_args_parser().parse_known_args(["script.py"])
    if any(getattr(given, name) != getattr(default, name) for name in RENDEZVOUS_SETTINGS):
        return options
    return [*options, "--standalone"]


class TorchrunLauncher:
    """Starts torchrun (cudadiag.isolate.torchrun) with a cudadiag worker as every rank's
    program, in its own session like any isolated run."""

    def __init__(self, python: str, options: list[str], failures: Path) -> None:
        self.python = python
        self.options = options
        self.failures = failures

    def start(self, job_path: str, env: dict[str, str]) -> WorkerProcess:
        """Start torchrun; raises OSError when the interpreter cannot be started."""
        return WorkerProcess(
            [self.python, "-m", "cudadiag.isolate.torchrun", str(self.failures), *self.options,
             "-m", "cudadiag.isolate.worker", job_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True, cwd=os.getcwd(),
        )


@dataclass
class RankJob(ABC):
    """One multi-process run, the part every launcher shares: once the job ran, each rank's
    record and from them the incident (the first failing rank's, the others its
    consequences). A subclass says how the ranks are started and where its launcher wrote
    how they ended (`exits_file`, in the format of cudadiag.isolate.torchrun's)."""

    folder: Path | None = field(default=None, init=False)
    records: list[RankRecord] = field(default_factory=list, init=False)
    root_cause: int | None = field(default=None, init=False)
    """The rank the launcher names as the first observed failure."""
    _first: RankRecord | None = field(default=None, init=False, repr=False)

    launcher_name: ClassVar[str]
    """The launcher in the user's words (`torchrun`)."""
    exits_file: ClassVar[str]
    """Beside the rank folder: the ranks that failed, as the launcher saw them."""
    root_cause_key: ClassVar[str]
    """The diagnosis detail that holds the rank the launcher reported first."""

    @abstractmethod
    def prepare(self, job: Job, launcher: Launcher | None) -> Launcher:
        """Make the folder the ranks write their records into and name it in `job`; return
        the launcher that starts the job (`launcher`: the one a single run would use)."""

    @abstractmethod
    def launcher_words(self) -> list[str]:
        """How the ranks were started, as the incident records it (`run.launcher`)."""

    def _make_folder(self, job: Job) -> None:
        self.folder = job.folder / "ranks"
        self.folder.mkdir(mode=0o700)
        job.ranks = str(self.folder)

    def collect(self, stopped: bool, launcher_status: int | None = None) -> JobResult | None:
        """After the launcher ended (`stopped`: by cudadiag's timeout or Ctrl-C;
        `launcher_status`: its exit status, unused here but by a job across nodes): stop the
        ranks it left running, read every rank's record and return the result of the job:
        the first failure's incident, None when no rank raised or died (a subclass may have
        no result at all: None)."""
        assert self.folder is not None, "prepare() first"
        found = read_rank_files(self.folder)
        if self._stop_leftovers(found):
            found = read_rank_files(self.folder)  # with the stacks the stopped ranks dumped
        files = {f.rank: f for f in found}
        failures = self._launcher_failures()
        ranks = sorted(set(files) | set(failures))
        self.records = [_record(r, files.get(r), failures.get(r), stopped) for r in ranks]
        first = first_failure(self.records)
        if first is None:
            return JobResult(None, 0)
        self._first = first
        return JobResult(_first_incident(first, files.get(first.rank)), 1)

    def complete(self, incident: Incident) -> None:
        """Give the incident the other ranks' errors (as probable consequences), every
        rank's record and the summary naming the first rank; leave it as it is when no rank
        failed (the incident is of something else: a launcher that crashed, a cell before
        any rank started)."""
        first = self._first
        if first is None:
            return
        others = [r for r in self.records if r is not first]
        incident.error.later += [
            LaterError(type=r.error_type or "", message=r.message or "",
                       family=r.family or "unknown", at=r.at or "", rank=r.rank)
            for r in others if r.outcome == "raised"]
        incident.diagnosis.rank = first.rank
        incident.run.ranks = self.records
        incident.run.launcher = self.launcher_words()
        if self.root_cause is not None:
            incident.diagnosis.details[self.root_cause_key] = self.root_cause
        if _is_cause(first):
            incident.diagnosis.summary = _first_failure_summary(incident, first, others)
        else:
            incident.diagnosis.summary = _collective_only_summary(first, others)

    def message(self, message: str, result: IsolatedResult) -> str:
        """The line for a run that gave no incident (`message`: the single-run one), with
        the ranks: where each one was when the job was stopped (a timeout, Ctrl-C, the
        launcher killed), or that the launcher failed before any rank ran."""
        where = _("; no rank raised an error. Where each rank was: {states}. A rank that is "
                  "not in the collective the others wait in is the slowest or missing "
                  "one.").format(states=", ".join(localize(_state(r)) for r in self.records))
        if result.timed_out or result.interrupted:
            return message + (where if self.records else "")
        launcher = _(self.launcher_name)
        if result.returncode and not self.records:
            return _("cudadiag: {launcher} ended with status {status} before any rank ran its "
                     "program (its own message is above)").format(
                launcher=launcher, status=result.returncode)
        if result.returncode:
            return _("cudadiag: {launcher} ended with status {status}{where}").format(
                launcher=launcher, status=result.returncode, where=where)
        return message

    def _launcher_failures(self) -> dict[int, LauncherFailure]:
        assert self.folder is not None
        reported = LauncherReport.read(self.folder.parent / self.exits_file)
        self.root_cause = reported.root_cause
        return {f.rank: f for f in reported.failures}

    def _stop_leftovers(self, files: list[RankFiles]) -> bool:
        """Stop the ranks still running after torchrun ended (it was killed itself: the
        timeout, Ctrl-C): SIGTERM, which dumps their stacks, then SIGKILL; name them. Each
        rank leads its own process group (torchrun starts it in a new session). Return True
        when any rank was stopped."""
        pids = {f.rank: f.state.pid for f in files}
        left = {rank: members for rank, pid in pids.items() if (members := group_members(pid))}
        if not left:
            return False
        for rank in left:
            kill_group(pids[rank], signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(group_members(pids[r]) for r in left):
            time.sleep(0.1)
        alive = {rank: still for rank in left if (still := kill_and_wait(pids[rank]))}
        named = "; ".join(_("rank {rank}: {processes}").format(rank=rank,
                                                               processes=describe(members))
                          for rank, members in left.items())
        if alive:
            named += _(" (still running after SIGKILL: {ranks})").format(ranks="; ".join(
                _("rank {rank}: {processes}").format(rank=rank, processes=describe(members))
                for rank, members in alive.items()))
        print(_("cudadiag: stopped what torchrun left running: {ranks}").format(ranks=named),
              file=sys.stderr, flush=True)
        return True


@dataclass
class TorchrunJob(RankJob):
    """A run whose ranks torchrun starts: its options (`--nproc-per-node` among them), each
    rank a cudadiag worker running the whole program."""

    options: list[str] = field(default_factory=list)
    python: str = sys.executable

    launcher_name: ClassVar[str] = "torchrun"
    exits_file: ClassVar[str] = "torchrun.json"
    root_cause_key: ClassVar[str] = "torchrun_root_cause_rank"

    def prepare(self, job: Job, launcher: Launcher | None) -> TorchrunLauncher:
        """Make the rank folder; return the launcher that starts torchrun (`launcher`, a
        single run's, is not used: torchrun starts every rank)."""
        self._make_folder(job)
        return TorchrunLauncher(self.python, self.options, job.folder / self.exits_file)

    def launcher_words(self) -> list[str]:
        """torchrun's options."""
        return self.options


@dataclass
class SpawnJob(RankJob):
    """A run of cells that start their ranks with torch.multiprocessing.spawn or
    start_processes: one isolated child runs the cells, each process those calls start is a
    rank (isolate/spawn.py). When no rank failed, the child's own result stands (a cell
    that failed before any process started)."""

    _result_path: Path | None = field(default=None, init=False, repr=False)

    launcher_name: ClassVar[str] = N_("the isolated process")
    exits_file: ClassVar[str] = EXITS_FILE
    root_cause_key: ClassVar[str] = "spawn_root_cause_rank"

    def prepare(self, job: Job, launcher: Launcher | None) -> Launcher:
        """Make the rank folder and mark `job` as one whose spawn calls start ranks; return
        `launcher` (or a new interpreter's): the child runs the cells as any isolated run."""
        self._make_folder(job)
        job.spawn = True
        self._result_path = job.result_path
        return launcher or SubprocessLauncher()

    def collect(self, stopped: bool, launcher_status: int | None = None) -> JobResult | None:
        """The first failing rank's incident (RankJob.collect), else the child's own result
        (None when it wrote none); the child's check of its blocking variables either way."""
        assert self._result_path is not None, "prepare() first"
        own = JobResult.read(self._result_path)
        ranks = super().collect(stopped, launcher_status)
        if ranks is None or ranks.incident is None:
            return own
        ranks.blocking_check = own.blocking_check if own else ""
        return ranks

    def launcher_words(self) -> list[str]:
        """What started the ranks."""
        return ["torch.multiprocessing.start_processes", f"start_method={START_METHOD}"]


def _record(rank: int, files: RankFiles | None, failure: LauncherFailure | None,
            stopped: bool) -> RankRecord:
    """One rank's outcome from its own record and what torchrun reported about it (whose
    exit status is the process's real one: a rank may be killed after writing its record)."""
    state = files.state if files else None
    exit_code = failure.exit_code if failure else state.exit_code if state else None
    signal_name = _signal_name(exit_code)
    out = RankRecord(
        rank=rank,
        local_rank=state.local_rank if state else failure.local_rank if failure else rank,
        node=state.node if state else socket.gethostname(),
        pid=state.pid if state else failure.pid if failure else None,
        exit_status=None if signal_name else exit_code, signal=signal_name)
    if state is not None and state.outcome == "raised":
        diagnosis = _diagnosis_of(state)
        out.outcome, out.at, out.where = "raised", state.at, _failed_in(state)
        out.error_type, out.message = state.error_type, state.message
        out.family, out.consequence = diagnosis.family, is_consequence(diagnosis)
    elif state is not None and state.outcome == "finished":
        out.outcome, out.at = "finished", state.at
    elif files is not None and files.stack:
        out.outcome, out.at, out.where = "stopped", files.stack_at, files.stopped_in()
    elif _stopped_by_the_job(signal_name, stopped) or (stopped and not failure):
        out.outcome = "stopped"
    elif failure:
        out.outcome = "died"
        out.at = datetime.fromtimestamp(failure.timestamp, timezone.utc).isoformat(
            timespec="milliseconds")
    return out


def _stopped_by_the_job(signal_name: str | None, stopped: bool) -> bool:
    """True when the signal that ended a rank (one that left no stack file) is the job
    stopping it (STOPPED_BY)."""
    return signal_name in STOPPED_BY or (signal_name == "SIGKILL" and stopped)


def _signal_name(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def _failed_in(state: RankState) -> str | None:
    """The operator the tracer saw fail, else the call the exception came from."""
    op = state.incident.op if state.incident is not None else None
    return (op.name if op is not None else None) or state.where


def _diagnosis_of(state: RankState) -> Diagnosis:
    """The rank's diagnosis: its incident's when it wrote one, else its message's."""
    if state.incident is not None:
        return state.incident.diagnosis
    return classify(f"{state.error_type}: {state.text}")


def first_failure(records: list[RankRecord]) -> RankRecord | None:
    """The rank that failed first in time on its own (an error of its own, a death), else
    the first that raised at all (a collective's failure); None when none failed. Ties go
    to the lower rank, so every node of a job picks the same one from the same records."""
    causes = [r for r in records if _is_cause(r)]
    raised = [r for r in records if r.outcome == "raised"]
    return min(causes or raised, key=lambda r: (r.at or "", r.rank), default=None)


def _is_cause(record: RankRecord) -> bool:
    """A rank that failed on its own: an error that is no collective's failure, or an end
    without a Python exception (a crash, os._exit, sys.exit with a status) while others ran."""
    if record.outcome == "raised":
        return not record.consequence
    return record.outcome in ("died", "finished") and bool(record.exit_status or
                                                          record.signal)


def _first_incident(first: RankRecord, files: RankFiles | None) -> Incident:
    """The first failing rank's own incident; built from its first record when it was killed
    before writing one, or from its end when it died without an exception."""
    state = files.state if files else None
    if state is not None and state.incident is not None:
        return state.incident
    run = RunInfo(mode="isolated", blocking=True)
    if first.outcome == "raised":
        return incident_from_recorded_error(
            first.error_type or "", first.message or "",
            state.text if state is not None else first.message or "", run)
    run.signal, run.exit_status = first.signal, first.exit_status
    return incident_of_dead_process("", "", run, process=msg("rank {rank}", rank=first.rank))


def _first_failure_summary(incident: Incident, first: RankRecord,
                           others: list[RankRecord]) -> Text:
    """`rank 1 failed first at step 3 (nll_loss, target 4); rank 0 failed afterwards in
    all_reduce — consequences` (a Text: kept in the incident, shown in the reader's
    language)."""
    what = _how_it_ended(first) if first.outcome == "died" else _what_failed(incident)
    head = _failed_first(incident, who(first), what)
    described = [msg(OUTCOME_WORDS[r.outcome], rank=who(r), place=_place(r.where),
                     status=_status(r))
                 for r in others if r.outcome != "finished" or r.exit_status or r.signal]
    if not described:
        return head
    return msg("{first}; {others} — consequences", first=head,
               others=listed(described, ", "))


def _failed_first(incident: Incident, rank: Text, what: str) -> Text:
    """`rank 1 failed first at step 3 (nll_loss, target 4)`: with the step from watch(),
    else the counters of the loops around the failing line in its function (`at epoch 1,
    batch_idx 3`: tensors and other objects left out), else neither."""
    if incident.step is not None and incident.step.iteration is not None:
        return msg("{rank} failed first at step {step} ({what})", rank=rank,
                   step=incident.step.iteration, what=what)
    frames = [f for f in (incident.loop.frames if incident.loop else []) if f.loops]
    values = {k: v for loop in (frames[-1].loops if frames else [])
              for k, v in loop.values.items() if not v.startswith("<")}
    if values:
        return msg("{rank} failed first at {counters} ({what})", rank=rank, what=what,
                   counters=", ".join(f"{k} {v}" for k, v in values.items()))
    return msg("{rank} failed first ({what})", rank=rank, what=what)


def listed(items: list[Text], separator: str) -> Text:
    """`items` joined by `separator` (`, ` or `; `) as one Text, which a reader in another
    language sees joined in its own way."""
    template = N_("{earlier}, {next}") if separator == ", " else N_("{earlier}; {next}")
    joined = items[0]
    for item in items[1:]:
        joined = msg(template, earlier=joined, next=item)
    return joined


def _collective_only_summary(first: RankRecord, others: list[RankRecord]) -> Text:
    """Only collectives failed: say so, and name the ranks that were not in them."""
    failed = [first, *(r for r in others if r.outcome == "raised")]
    missing = [_missing(r) for r in others if r.outcome in MISSING_WORDS]
    ranks = listed([msg("{rank} {place}", rank=who(r), place=_place(r.where)) for r in failed],
                   ", ")
    if missing:
        return msg("no rank raised an error of its own: only collectives failed ({ranks}: a "
                   "timeout, an aborted communicator or a peer gone); {missing} — look at "
                   "that rank, not at a kernel", ranks=ranks, missing=listed(missing, "; "))
    return msg("no rank raised an error of its own: only collectives failed ({ranks}: a "
               "timeout, an aborted communicator or a peer gone); every rank failed in a "
               "collective — look at the slowest rank (the one that reached the collective "
               "last), not at a kernel", ranks=ranks)


def _how_it_ended(record: RankRecord) -> str:
    """`killed by signal 9 (SIGKILL) — often the host's out-of-memory killer; check
    `dmesg``: a rank that ended without a Python exception (knowledge.PROCESS_ENDS)."""
    if record.signal and record.signal.startswith("SIG"):
        return process_end_words(-signal.Signals[record.signal].value)
    return process_end_words(record.exit_status or 0)


def _what_failed(incident: Incident) -> str:
    """`nll_loss, target 4` from the operator and the offending value; else the family."""
    details = incident.diagnosis.details
    op = incident.op.name if incident.op else details.get("op")
    parts = []
    if op:
        name = str(op).removeprefix("aten::")
        parts.append(name.removesuffix("_forward"))
    if details.get("argument") is not None and details.get("value") is not None:
        parts.append(f"{details['argument']} {details['value']}")
    if parts:
        return ", ".join(parts)
    family = incident.diagnosis.family
    return FAMILIES[family].title if family != "unknown" else incident.error.type


def _state(record: RankRecord) -> Text:
    """`rank 0 at train.py:12 in main`, `rank 1 in all_reduce`, `rank 2 had already ended
    (exit status 0)`: where a rank was when the job ended."""
    if record.outcome in ("stopped", "raised") and record.where:
        return msg("{rank} {place}", rank=who(record), place=_place(record.where))
    return _missing(record)


def _missing(record: RankRecord) -> Text:
    """How a rank that was not in the failed collective is described (MISSING_WORDS)."""
    words = MISSING_WORDS.get(record.outcome, MISSING_WORDS["unknown"])
    return msg(words, rank=who(record), place=_place(record.where),
               status=_status(record))


def _status(record: RankRecord) -> str:
    """`SIGKILL` or the exit status, as the summary names how a rank ended."""
    return str(record.signal or record.exit_status)


def who(record: RankRecord) -> Text:
    """`rank 1`, or `rank 1 on node 1` in a job across nodes."""
    if record.node_rank is None:
        return msg("rank {rank}", rank=record.rank)
    return msg("rank {rank} on node {node}", rank=record.rank, node=record.node_rank)


def _place(where: str | None) -> Text:
    """`in all_reduce` for a function, `at train.py:12 in main` for a line (its line and
    its function kept apart, so a reader in another language sees each in its place)."""
    if not where:
        return msg("at an unknown place")
    if ":" not in where:
        return msg("in {function}", function=where)
    line, in_, function = where.rpartition(" in ")
    if in_ and line:
        return msg("at {line} in {function}", line=line, function=function)
    return msg("at {where}", where=where)
