"""How a fresh process is obtained, with its environment fixed before the interpreter starts.

Blocking launches only work when the variable is in the environment before CUDA initialises,
so the child gets them in its `env`, never through `os.environ` inside the child. The way the
process is made (today: a new interpreter per run) is one replaceable class; a pool of
pre-started interpreters that imported torch without initialising CUDA could take its place.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import select
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

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
        return BlockingSettings(backend, {}, "blocking launches off (asynchronous re-run)")
    if backend == "rocm":
        return BlockingSettings(backend, dict(ROCM_BLOCKING),
                                "ROCm: HIP_LAUNCH_BLOCKING=1, AMD_SERIALIZE_KERNEL=3")
    if backend == "cuda":
        return BlockingSettings(backend, dict(NVIDIA_BLOCKING), "CUDA_LAUNCH_BLOCKING=1")
    return BlockingSettings(
        backend, dict(NVIDIA_BLOCKING),
        "CPU-only PyTorch: blocking launches have no meaning for real kernels here; "
        "CUDA_LAUNCH_BLOCKING=1 only makes cudadiag's simulated device raise at the faulty op",
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


class Launcher(Protocol):
    """Starts the worker for a job file in a fresh process with the given environment."""

    def start(self, job_path: str, env: dict[str, str]) -> ChildProcess:
        """Return the running process (`pid`, `stdout`, `stderr`, `returncode`, `poll()`,
        `wait(timeout)` as Popen has them); its stdout/stderr are pipes, which the caller
        closes, and it is in its own process group (so a timeout or an interrupt can kill
        everything it started)."""
        ...


class SubprocessLauncher:
    """A new interpreter per run: `python -m cudadiag.isolate.worker JOB`."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def start(self, job_path: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start the worker; raises OSError when the interpreter cannot be started."""
        return subprocess.Popen(
            [self.python, "-m", "cudadiag.isolate.worker", job_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            cwd=os.getcwd(),
        )


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """Return this process's environment plus `extra`, with unbuffered Python output so the
    child's prints reach the notebook as they happen."""
    env = dict(os.environ)
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ForkedProcess:
    """The parent's handle on a child forked by the fork server; quacks like Popen for what
    the runner uses (pid, stdout, stderr, returncode, poll, wait)."""

    def __init__(self, channel: socket.socket, pid: int, stdout: int, stderr: int) -> None:
        self._channel = channel
        self.pid = pid
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Return the exit code if the child has exited (the server said so), else None."""
        if self.returncode is None:
            readable, _, _ = select.select([self._channel], [], [], 0)
            if readable:
                self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Return the exit code; raises subprocess.TimeoutExpired after `timeout` seconds."""
        if self.returncode is None:
            line = _read_line(self._channel, timeout, ["fork server", str(self.pid)])
            _, _, code = line.split()
            self.returncode = int(code)
        return self.returncode


class ForkServerLauncher:
    """Forks each run from a pre-started interpreter that imported torch but never
    initialised CUDA: a fresh process in milliseconds instead of seconds. One server per
    environment, started with that environment (blocking variables set before Python
    starts) in the working directory `cwd` (default: this process's). Runs go one at a
    time. `close()` stops the servers."""

    def __init__(self, python: str | None = None, cwd: str | None = None) -> None:
        self.python = python or sys.executable
        self.cwd = cwd
        self._servers: dict[tuple[tuple[str, str], ...], tuple[subprocess.Popen[bytes],
                                                              socket.socket]] = {}

    def start(self, job_path: str, env: dict[str, str]) -> ForkedProcess:
        """Fork a child for the job; raises OSError when the server cannot be reached."""
        _, channel = self._server(env)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            socket.send_fds(channel, [job_path.encode()], [out_write, err_write])
        finally:
            os.close(out_write)
            os.close(err_write)
        _, pid = _read_line(channel, 60, ["fork server", "start"]).split()
        return ForkedProcess(channel, int(pid), out_read, err_read)

    def close(self) -> None:
        """Stop every server this launcher started."""
        for process, channel in self._servers.values():
            channel.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        self._servers.clear()

    def __enter__(self) -> ForkServerLauncher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _server(self, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], socket.socket]:
        key = tuple(sorted(env.items()))
        server = self._servers.get(key)
        if server is None or server[0].poll() is not None:
            ours, theirs = socket.socketpair()
            process = subprocess.Popen(
                [self.python, "-m", "cudadiag.isolate.forkserver", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.cwd or os.getcwd(),
            )
            theirs.close()
            server = self._servers[key] = (process, ours)
        return server


def _read_line(channel: socket.socket, timeout: float | None, what: list[str]) -> str:
    channel.settimeout(timeout)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = channel.recv(1)
            if not chunk:
                raise OSError(f"{' '.join(what)}: the fork server went away")
            data += chunk
    except TimeoutError:
        raise subprocess.TimeoutExpired(what, timeout or 0) from None
    finally:
        channel.settimeout(None)
    return data.decode().strip()
