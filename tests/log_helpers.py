"""Helpers of the log's tests: the process's cached database connections, and a small
tmpfs to fill or make read-only."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudadiag.log import database


def close_connections() -> None:
    """Close the connections the log keeps open in this process (a remount needs it); those
    of threads that have ended are only dropped (sqlite3 closes a connection in its thread)."""
    for (_path, thread), (_pid, _inode, conn) in database._connections.items():
        if thread == threading.get_ident():
            conn.close()
    database._connections.clear()


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `mount_point`, unmounted at the end; the test is skipped where
    mounting needs rights this process lacks."""
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        close_connections()
        gc.collect()  # a failed statement held by a traceback keeps its connection open
        subprocess.run(["umount", str(mount_point)], check=True)
