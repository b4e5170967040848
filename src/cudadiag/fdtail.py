"""The device's own lines: what a GPU kernel or the ROCm runtime prints to the process's file
descriptors (kernel assertion printf, memory access faults). They never reach the exception,
so whoever classifies an error has to read them here.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque

from cudadiag import knowledge

DEVICE_LINES_KEPT = 64
DEVICE_LINES_WAIT_S = 0.2


class DeviceMessageTail:
    """Keeps the device's own lines (kernel assertion printf, ROCm faults) written to the
    process's file descriptors 1 and 2; they never reach the exception.

    It sits in the file-descriptor chain: fd N is pointed at a pipe that a daemon thread reads,
    scans and forwards, unchanged, to where fd N pointed before (a terminal, or the pipe that
    ipykernel forwards to the notebook). Stream-level hooks would miss these lines: ipykernel
    delivers them from its own thread, often after the cell that printed them has ended.
    """

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=DEVICE_LINES_KEPT)
        self._redirected: list[tuple[int, int, int]] = []
        """(fd, saved copy of its old target, read end of our pipe)"""
        self._threads: list[threading.Thread] = []

    def attach(self, fd: int) -> None:
        """Route `fd` through the tail. Does nothing if the fd cannot be duplicated."""
        if any(entry[0] == fd for entry in self._redirected):
            return
        try:
            saved = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
        except OSError:
            return
        thread = threading.Thread(target=self._pump, args=(read_end, saved), daemon=True,
                                  name=f"cudadiag-fd{fd}")
        thread.start()
        self._redirected.append((fd, saved, read_end))
        self._threads.append(thread)

    def detach(self) -> None:
        """Point every fd back where it pointed before; the threads drain and exit."""
        for fd, saved, _ in self._redirected:
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
        for thread in self._threads:
            thread.join(timeout=1.0)
        for _, saved, _ in self._redirected:
            with contextlib.suppress(OSError):
                os.close(saved)
        self._redirected.clear()
        self._threads.clear()

    def _pump(self, read_end: int, target: int) -> None:
        partial = b""
        while chunk := _read(read_end):
            _write_all(target, chunk)
            *complete, partial = (partial + chunk).split(b"\n")
            self._keep(complete)
            partial = partial[-4096:]
        self._keep([partial])
        os.close(read_end)

    def _keep(self, raw_lines: list[bytes]) -> None:
        for raw in raw_lines:
            line = raw.decode(errors="replace")
            if knowledge.DEVICE_MESSAGE.search(line):
                self.lines.append(line.strip())

    def take(self, wait_for_lines: bool = False) -> str:
        """Return the lines kept so far and forget them.

        With `wait_for_lines`, give the kernel's pipe thread a moment: a device prints its
        assertion when the host synchronises, just before the exception is raised, and the
        line may still be on its way to the stream.
        """
        deadline = time.monotonic() + DEVICE_LINES_WAIT_S
        while wait_for_lines and not self.lines and time.monotonic() < deadline:
            time.sleep(0.01)
        text = "\n".join(self.lines)
        self.lines.clear()
        return text


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data):]
