"""The device's own lines: what a GPU kernel or the ROCm runtime prints to the process's file
descriptors (kernel assertion printf, memory access faults). They never reach the exception,
so whoever classifies an error reads them from the output instead: the kernel's file
descriptor tail (fdtail.py) and the isolated run's output router (isolate/output.py) both
feed what they read to one DeviceLineScanner.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Hashable

DEVICE_MESSAGE = re.compile(
    r"Assertion `|Device-side assertion|Memory access fault by GPU|HSA_STATUS_ERROR"
    r"|Can't get attribute '[^']+' on <module '__main__'"
)
"""A device's line (kernel assertion printf, a GPU memory fault, ROCm's runtime) or a child's
that could not load its function."""

DEVICE_LINES_KEPT = 64
"""The newest device lines kept (a failing kernel prints one per thread)."""
PARTIAL_LINE_KEPT = 4096
"""Bytes of an unterminated line kept while its end is awaited."""


class DeviceLineScanner:
    """Keeps the device's own lines found in one or more byte streams, each read in chunks
    cut anywhere (a line may arrive in several reads)."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=DEVICE_LINES_KEPT)
        self._partial: dict[Hashable, bytes] = {}

    def feed(self, stream: Hashable, data: bytes) -> None:
        """Scan the complete lines that `data`, the next bytes of `stream`, ends."""
        *complete, rest = (self._partial.get(stream, b"") + data).split(b"\n")
        self._partial[stream] = rest[-PARTIAL_LINE_KEPT:]
        self._keep(complete)

    def end(self, stream: Hashable) -> None:
        """`stream` has ended: scan its last, unterminated line."""
        self._keep([self._partial.pop(stream, b"")])

    def take(self) -> str:
        """Return the lines kept so far, one per line, and forget them."""
        text = "\n".join(self.lines)
        self.lines.clear()
        return text

    def _keep(self, raw_lines: list[bytes]) -> None:
        for raw in raw_lines:
            if raw:
                line = raw.decode(errors="replace")
                if DEVICE_MESSAGE.search(line):
                    self.lines.append(line.strip())
