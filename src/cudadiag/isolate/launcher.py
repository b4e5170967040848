"""How a fresh process is obtained, with its environment fixed before the interpreter starts.

Blocking launches only work when the variable is in the environment before CUDA initialises,
so the child gets them in its `env`, never through `os.environ` inside the child. The way the
process is made (today: a new interpreter per run) is one replaceable class; a pool of
pre-started interpreters that imported torch without initialising CUDA could take its place.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Protocol

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

    Reads `torch.version` only: importing torch does not initialise CUDA.
    """
    import torch

    if getattr(torch.version, "hip", None):
        backend = "rocm"
    elif torch.version.cuda:
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


class Launcher(Protocol):
    """Starts the worker for a job file in a fresh process with the given environment."""

    def start(self, job_path: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Return the running process; its stdout/stderr are pipes, in its own process
        group (so a timeout or an interrupt can kill everything it started)."""
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
