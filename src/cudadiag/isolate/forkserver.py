"""A pre-started interpreter that has imported torch (never initialising CUDA) and forks one
fresh child per run: the cheap way to get many fresh processes (the minimizer runs dozens).

The server is started with the run's environment, blocking variables included, so they are
in place before the interpreter starts, as for a plain new process. Protocol over a Unix
socket, one run at a time: the parent sends the job path with the child's stdout/stderr
pipe ends attached (SCM_RIGHTS); the server answers `started PID`, then `exited PID CODE`.
When the parent closes the socket (Ctrl-C, an export stopped), the server kills the running
child's process group and exits without a word.

    python -m cudadiag.isolate.forkserver FD
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import traceback
from types import ModuleType

POLL_S = 0.01
"""How often a child is checked on where the system has no pidfd (macOS)."""


def serve(fd: int) -> None:
    """Answer runs until the parent closes the socket."""
    import torch

    from cudadiag.isolate import worker
    from cudadiag.trace import OpTracer

    with OpTracer():  # a dispatch mode's first use imports torch._dynamo: pay it once, here
        torch.ones(1).add(1)

    channel = socket.socket(fileno=fd)
    try:
        _answer_runs(channel, worker)
    except OSError:
        return  # the parent went away (closed the socket or was interrupted): stop quietly


def _answer_runs(channel: socket.socket, worker: ModuleType) -> None:
    """Fork one child per job received; tell the parent its pid, then its exit code. A child
    nobody waits for any more (the parent went away) is killed with its process group."""
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 4096, 2)
        if not message:
            return
        pid = os.fork()
        if pid == 0:
            channel.close()
            _run_child(worker, message.decode(), fds)
        for received in fds:
            os.close(received)
        try:
            channel.sendall(f"started {pid}\n".encode())
        except OSError:
            _kill_group(pid)
            raise
        status = _wait(channel, pid)
        channel.sendall(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _wait(channel: socket.socket, pid: int) -> int:
    """The child's wait status. The parent sends nothing during a run, so the socket turning
    readable means it closed (Ctrl-C, an export stopped): the child's group is killed and
    ConnectionError raised. Waits on a pidfd where the system has them, else polls."""
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            watched: list[socket.socket | int] = [channel] if pidfd is None else [channel, pidfd]
            readable, _, _ = select.select(watched, [], [], POLL_S if pidfd is None else None)
            if channel in readable and not channel.recv(1, socket.MSG_PEEK):
                _kill_group(pid)
                raise ConnectionError("the parent closed the fork server's socket")
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # not yet the leader of its own group
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _run_child(worker: ModuleType, job_path: str, fds: list[int]) -> None:
    """In the forked child: own process group, output to the run's pipes, run, exit."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for received in fds:
            os.close(received)
        code = worker.main(["worker", job_path])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
