"""DDP code written in a notebook with `torch.multiprocessing.spawn` (or `start_processes`),
run isolated: every process it starts is a rank of its own.

`calls_spawn` finds such calls in the planned cells (the kernel side chooses this form over
torchrun from it). In the isolated child, `ranks_as_processes` has torch's own
`start_processes` (which `spawn` calls) start each process by fork instead of spawn: the
child never initialised CUDA, and a forked process already holds the function the notebook
defined (a spawned one would import a `__main__` that has none). Each process then is a rank
that leaves its record (isolate/rankfiles.py): blocking launches, the tracer and the
prechecks are inherited from the child, its error is recorded at once with its time and
becomes its own incident. What torch saw of each process's end (exit code or signal, the
process it reported first) goes beside the records, as torchrun's failures do.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag.errors import RanksAfterCudaError
from cudadiag.i18n import N_, _
from cudadiag.isolate import rankfiles

if TYPE_CHECKING:
    from cudadiag.incident import Incident

SPAWN_CALLS = frozenset({
    "torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
    "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes",
})
"""The calls that start processes running a function, by qualified name."""
START_METHOD = "fork"
EXITS_FILE = "spawn.json"
"""Beside the rank folder: how each process of the last start ended, as torch saw it."""
AFTER_CUDA = N_(
    "cudadiag: the cells initialised CUDA before starting their processes with "
    "torch.multiprocessing; an isolated run forks each rank (so that the function the "
    "notebook defined can be loaded), and a forked process cannot use its parent's CUDA "
    "context. Move the CUDA calls (.cuda(), .to('cuda'), torch.cuda.set_device, tensors made "
    "on the GPU) into the function each process runs, as DDP code does, and run %cuda_isolate "
    "again.")
GRACE_S = 3.0
"""After one process failed, how long the others get to fail on their own (a collective
that lost its peer) before torch stops them with SIGTERM (then SIGKILL after as long)."""


def calls_spawn(sources: Iterable[str]) -> bool:
    """Return True when any of `sources` (cells as Python, in order) calls one of
    SPAWN_CALLS, through whatever import names it (`mp.spawn` after `import
    torch.multiprocessing as mp`, `spawn` after `from torch.multiprocessing import spawn`).
    Sources that do not parse are skipped."""
    origins: dict[str, str] = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.partition(".")[0]
                    origins[name] = alias.name if alias.asname else name
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if any(_qualified(call.func, origins) in SPAWN_CALLS for call in ast.walk(tree)
               if isinstance(call, ast.Call)):
            return True
    return False


def _qualified(expr: ast.expr, origins: dict[str, str]) -> str | None:
    if isinstance(expr, ast.Name):
        return origins.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _qualified(expr.value, origins)
        return f"{base}.{expr.attr}" if base else None
    return None


@contextlib.contextmanager
def ranks_as_processes(folder: Path, incident_of: Callable[[BaseException], Incident]
                       ) -> Iterator[None]:
    """While active, every `torch.multiprocessing.spawn` / `start_processes` call starts its
    processes by fork, each one a rank writing its record into `folder`, its error made an
    incident by `incident_of`. With `join` (the default), torch's own join waits for them;
    how each ended is written to EXITS_FILE beside `folder`, even when the join raises. A
    start after CUDA was initialised raises RanksAfterCudaError (a forked rank could not use
    it)."""
    import torch.multiprocessing

    # the module: `torch.multiprocessing.spawn` as an attribute is the function
    torch_spawn = importlib.import_module("torch.multiprocessing.spawn")
    original = torch_spawn.start_processes
    starts = itertools.count()

    def start_processes(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1,
                        join: bool = True, daemon: bool = False,
                        start_method: str = "spawn") -> Any:
        if torch.cuda.is_initialized():
            raise RanksAfterCudaError(_(AFTER_CUDA))
        attempt = next(starts)
        entry = functools.partial(_run_rank, fn, folder, attempt, nprocs, incident_of)
        context = original(entry, args, nprocs, join=False, daemon=daemon,
                           start_method=START_METHOD)
        if not join:
            return context
        first: int | None = None
        try:
            while not context.join(grace_period=GRACE_S):
                pass
        except torch_spawn.ProcessException as exc:
            first = exc.error_index
            raise
        finally:
            _write_exits(folder.parent / EXITS_FILE, context.processes, first)
        return None

    for module in (torch_spawn, torch.multiprocessing):
        setattr(module, "start_processes", start_processes)  # noqa: B010 (torch's, replaced)
    try:
        yield
    finally:
        for module in (torch_spawn, torch.multiprocessing):
            setattr(module, "start_processes", original)  # noqa: B010


def _run_rank(fn: Callable[..., Any], folder: Path, attempt: int, world_size: int,
              incident_of: Callable[[BaseException], Incident], rank: int,
              *args: Any) -> None:
    """One started process: rank `rank` runs `fn(rank, *args)`, as torch would, with its
    record; its exception is recorded at once, then as an incident, and raised on for torch
    to report."""
    rankfiles.begin_rank(folder, rank, rank, world_size, attempt)
    try:
        fn(rank, *args)
    except Exception as exc:
        rankfiles.note_exception(exc)
        rankfiles.finish(1, incident_of(exc))
        raise
    rankfiles.finish(0, None)


def _write_exits(path: Path, processes: list[Any], first: int | None) -> None:
    """Write how each process ended (the processes that failed, as torchrun reports them)
    and the one torch reported first."""
    now = time.time()
    rankfiles.LauncherReport(first, [
        rankfiles.LauncherFailure(rank, rank, process.pid, process.exitcode, now)
        for rank, process in enumerate(processes) if process.exitcode]).write(path)
