"""What launchers print about the processes of a multi-process job, as data: the prefixes
they put before each process's lines (which rank, which node) and the lines in which they
report how a process ended (which one, its exit code, whether it was the first to fail).

Each form is one row with its source; `cudadiag explain` reads a log line with them and
never tests for a launcher anywhere else.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessReport:
    """A launcher's line about one process of the job."""

    form: str
    """The row of LAUNCHER_FORMS that read it."""
    kind: str
    """`died` (it ended and the job failed with it), `stopped` (the launcher stopped it after
    another failed), `dump` (its watchdog timed out and asked every rank to dump: Flight
    Recorder), `summary` (the launcher's own report that the job failed)."""
    rank: int | None
    exit_code: int | None = None
    first: bool = False
    """The launcher names it as the first process that failed (for `dump`: the first rank to
    signal the dump, as the store holds it)."""
    local: bool = False
    """`rank` is a local rank (the process's number on its node)."""
    node: str | None = None


@dataclass(frozen=True)
class LauncherForm:
    """One way a launcher reports a process: a line holding `anchor` (lower case) and
    matching `pattern`, read into a ProcessReport by `read`."""

    name: str
    anchor: bytes
    pattern: re.Pattern[str]
    read: Callable[[re.Match[str]], ProcessReport]
    source: str


def _signal_code(name: str | None) -> int | None:
    """-9 for `SIGKILL`: an exit code as Python writes a death by signal."""
    if not name:
        return None
    try:
        return -signal.Signals[name].value
    except KeyError:
        return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _deepspeed_exit(m: re.Match[str]) -> ProcessReport:
    """DeepSpeed's launcher prints the command of the process it launched last, not of the
    one that failed; a last command with `--local_rank=0` means the node ran one process,
    so that one is the process that failed."""
    only_one = m["last_local_rank"] == "0"
    return ProcessReport("deepspeed_exit", "died", 0 if only_one else None, int(m["code"]),
                         first=True, local=only_one)


LAUNCHER_FORMS: tuple[LauncherForm, ...] = (
    LauncherForm(
        "torchrun: the job failed (its own traceback, then the summary)", b"childfailederror",
        re.compile(r"ChildFailedError"),
        lambda m: ProcessReport("child_failed", "summary", None),
        "torch/distributed/launcher/api.py (launch_agent raises ChildFailedError); "
        "torch/distributed/elastic/multiprocessing/errors/__init__.py"),
    LauncherForm(
        "torchelastic agent: a worker failed", b"failed (exitcode:",
        re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+) "
                   r"\(pid: \d+\) of (?:binary|fn)"),
        lambda m: ProcessReport("agent_failed", "died", int(m["rank"]), int(m["code"]),
                                first=True, local=True),
        "torch/distributed/elastic/multiprocessing/api.py (_poll: `of binary` for a command, "
        "`of fn` for a function); hpcaitech/ColossalAI#3514, huggingface/accelerate#3833"),
    LauncherForm(
        "torchelastic agent: a worker stopped", b"closing signal",
        re.compile(r"(?:Sending|Closing) process \d+ (?:closing signal|via signal) "
                   r"(?P<signal>SIG[A-Z]+)"),
        lambda m: ProcessReport("agent_closing", "stopped", None, _signal_code(m["signal"])),
        "torch/distributed/elastic/multiprocessing/api.py (_close); RLHF-V/RLHF-V#11"),
    LauncherForm(
        "torch.multiprocessing.spawn: a process raised", b"terminated with the following",
        re.compile(r"Process (?P<rank>\d+) terminated with the following error"),
        lambda m: ProcessReport("spawn_raised", "died", int(m["rank"]), 1, first=True),
        "torch/multiprocessing/spawn.py (ProcessRaisedException); LSH9832/edgeyolo#20"),
    LauncherForm(
        "torch.multiprocessing.spawn: a process exited", b"terminated with",
        re.compile(r"process (?P<rank>\d+) terminated with (?:exit code (?P<code>-?\d+)|"
                   r"signal (?P<signal>SIG[A-Z]+))"),
        lambda m: ProcessReport("spawn_exited", "died", int(m["rank"]),
                                _int(m["code"]) if m["code"] else _signal_code(m["signal"]),
                                first=True),
        "torch/multiprocessing/spawn.py (ProcessExitedException); lyu-yx/ACUMEN#4"),
    LauncherForm(
        "DeepSpeed launcher: a process exited", b"exits with return code",
        re.compile(r"(?:'--local_rank=(?P<last_local_rank>\d+)'[^\n]*)?exits with return code = "
                   r"(?P<code>-?\d+)"),
        _deepspeed_exit,
        "deepspeed/launcher/launch.py (sigkill_handler logs `{cmd} exits with return code`, "
        "cmd being the last process launched); deepspeedai/DeepSpeed#3160, #3232"),
    LauncherForm(
        "Flight Recorder: the first watchdog to fire", b"first pg on this rank to signal",
        re.compile(r"(?:Rank (?P<rank>\d+)\][^\n]{0,200})?First PG on this rank to signal "
                   r"dumping"),
        lambda m: ProcessReport("first_dump", "dump", _int(m["rank"]), first=True),
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (watchdog, flight recorder)"),
    LauncherForm(
        "Flight Recorder: a dump signal, from the rank that timed out", b"received a dump signal",
        re.compile(r"Received a dump signal due to a collective timeout from\s+"
                   r"(?:rank (?P<rank>\d+)|(?P<local>this local rank))"),
        lambda m: ProcessReport("dump_signal", "dump", _int(m["rank"]), first=not m["local"]),
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the heartbeat monitor: the store "
        "holds the rank that signalled first); lsdefine/simple_GRPO#46, "
        "PrimeIntellect-ai/prime-rl#3186"),
)
LAUNCHER_ANCHORS = tuple(form.anchor for form in LAUNCHER_FORMS)


def first_dump_rank(reports: Iterable[ProcessReport]) -> int | None:
    """The rank whose watchdog timed out first, as Flight Recorder's lines name it (the
    rank a dump signal came from, or "First PG on this rank to signal dumping"), else None:
    several ranks saying they timed out locally name none."""
    return next((r.rank for r in reports if r.kind == "dump" and r.first and r.rank is not None),
                None)


def launcher_report(lowered: bytes, text: str) -> ProcessReport | None:
    """The first LAUNCHER_FORMS row that reads line `text` (`lowered`: its bytes, lower
    case), else None."""
    for form in LAUNCHER_FORMS:
        if form.anchor in lowered:
            m = form.pattern.search(text)
            if m:
                return form.read(m)
    return None


@dataclass(frozen=True)
class LinePrefix:
    """A prefix a launcher puts before a process's lines, as one group of LINE_PREFIX."""

    name: str
    pattern: str
    source: str


_HOST = rb"localhost|\d{1,3}(?:\.\d{1,3}){3}|[a-z][\w-]{0,62}\d[\w.-]{0,62}|[a-z]+-[\w.-]{1,62}"
LINE_PREFIXES: tuple[LinePrefix, ...] = (
    LinePrefix("a pasted log's line number or quote mark", r"(?:\[\d+\] |> )?",
               "hiyouga/LlamaFactory#7396, RLHF-V/RLHF-V#11"),
    LinePrefix("pdsh / DeepSpeed multi-node: the host", rf"(?:(?P<host>{_HOST.decode()}): )?",
               "deepspeedai/DeepSpeed#2119, huggingface/accelerate#1317"),
    LinePrefix("accelerate's test runner: the stream", r"(?:std(?:out|err): )?",
               "accelerate/test_utils/testing.py (_stream_subprocess: tee label); "
               "huggingface/accelerate#1473"),
    LinePrefix("torchrun --tee / --local-ranks-filter: the rank; srun -l: the task",
               r"(?:\[(?:rank|default)(?P<bracketed>\d{1,5})\]:|(?P<label>\d{1,5}): )?",
               "torch/distributed/run.py (--tee, --log-line-prefix-template); srun(1) -l"),
    LinePrefix("NCCL_DEBUG: [timestamp] host:pid:tid [the process's CUDA device]",
               r"(?:(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,\d]*\] )?(?P<nccl_host>[\w.-]{1,128}):"
               r"\d+:\d+ \[(?P<nccl_rank>\d{1,3})\] )?",
               "NVIDIA/nccl src/debug.cc (ncclDebugLogV: `%s:%d:%d [%d]`, hostname, pid, tid, "
               "cudaDev: the local rank where each rank uses cuda:LOCAL_RANK); NVIDIA/nccl#1504"),
)
LINE_PREFIX = re.compile(rb"^\s*" + b"".join(p.pattern.encode() for p in LINE_PREFIXES))
"""All of LINE_PREFIXES in their order (each optional)."""
RANKS_IN_BLOCK = re.compile(
    rb"^\s*(?:\[\d+\] |> )?(?:(?:" + _HOST + rb"): )?(?:std(?:out|err): )?"
    rb"(?:\[(?:rank|default)(\d{1,5})\]:|"
    rb"(\d{1,5}): )", re.MULTILINE)
"""A block's lines that carry a rank prefix (its group 1 or 2)."""
MESSAGE_RANK = re.compile(r"\[(?:PG [^\]]{0,80}? )?Rank (?P<rank>\d{1,5})\]")
"""A rank a message names itself (`[Rank 3] Watchdog caught ...`, `[PG 1 Rank 3]`): the
line's rank when it has no prefix."""


def names_cuda_device(raw: bytes) -> bool:
    """True when the number a line's prefixes give is NCCL's `[N]` (the process's CUDA
    device, its local rank) rather than a launcher's rank."""
    m = LINE_PREFIX.match(raw)
    return bool(m and m["nccl_rank"] is not None and m["bracketed"] is None
                and m["label"] is None)
