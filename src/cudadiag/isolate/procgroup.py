"""The process group of an isolated run: who is still in it, and ending it.

The child is started in its own session, so its pid is the group id of everything it starts
(unless a descendant leaves the group on purpose). Python waits only for the child; what it
left behind in the group is found here, by group id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

KILL_WAIT_S = 10.0
"""How long a process group sent SIGKILL may take to be gone before it is named as still
running."""
POLL_S = 0.01


def group_members(pgid: int) -> list[tuple[int, str]]:
    """Return (pid, command name) of each live process in process group `pgid`, by pid;
    zombies (already dead, waiting for their parent) are left out. Reads /proc where there
    is one, else asks `ps`; returns [] when neither is available, or at once when no
    process of the group exists (the common case: reading every process's entry took
    milliseconds on a busy machine)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # it exists: someone else's process took the group id; the scan will say
    proc = Path("/proc")
    if (proc / "self" / "stat").exists():
        found = (_proc_entry(path) for path in proc.iterdir() if path.name.isdigit())
        rows = [entry for entry in found if entry is not None]
    else:
        rows = _ps_rows()
    return sorted((pid, name) for pid, group, state, name in rows
                  if group == pgid and not state.startswith("Z"))


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to every process of group `pgid`; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_and_wait(pgid: int, timeout: float = KILL_WAIT_S) -> list[tuple[int, str]]:
    """Send SIGKILL to every process of group `pgid` and wait until none of them is alive;
    return (pid, command name) of those still alive after `timeout` seconds (a process
    stuck in an uninterruptible call), [] once all are gone. A killed process is not gone
    when the signal is sent: it must be scheduled to exit, later on a busy machine."""
    kill_group(pgid, signal.SIGKILL)
    return wait_until_gone(pgid, timeout)


def wait_until_gone(pgid: int, timeout: float) -> list[tuple[int, str]]:
    """Wait until group `pgid` has no live process (zombies count as gone), at most
    `timeout` seconds; return those still alive then."""
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return left


def describe(members: list[tuple[int, str]]) -> str:
    """Return `pid 1234 (sleep), pid 1240 (python)` for `members`."""
    return ", ".join(f"pid {pid} ({name})" for pid, name in members)


def _proc_entry(path: Path) -> tuple[int, int, str, str] | None:
    try:
        stat = (path / "stat").read_text()
    except OSError:  # the process ended while we looked
        return None
    # `pid (comm) state ppid pgrp ...`; comm may itself hold spaces and parentheses
    head, _, tail = stat.rpartition(")")
    name = head.partition("(")[2]
    state, _ppid, group = tail.split()[:3]
    return int(path.name), int(group), state, name


def _ps_rows() -> list[tuple[int, int, str, str]]:
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,pgid=,stat=,comm="], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in out.splitlines():
        pid, group, state, name = [*line.split(None, 3), ""][:4]
        rows.append((int(pid), int(group), state, os.path.basename(name.strip())))
    return rows
