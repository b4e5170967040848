"""The files each rank of a multi-process run leaves for the parent: the child side writes
them, the parent side reads them back.

Under torchrun (`cudadiag run --nproc-per-node N`) every rank is a worker of its own. Each
one writes, in the job's rank folder, `aK.rankR.json` (K: torchrun's restart count, R: the
global rank): at start (who it is, its pid), again the moment the program raises (type,
message, the call it failed in, the time: a rank killed a moment later still leaves this),
and at the end (the exit code and the full incident). A SIGTERM (torchrun stopping the
ranks after one failed, or cudadiag's timeout) dumps the stack of every thread into
`aK.rankR.stack`: where a hung rank was. The exception also goes to torchrun's own error
file (`TORCHELASTIC_ERROR_FILE`, what `@record` writes), so torchrun's "Root Cause" summary
shows it.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import re
import signal
import socket
import traceback
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from cudadiag.durable import PRIVATE_FILE, replace_atomically

if TYPE_CHECKING:
    from cudadiag.incident import Incident

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
WRAPPER_FILES = ("torch/distributed/c10d_logger.py", "torch/overrides.py", "torch/_compile.py",
                 "torch/_dynamo/", "<frozen runpy>", "/runpy.py", "/threading.py")
"""Frames that only pass a call on: never the place a rank failed in."""
_CELL_FILE = re.compile(r"^<cudadiag (In\[\d+\])>$")
"""A notebook cell replayed by the worker (isolate.worker.CELL_FILENAME)."""
_FILE_NAME = re.compile(r"^a(\d+)\.rank(\d+)\.(json|stack)$")
_STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def now() -> str:
    """The current UTC time, ISO 8601 with milliseconds (sortable as text)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class RankState:
    """What a rank says about itself in its record file, `aK.rankR.json`: written at start,
    again the moment the program raises, and at the end."""

    rank: int
    local_rank: int
    node: str
    """The host the rank runs on."""
    pid: int
    world_size: int
    attempt: int
    """torchrun's restart count."""
    outcome: str = "running"
    """`running`, then `raised` (the program raised) or `finished`."""
    at: str | None = None
    """When it started, raised or finished (see `now()`)."""
    error_type: str | None = None
    message: str | None = None
    """The first line of the exception's message."""
    text: str = ""
    """The exception's message, cut at 4,000 characters."""
    where: str | None = None
    """The call it failed in (`failing_call`)."""
    exit_code: int | None = None
    incident: Incident | None = None
    """The rank's own incident, once it has ended with one."""

    def to_json(self) -> bytes:
        """The record file's content."""
        data = asdict(self)
        data["incident"] = self.incident.to_dict() if self.incident is not None else None
        return json.dumps(data, default=str).encode()

    @classmethod
    def from_json(cls, text: str) -> RankState:
        """Read a record file's content; raises ValueError (IncidentSchemaError among them)
        or TypeError for one that is not a rank's record."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a rank record")
        from cudadiag.incident import Incident  # a failed rank's: a clean one needs none

        known = {f.name for f in fields(cls)}
        incident = data.get("incident")
        return cls(**{**{k: v for k, v in data.items() if k in known},
                      "incident": Incident.from_dict(incident) if incident else None})


@dataclass
class _Rank:
    """This process's record file and the stack file faulthandler writes to."""

    folder: Path
    state: RankState
    stack_file: TextIO | None = None

    def path(self, suffix: str) -> Path:
        return self.folder / f"a{self.state.attempt}.rank{self.state.rank}.{suffix}"

    def write(self) -> None:
        replace_atomically(self.path("json"), self.state.to_json())


_this: _Rank | None = None


def begin(folder: str | None) -> bool:
    """In a rank of a torchrun job (`folder`: the job's rank folder, and torchrun set RANK),
    begin its record (begin_rank); return True. Elsewhere do nothing and return False."""
    rank = os.environ.get("RANK")
    if not folder or rank is None:
        return False
    begin_rank(Path(folder), int(rank), int(os.environ.get("LOCAL_RANK", rank)),
               int(os.environ.get("WORLD_SIZE", "1")),
               int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    return True


def begin_rank(folder: Path, rank: int, local_rank: int, world_size: int,
               attempt: int) -> None:
    """Make this process rank `rank` of a multi-process job whose ranks write into `folder`
    (`attempt`: torchrun's restart count, or which start of processes this is): write the
    start record, dump every thread's stack on SIGTERM and enable torchrun's fault
    handler."""
    global _this
    _this = _Rank(folder, RankState(rank=rank, local_rank=local_rank, node=socket.gethostname(),
                                    pid=os.getpid(), world_size=world_size, attempt=attempt,
                                    at=now()))
    _this.write()
    # kept open for the life of the process: faulthandler writes to it from a signal handler
    _this.stack_file = open(os.open(_this.path("stack"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                    PRIVATE_FILE), "w")
    faulthandler.register(signal.SIGTERM, file=_this.stack_file, all_threads=True, chain=True)
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    # loaded now, not in note_exception: that runs in the moment in which torchrun's SIGTERM,
    # sent once a peer failed, can find the rank not yet recorded
    importlib.import_module("cudadiag.incident")
    get_error_handler().initialize()


def note_exception(exc: BaseException) -> None:
    """Call inside the `except` that caught the program's exception: in a rank, record it at
    once (type, message, the call it failed in, the time) and write torchrun's error file, as
    `@record` does. Elsewhere do nothing."""
    if _this is None or _this.state.outcome == "raised":
        return
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    from cudadiag.incident import qualified_type_name

    text, state = str(exc), _this.state
    state.outcome, state.at, state.error_type = "raised", now(), qualified_type_name(exc)
    state.message, state.text = (text.strip().splitlines() or [""])[0], text[:4000]
    # frames without their source lines: reading files (linecache) would widen the moment
    # in which torchrun's SIGTERM, sent once a peer failed, finds the rank not yet recorded
    state.where = failing_call([(f.f_code.co_filename, line, f.f_code.co_name)
                                for f, line in traceback.walk_tb(exc.__traceback__)])
    _this.write()
    get_error_handler().record_exception(exc)


def finish(exit_code: int, incident: Incident | None) -> bool:
    """In a rank, write the final record (exit code, incident) and return True; elsewhere
    return False (the caller writes the single result file)."""
    if _this is None:
        return False
    state = _this.state
    state.exit_code, state.incident = exit_code, incident
    if incident is None:
        state.outcome, state.at = "finished", now()
    else:
        state.outcome = "raised"  # `at` stays when it raised (note_exception)
    _this.write()
    return True


def failing_call(frames: list[tuple[str, int, str]]) -> str | None:
    """The call a rank failed or stood in: the innermost frame that is neither cudadiag's nor
    a wrapper's, as `all_reduce` for PyTorch's own functions, `train.py:12 in main` for the
    program's and `In[3]:5 in worker` for a notebook cell's; None when there is none. What
    cudadiag called of the standard library for itself (writing the rank's record) is its
    own part, left out; a library call it passed on (the simulated device's
    `__torch_function__`) stays the program's. `frames` are (filename, lineno, name)
    tuples, innermost last."""
    library_call: tuple[str, str] | None = None
    """The innermost library frame of the run of them seen: (filename, function)."""
    for filename, lineno, name in reversed(frames):
        if any(w in filename for w in WRAPPER_FILES):
            continue
        if filename.startswith(_PACKAGE_DIR):
            library_call = library_call if library_call and _is_installed(library_call[0]) \
                else None
        elif _is_library(filename):
            library_call = library_call or (filename, name)
        else:
            cell = _CELL_FILE.match(filename)
            return library_call[1] if library_call else \
                f"{cell.group(1) if cell else os.path.basename(filename)}:{lineno} in {name}"
    return library_call[1] if library_call else None


def _is_installed(filename: str) -> bool:
    return any(part in filename for part in ("/site-packages/", "/dist-packages/"))


def _is_library(filename: str) -> bool:
    return _is_installed(filename) or filename.startswith(os.path.dirname(os.__file__) + os.sep)


@dataclass
class LauncherFailure:
    """One failed rank as the launcher that started it saw it (torchrun, or torch's
    start_processes)."""

    rank: int
    local_rank: int
    pid: int
    exit_code: int
    """Its exit status (negative: killed by that signal), the process's real one."""
    timestamp: float
    """When the launcher noticed the failure (seconds since the epoch)."""


@dataclass
class LauncherReport:
    """What the launcher reported about a job, beside the rank folder: the rank it names as
    the root cause (the first failure it observed) and every rank that failed."""

    root_cause: int | None = None
    failures: list[LauncherFailure] = field(default_factory=list)

    def write(self, path: Path) -> None:
        """Write the report as JSON."""
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> LauncherReport:
        """Read a report `write` wrote; an empty one when there is none (no rank failed, or
        the launcher died first) or it cannot be read."""
        try:
            data = json.loads(path.read_text())
            return cls(data["root_cause"], [LauncherFailure(**f) for f in data["failures"]])
        except (OSError, ValueError, TypeError, KeyError):
            return cls()


@dataclass
class RankFiles:
    """What the parent reads back for one rank."""

    rank: int
    state: RankState
    stack: str = ""
    """The stack dump written at SIGTERM ('' when the rank was never stopped)."""
    stack_at: str | None = None
    """When the stack was dumped."""

    def stopped_in(self) -> str | None:
        """The call the main thread stood in when the rank was stopped, or None."""
        return failing_call(_main_thread_frames(self.stack)) if self.stack else None


def read_rank_files(folder: Path) -> list[RankFiles]:
    """Return the records of the last attempt torchrun made, in rank order ([] when no rank
    started). Unreadable files are skipped: a rank killed while writing leaves nothing."""
    found: dict[tuple[int, int], dict[str, Path]] = {}
    for path in folder.iterdir() if folder.is_dir() else []:
        m = _FILE_NAME.match(path.name)
        if m:
            found.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = path
    if not found:
        return []
    last = max(attempt for attempt, _ in found)
    ranks = []
    for (attempt, rank), paths in sorted(found.items()):
        if attempt != last or "json" not in paths:
            continue
        try:
            state = RankState.from_json(paths["json"].read_text())
        except (OSError, ValueError, TypeError):
            continue
        files = RankFiles(rank, state)
        stack = paths.get("stack")
        if stack is not None and stack.stat().st_size:
            files.stack = stack.read_text(errors="replace")
            files.stack_at = datetime.fromtimestamp(stack.stat().st_mtime, timezone.utc
                                                    ).isoformat(timespec="milliseconds")
        ranks.append(files)
    return ranks


def _main_thread_frames(stack: str) -> list[tuple[str, int, str]]:
    """The frames, innermost last, of the thread that ran the program (the one whose stack
    holds the worker) in a faulthandler dump; the first thread's when none does."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in stack.splitlines():
        if "(most recent call first)" in line:
            threads.append([])
            continue
        m = _STACK_FRAME.match(line)
        if m and threads:
            threads[-1].append((m.group("file"), int(m.group("line")), m.group("function")))
    worker = os.path.join(_PACKAGE_DIR, "isolate", "worker.py")
    chosen = next((t for t in threads if any(f[0] == worker for f in t)),
                  threads[0] if threads else [])
    return list(reversed(chosen))
