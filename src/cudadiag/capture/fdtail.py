"""The kernel's file descriptors 1 and 2 routed through a pipe, so the device's own lines
(device_lines.py) printed by C code in the kernel's process can be read.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import threading
import time

from cudadiag.device_lines import DeviceLineScanner

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
        self.scanner = DeviceLineScanner()
        self._redirected: list[tuple[int, int, int]] = []
        """(fd, saved copy of its old target, read end of our pipe)"""
        self._thread: threading.Thread | None = None
        self._scanning = False
        """The pump has read a chunk it has not scanned yet."""

    def attach(self, *fds: int) -> None:
        """Route each fd through the tail (one thread serves them all, so what is written to
        stdout and stderr keeps its order). Skips an fd that cannot be duplicated."""
        if self._thread is not None or os.name == "nt":
            return  # Windows cannot select() on pipes: the lines stay where they go
        for fd in fds:
            try:
                saved = os.dup(fd)
                read_end, write_end = os.pipe()
                os.dup2(write_end, fd)
                os.close(write_end)
            except OSError:
                continue
            self._redirected.append((fd, saved, read_end))
        if self._redirected:
            self._thread = threading.Thread(target=self._pump, daemon=True,
                                            name="cudadiag-device-lines")
            self._thread.start()

    def detach(self) -> None:
        """Point every fd back where it pointed before; the thread drains and exits."""
        for fd, saved, _ in self._redirected:
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        for _, saved, _ in self._redirected:
            with contextlib.suppress(OSError):
                os.close(saved)
        self._redirected.clear()
        self._thread = None

    def _pump(self) -> None:
        selector = selectors.DefaultSelector()
        for _, saved, read_end in self._redirected:
            selector.register(read_end, selectors.EVENT_READ, saved)
        while selector.get_map():
            for key, _ in selector.select():
                self._scanning = True  # before the read: settle() must not see 0 bytes left
                chunk = _read(key.fd)
                if not chunk:
                    selector.unregister(key.fd)
                    self.scanner.end(key.fd)
                    os.close(key.fd)
                    self._scanning = False
                    continue
                _write_all(key.data, chunk)
                self.scanner.feed(key.fd, chunk)
                self._scanning = False
        selector.close()

    def settle(self, timeout: float = DEVICE_LINES_WAIT_S) -> None:
        """Wait, at most `timeout` seconds, until everything written to the fds so far has
        been scanned: a cell that ends without error may have had the device print lines
        that are still in the pipe. Returns at once when nothing is pending."""
        deadline = time.monotonic() + timeout
        while self._thread is not None and time.monotonic() < deadline and (
                self._scanning or any(_unread(read_end) for _, _, read_end in self._redirected)):
            time.sleep(0.005)

    def take(self, wait_for_lines: bool = False) -> str:
        """Return the lines kept so far and forget them.

        With `wait_for_lines`, give the kernel's pipe thread a moment: a device prints its
        assertion when the host synchronises, just before the exception is raised, and the
        line may still be on its way to the stream.
        """
        deadline = time.monotonic() + DEVICE_LINES_WAIT_S
        while wait_for_lines and not self.scanner.lines and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.scanner.take()


def _unread(fd: int) -> int:
    """The bytes waiting in the pipe `fd` (0 when it cannot be asked)."""
    import fcntl  # POSIX only, as the tail is
    import termios

    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4), sys.byteorder)
    except OSError:
        return 0


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data):]
