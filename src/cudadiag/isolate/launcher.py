"""How a fresh process is obtained, with its environment fixed before CUDA can initialise.

Blocking launches only work when the variable is in the environment before CUDA initialises.
A new interpreter per run (SubprocessLauncher) gets them in its `env`; a child forked from a
fork server (ForkServer: an interpreter that imported torch and never initialised CUDA) sets
its run's environment first thing after the fork, before any CUDA call. The kernel's own warm
server, with its fallbacks, is in `cudadiag.isolate.warm`.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from cudadiag.errors import CudadiagError
from cudadiag.i18n import N_, _
from cudadiag.i18n.language import explicit as explicit_language
from cudadiag.isolate import refusals
from cudadiag.isolate.eager import DISABLE_VARIABLE
from cudadiag.isolate.job import Launch
from cudadiag.isolate.procgroup import kill_group

NVIDIA_BLOCKING = {"CUDA_LAUNCH_BLOCKING": "1"}
ROCM_BLOCKING = {"HIP_LAUNCH_BLOCKING": "1", "AMD_SERIALIZE_KERNEL": "3"}


@dataclass
class BlockingSettings:
    """The variables that make kernel launches synchronous on this machine's backend."""

    backend: str
    env: dict[str, str]
    note: str


def blocking_settings(blocking: bool = True) -> BlockingSettings:
    """Return the blocking-launch variables for this PyTorch build's backend.

    Reads the build's versions only (see `torch_build`); never imports torch or initialises
    CUDA.
    """
    build = torch_build()
    if build.get("hip"):
        backend = "rocm"
    elif build.get("cuda"):
        backend = "cuda"
    else:
        backend = "cpu"
    if not blocking:
        return BlockingSettings(backend, {}, N_("blocking launches off (asynchronous re-run)"))
    if backend == "rocm":
        return BlockingSettings(backend, dict(ROCM_BLOCKING),
                                "ROCm: HIP_LAUNCH_BLOCKING=1, AMD_SERIALIZE_KERNEL=3")
    if backend == "cuda":
        return BlockingSettings(backend, dict(NVIDIA_BLOCKING), "CUDA_LAUNCH_BLOCKING=1")
    return BlockingSettings(
        backend, dict(NVIDIA_BLOCKING),
        N_("CPU-only PyTorch: blocking launches have no meaning for real kernels here; "
           "CUDA_LAUNCH_BLOCKING=1 only makes cudadiag's simulated device raise at the faulty "
           "op"),
    )


def torch_build() -> dict[str, Any]:
    """Return the installed PyTorch build's versions (`cuda`, `hip`, `__version__`...):
    `torch.version` when torch is loaded, else the constants of its `version.py`, read without
    importing torch (seconds that a `cudadiag run` would spend before starting the script).
    Empty when torch is not installed."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return dict(vars(torch.version))
    try:
        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return {}  # no torch
        tree = ast.parse(Path(origin).with_name("version.py").read_text())
    except (ValueError, ImportError, OSError, SyntaxError):
        return {}  # a build without the generated version.py
    constants = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
                constants[target.id] = node.value.value
    return constants


class ChildProcess(Protocol):
    """What the runner uses of a started worker: a Popen, or a child of the fork server."""

    @property
    def pid(self) -> int:
        """The process id (also its process group's)."""

    @property
    def stdout(self) -> IO[bytes] | None:
        """The read end of the child's standard output."""

    @property
    def stderr(self) -> IO[bytes] | None:
        """The read end of the child's standard error."""

    @property
    def returncode(self) -> int | None:
        """The exit status once known (negative: killed by that signal)."""

    def poll(self) -> int | None:
        """Return the exit status if the child has exited, else None."""

    def wait(self, timeout: float | None = None) -> int:
        """Return the exit status; raises subprocess.TimeoutExpired after `timeout`."""

    how: str
    """How it was made, in words (`warm start (forked from ...)`); '' when not said."""
    fallback: str | None
    """Why it was not made the faster way (a cold start's reason), or None."""


class WorkerProcess(subprocess.Popen[bytes]):
    """A worker started as a new interpreter: a Popen that says how it was made."""

    how: str = ""
    fallback: str | None = None


class Launcher(Protocol):
    """Starts the worker for a job file in a fresh process with the given environment."""

    def start(self, job_path: str, env: dict[str, str]) -> ChildProcess:
        """Return the running process (`pid`, `stdout`, `stderr`, `returncode`, `poll()`,
        `wait(timeout)` as Popen has them); its stdout/stderr are pipes, which the caller
        closes, and it is in its own process group (so a timeout or an interrupt can kill
        everything it started). `how` says in words how it was made; `fallback`, when not
        None, why it was not made the faster way."""
        ...


class SubprocessLauncher:
    """A new interpreter per run: `python -m cudadiag.isolate.worker JOB`, in the working
    directory `cwd` (default: this process's at each run). Its standard input is this
    process's with `keep_stdin` (a script run from a shell reads what is piped to it), none
    otherwise (a notebook's cell has no input to read)."""

    def __init__(self, python: str | None = None, cwd: str | None = None,
                 keep_stdin: bool = False) -> None:
        self.python = python or sys.executable
        self.cwd = cwd
        self.keep_stdin = keep_stdin

    def start(self, job_path: str, env: dict[str, str]) -> WorkerProcess:
        """Start the worker; raises OSError when the interpreter cannot be started."""
        process = WorkerProcess(
            [self.python, "-m", "cudadiag.isolate.worker", job_path],
            stdin=None if self.keep_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            cwd=self.cwd or os.getcwd(),
        )
        process.how = _("cold start (a new interpreter)")
        return process


_ENVIRONMENT_AT_IMPORT = dict(os.environ)
"""Where /proc is missing: the environment when this module was imported (by
`%load_ext cudadiag`, or the first isolated run or export)."""
CUDADIAG_VARIABLES = ("CUDADIAG_HOME", "CUDADIAG_LANG")
"""cudadiag's own settings: a fresh run takes their current values (cudadiag may have set
them itself, as `cudadiag demo` does), not those this process started with."""


def startup_environment() -> dict[str, str]:
    """Return the environment this process started with (on Linux, exactly: the kernel's
    /proc/self/environ; elsewhere the snapshot taken when cudadiag loaded), with
    cudadiag's own variables as they are now: what a fresh process started the way this one
    was gets, whatever the user's code has set in os.environ since. Never raises."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        env = dict(_ENVIRONMENT_AT_IMPORT)
    else:
        pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if b"=" in entry)
        env = {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}
    for name in CUDADIAG_VARIABLES:
        env.pop(name, None)
        if name in os.environ:
            env[name] = os.environ[name]
    return _with_language(env)


def _with_language(env: dict[str, str]) -> dict[str, str]:
    """`env` with the language chosen in this session (`%cudadiag lang ja`, `cudadiag
    --lang`), if one was: the runs it starts speak it too."""
    chosen = explicit_language()
    if chosen is not None:
        env["CUDADIAG_LANG"] = chosen
    return env


def child_environment(extra: dict[str, str],
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return `base` (default: this process's current environment) plus `extra`, with
    unbuffered Python output so the child's prints reach the notebook as they happen, and
    the language chosen in this session (the child's own sentences, its error included,
    are in it)."""
    env = _with_language(dict(os.environ if base is None else base))
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


STARTUP_VARIABLES = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "TORCH_", "LD_")
"""Prefixes of variables read when an interpreter starts or imports torch: a fork server
started under other values cannot give a run what a new interpreter would."""
SERVER_ONLY = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "PYTHONUNBUFFERED": "1"}
"""The fork server's own settings: NVML answers `torch.cuda.is_available()` without
initialising the CUDA driver (a library may ask while it is imported), which would break every
child forked after; unbuffered output as in every run."""
SET_AFTER_FORK = {DISABLE_VARIABLE}
"""Variables read at start-up that a forked run applies itself (isolate/eager.py)."""
START_TIMEOUT_S = 300.0
"""How long a fork may take, warm imports included."""


class ForkRefused(CudadiagError, OSError):
    """The fork server would not fork (CUDA was initialised in it, an installed module
    changed on disk); it has stopped. `kind` is one of isolate/refusals.py's kinds,
    `module` the module it names ('' for none); the message is its sentence."""

    def __init__(self, kind: str, module: str = "") -> None:
        super().__init__(refusals.sentence(kind, module))
        self.kind, self.module = kind, module


def server_environment(env: dict[str, str]) -> dict[str, str]:
    """Return the environment a fork server starts with for runs under `env`: the same minus
    the blocking variables (each child sets its run's), plus SERVER_ONLY."""
    neutral = {k: v for k, v in env.items() if k not in NVIDIA_BLOCKING and k not in ROCM_BLOCKING}
    return {**neutral, **SERVER_ONLY}


def startup_difference(server_env: dict[str, str], env: dict[str, str]) -> str | None:
    """Return the first variable read at start-up (STARTUP_VARIABLES) whose value differs
    between a fork server's environment and a run's, or None when none does."""
    names = sorted({*server_env, *env} - set(SERVER_ONLY) - SET_AFTER_FORK)
    return next((n for n in names if n.startswith(STARTUP_VARIABLES)
                 and server_env.get(n) != env.get(n)), None)


class ForkedProcess:
    """The parent's handle on a child forked by a fork server; quacks like Popen for what
    the runner uses (pid, stdout, stderr, returncode, poll, wait, how)."""

    def __init__(self, channel: socket.socket, pid: int, stdout: int, stderr: int) -> None:
        self._channel = channel
        self.pid = pid
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.returncode: int | None = None
        self.how = _("warm start (forked from a pre-started interpreter)")
        self.fallback: str | None = None

    def poll(self) -> int | None:
        """Return the exit code if the child has exited (the server said so), else None."""
        if self.returncode is None:
            readable, _, _ = select.select([self._channel], [], [], 0)
            if readable:
                self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Return the exit code; raises subprocess.TimeoutExpired after `timeout` seconds,
        OSError (after killing the child's group) when the server died during the run."""
        if self.returncode is None:
            try:
                line = _read_line(self._channel, timeout, ["fork server", str(self.pid)])
            except OSError:
                kill_group(self.pid)
                raise OSError(_("the warm interpreter died during the run; the run was "
                                "killed: run it again")) from None
            code = line.split()[2]
            self.returncode = int(code)
            self._channel.close()
        return self.returncode


class ForkServer:
    """One fork server process, seen from the parent. Starting it does not wait: it says
    when it is ready (torch imported). Forks may come from several threads at once."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = server_environment(env)
        self.started_at = time.monotonic()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile()
        self._lock = threading.Lock()
        self._ready = False
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cudadiag.isolate.forkserver",
                 str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True,
                cwd=os.getcwd(),
            )
        except OSError:
            self._control.close()
            self._log.close()
            raise
        finally:
            theirs.close()

    @property
    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process.poll() is None

    def ready(self, wait: float | None = 0) -> bool:
        """Return True once the server has said it is ready, waiting up to `wait` seconds
        for it (None: until it does or dies); False when it is not (yet) or died."""
        deadline = None if wait is None else time.monotonic() + wait
        with self._lock:
            while not self._ready and self.alive:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                readable, _, _ = select.select([self._control], [], [],
                                               0.1 if left is None else min(left, 0.1))
                if readable:
                    self._ready = self._control.recv(64) == b"ready"
                    if not self._ready:
                        break
                elif left is not None and left <= 0:
                    break
        return self._ready and self.alive

    def fork(self, job_path: str, env: dict[str, str], cwd: str,
             skip_imports: Iterable[str] = ()) -> ForkedProcess:
        """Fork a child for the job, to run in `env` and `cwd`, after the server's warm
        imports (top-level modules in `skip_imports` left out); raises ForkRefused when the
        server refused (it stops), OSError when it cannot be reached."""
        Launch(env, cwd, sorted(skip_imports)).write(Path(job_path))
        ours, theirs = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._control, [f"run {job_path}".encode()],
                                [theirs.fileno(), out_write, err_write])
        except OSError:
            for fd in (out_read, err_read):
                os.close(fd)
            ours.close()
            raise
        finally:
            for fd in (out_write, err_write):
                os.close(fd)
            theirs.close()
        try:
            word, _, rest = _read_line(ours, START_TIMEOUT_S, ["fork server", "start"]
                                       ).partition(" ")
        except (OSError, subprocess.TimeoutExpired) as exc:
            for fd in (out_read, err_read):
                os.close(fd)
            ours.close()
            raise OSError(_("the warm interpreter did not start the run: {error}").format(
                error=exc)) from None
        if word == "refused":
            for fd in (out_read, err_read):
                os.close(fd)
            ours.close()
            raise ForkRefused(*rest.split(" ", 1))
        return ForkedProcess(ours, int(rest), out_read, err_read)

    def why_dead(self) -> str:
        """Return how the server ended: its exit status and the last line it printed."""
        code = self.process.poll()
        how = (_("killed by {signal}").format(signal=signal.Signals(-code).name)
               if code is not None and code < 0 else _("exit status {code}").format(code=code))
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return f"{how}: {lines[-1]}" if lines else how

    def close(self) -> None:
        """Stop the server: a ready one kills the children still running, then exits; one
        still importing torch (it has no children) is killed at once, so that leaving a
        kernel never waits for an import."""
        self._control.close()
        if not self._ready:
            kill_group(self.process.pid)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill_group(self.process.pid)
            self.process.wait()
        self._log.close()


def _read_line(channel: socket.socket, timeout: float | None, what: list[str]) -> str:
    channel.settimeout(timeout)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = channel.recv(1)
            if not chunk:
                raise OSError(_("{what}: the fork server went away").format(
                    what=" ".join(what)))
            data += chunk
    except TimeoutError:
        raise subprocess.TimeoutExpired(what, timeout or 0) from None
    finally:
        channel.settimeout(None)
    return data.decode().strip()
