"""A pre-started interpreter that has imported torch (never initialising CUDA) and forks one
fresh child per run: a fresh process in milliseconds instead of the seconds a new
interpreter takes to import torch.

The server's environment is neutral (no blocking variables): each child takes the run's
environment and working directory from the Launch beside its job (isolate/job.py), before
anything in it can touch CUDA, so `CUDA_LAUNCH_BLOCKING` is in effect exactly as in a new
process.
Before each fork the server pre-imports the installed modules the job's cells import at
their top level (installed ones only: `is_installed`), and refuses to fork once CUDA is
initialised in it.

Protocol. The control socket (SOCK_SEQPACKET) carries one message per run from the parent:
`run JOB_PATH`, with the run's own socket and the child's stdout/stderr pipe ends attached
(SCM_RIGHTS); the server says `ready` on it once torch is imported. On the run's socket the
server answers `started PID` (or `refused KIND [MODULE]`: isolate/refusals.py), then
`exited PID CODE`. Runs may overlap.
When the parent closes a run's socket (Ctrl-C, an export stopped), the server kills that
child's process group; when it closes the control socket (or dies), the server kills every
child's group and exits.

    python -m cudadiag.isolate.forkserver FD
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import io
import os
import random
import select
import signal
import socket
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from cudadiag.env import code_revision
from cudadiag.isolate import program_files, refusals
from cudadiag.isolate.job import Job, Launch
from cudadiag.isolate.procgroup import kill_group

POLL_S = 0.01
"""How often children are checked on where the system has no pidfd."""
WORKER_IMPORTS = ("ctypes", "cloudpickle", "cudadiag.batch.watcher", "cudadiag.diagnose",
                  "cudadiag.incident", "cudadiag.loopvars", "cudadiag.isolate.cellfacts",
                  "cudadiag.integrations.attach")
"""What the worker imports as it runs and reports: imported once in the server instead."""


def serve(fd: int) -> None:
    """Import torch, warm the op tracer, say `ready`, then answer runs until the parent
    closes the control socket; every child still running is then killed."""
    from cudadiag.isolate import worker

    for name in WORKER_IMPORTS:
        importlib.import_module(name)
    _warm_worker_paths(worker)

    control = socket.socket(fileno=fd)
    server = _Server(control, worker)
    try:
        control.send(b"ready")
        server.loop()
    except OSError:
        pass  # the parent went away: stop quietly
    finally:
        server.kill_all()


def _warm_worker_paths(worker: ModuleType) -> None:
    """Take once, here, the first-use costs every child's worker would pay again:
    torch._dynamo (imported by the first call of any dispatch mode that torch wraps in
    torch._dynamo.disable, as the simulator's are: seconds), the op tracer's first call,
    torch.load's (rng.pt: it imports its configuration module, which reads its own source),
    the error table's literal anchors (computed for all its signatures on the first
    classification: about 200 ms) and the worker's lookup of the C library's getenv."""
    import torch
    import torch._dynamo

    from cudadiag.classification import classify
    from cudadiag.trace import OpTracer

    with OpTracer():
        torch.ones(1).add(1)
    buffer = io.BytesIO()
    torch.save({0: {"torch": torch.get_rng_state()}}, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=False)
    classify(RuntimeError("CUDA error: device-side assert triggered"))
    worker.c_getenv()


@dataclass
class _Run:
    pid: int
    channel: socket.socket
    pidfd: int | None


@dataclass
class _Server:
    control: socket.socket
    worker: ModuleType
    runs: list[_Run] = field(default_factory=list)
    imported: dict[str, float] = field(default_factory=dict)
    """Modules imported for warm imports -> modification time of their file then."""

    def loop(self) -> None:
        """Serve until the control socket closes."""
        while True:
            watched: list[socket.socket | int] = [self.control]
            for run in self.runs:
                watched += [run.channel] + ([run.pidfd] if run.pidfd is not None else [])
            polling = any(run.pidfd is None for run in self.runs)
            readable, _, _ = select.select(watched, [], [], POLL_S if polling else None)
            if self.control in readable and not self._receive():
                return
            for run in list(self.runs):
                if run.channel in readable and not run.channel.recv(1, socket.MSG_PEEK):
                    _kill_group(run.pid)  # the parent stopped waiting: nobody reads it
                    self._forget(run)
                else:
                    done, status = os.waitpid(run.pid, os.WNOHANG)
                    if done:
                        self._report_exit(run, status)

    def kill_all(self) -> None:
        """Kill every running child's process group."""
        for run in list(self.runs):
            _kill_group(run.pid)
            self._forget(run)

    def _receive(self) -> bool:
        message, fds, _, _ = socket.recv_fds(self.control, 4096, 3)
        if not message:
            return False
        channel = socket.socket(fileno=fds[0])
        job_path = message.decode().removeprefix("run ")
        refusal = self._prepare(job_path)
        if refusal:
            for received in fds[1:]:
                os.close(received)
            with contextlib.suppress(OSError):
                channel.sendall(f"{refusals.answer(*refusal)}\n".encode())
            channel.close()
            # a server that cannot fork safely any more stops
            raise OSError(refusals.sentence(*refusal))
        # what the server holds is frozen for the fork: the child's collections then skip
        # it, instead of walking torch's millions of objects (each touch a copy-on-write
        # page fault) at its first gen-2 collection (the `gc.freeze` documentation's case)
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            _run_child(self.worker, job_path, fds[1:], self._closed_in_child())
        gc.unfreeze()
        for received in fds[1:]:
            os.close(received)
        run = _Run(pid, channel, _pidfd(pid))
        self.runs.append(run)
        try:
            channel.sendall(f"started {pid}\n".encode())
        except OSError:
            _kill_group(pid)
            self._forget(run)
        return True

    def _prepare(self, job_path: str) -> tuple[str, str] | None:
        """Do the job's warm imports; return why forking would be unsafe (a kind of
        isolate/refusals.py and the module it names, '' for none), or None."""
        import torch

        if torch.cuda.is_initialized():
            return refusals.CUDA_INITIALISED, ""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            job = Job.read(Path(job_path))
            launch = Launch.read(job.path)
            for name in self._warm_imports(job, launch.cwd, launch.skip):
                if torch.cuda.is_initialized():
                    return refusals.IMPORT_INITIALISED_CUDA, name
            code_revision(launch.cwd)  # cached here for a while: each child inherits it
        changed = [name for name, mtime in self.imported.items() if _mtime(name) != mtime]
        if changed:
            return refusals.MODULE_CHANGED, changed[0]
        return None

    def _warm_imports(self, job: Job, cwd: str, skip: list[str]) -> Iterator[str]:
        """Import, one at a time, the installed modules the job's cells import at their top
        level (not those in `skip`); yield each name once it is imported."""
        for cell in job.cells:
            for name in _unconditional_imports(cell.source):
                top = name.partition(".")[0]
                if name in sys.modules or top in skip or not is_installed(top, cwd):
                    continue
                try:
                    importlib.import_module(name)
                except Exception:  # the child's own import will say what is wrong
                    continue
                self.imported.setdefault(top, _mtime(top))
                yield name

    def _closed_in_child(self) -> list[int]:
        fds = [self.control.fileno()]
        for run in self.runs:
            fds += [run.channel.fileno()] + ([run.pidfd] if run.pidfd is not None else [])
        return fds

    def _report_exit(self, run: _Run, status: int) -> None:
        with contextlib.suppress(OSError):
            run.channel.sendall(
                f"exited {run.pid} {os.waitstatus_to_exitcode(status)}\n".encode())
        self._forget(run)

    def _forget(self, run: _Run) -> None:
        run.channel.close()
        if run.pidfd is not None:
            os.close(run.pidfd)
        self.runs.remove(run)


def is_installed(top: str, cwd: str) -> bool:
    """Return True when module `top` comes from the Python installation (its standard library
    or site-packages) and no file or folder of that name in `cwd` would shadow it in a new
    interpreter started there. Never raises."""
    import importlib.util
    import site
    import sysconfig

    if os.path.exists(os.path.join(cwd, f"{top}.py")) or os.path.isdir(os.path.join(cwd, top)):
        return False
    if top == __name__.partition(".")[0]:
        return True  # cudadiag itself (an editable install too): the server runs from it
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    where = spec.origin if spec.has_location else None
    where = where or next(iter(spec.submodule_search_locations or []), None)
    if where is None:
        return spec.origin in ("built-in", "frozen")
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                     "platlib")}
    roots |= {*site.getsitepackages(), site.getusersitepackages()}
    path = os.path.realpath(where)
    return any(path.startswith(os.path.join(os.path.realpath(root), "")) for root in roots)


@functools.lru_cache(maxsize=4096)
def _unconditional_imports(source: str) -> tuple[str, ...]:
    """cellfacts.unconditional_imports, parsed once per cell source: the same cells come
    back run after run (a kernel's history, the minimizer's candidates), and parsing them
    each time cost milliseconds per cell before every fork."""
    from cudadiag.isolate.cellfacts import unconditional_imports

    return tuple(unconditional_imports(source))


def _pidfd(pid: int) -> int | None:
    """A file descriptor that turns readable when `pid` exits, where the system has them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # macOS; Linux before 5.3
        return None


def _mtime(top: str) -> float:
    module = sys.modules.get(top)
    try:
        return os.stat(module.__file__).st_mtime if module and module.__file__ else 0.0
    except OSError:
        return -1.0


def _kill_group(pid: int) -> None:
    kill_group(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # not yet the leader of its own group
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _run_child(worker: ModuleType, job_path: str, fds: list[int], server_fds: list[int]) -> None:
    """In the forked child: own process group, output to the run's pipes, the run's
    environment and folder, fresh random streams; run the worker, exit."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in server_fds:
            os.close(fd)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for received in fds:
            os.close(received)
        _become_the_run(job_path, worker)
        program_files.mark_inherited()
        code = worker.main(["worker", job_path])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _become_the_run(job_path: str, worker: ModuleType) -> None:
    """Take what a new interpreter started for this run would have: its environment (the
    blocking variables among it, set before anything can initialise CUDA), folder, module
    path, argv, and random streams of its own rather than the server's copy."""
    launch = Launch.read(Path(job_path))
    os.environ.clear()
    os.environ.update(launch.env)
    os.chdir(launch.cwd)
    sys.path[0] = launch.cwd  # as `python -m` puts the starting folder first
    sys.argv = [str(worker.__file__), job_path]
    _unshadow(launch.cwd)
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _unshadow(cwd: str) -> None:
    """Forget imported top-level modules that a file or package in `cwd` shadows, so the
    run imports the user's one as a new interpreter would. Looks up the folder's entries in
    sys.modules, not the other way round: walking every module after the fork would copy
    the pages of all of them."""
    try:
        entries = os.listdir(cwd)
    except OSError:
        return
    for entry in entries:
        name = entry.removesuffix(".py")
        module = sys.modules.get(name)
        if module is None or (name == entry and not os.path.isfile(
                os.path.join(cwd, name, "__init__.py"))):
            continue  # not imported, or a folder that is no package: it shadows nothing
        if not str(getattr(module, "__file__", "") or "").startswith(cwd):
            for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                del sys.modules[loaded]

if __name__ == "__main__":
    serve(int(sys.argv[1]))
