"""The isolated child's output as the user sees it: the suspect cell streams live, each
replayed cell is folded into one line, and everything is kept for the result.

The worker writes a marker on both of its streams before each cell (`cell_marker`); the
parent cuts the streams at those markers, so it knows which cell printed what without the
worker redirecting anything (the device's own lines, written by C code to fd 2, are cut the
same way). A marker is NUL-delimited: it cannot be confused with text, and it is removed
before anything is shown or kept.
"""

from __future__ import annotations

import codecs
import re
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any

from cudadiag.device_lines import DeviceLineScanner
from cudadiag.i18n import _, ngettext

SHOWN_BYTES = 1 * 2**20
"""Output of an isolated cell shown live per run; the rest is counted, not shown (a script
run shows all of its output)."""
KEPT_BYTES = 1 * 2**20
"""Tail of each stream kept in the result."""
STREAMS = ("stdout", "stderr")
ERASE_LINE = b"\x1b[2K"
"""What IPython's `clear_output()` prints (then a carriage return) outside a kernel."""
REPLAY, TARGET = "replay", "target"

_MARKER = re.compile(rb"\x00cudadiag:cell:(\d+):(replay|target)\x00")
_MARKER_HEAD = b"\x00cudadiag:cell:"
_MARKER_MAX = len(_MARKER_HEAD) + 32


def cell_marker(number: int, role: str) -> bytes:
    """Return the marker the worker writes on fds 1 and 2 before cell `number`, whose `role`
    is `replay` (an earlier cell replayed for its values) or `target` (the suspect cell)."""
    return b"\x00cudadiag:cell:%d:%s\x00" % (number, role.encode())


@dataclass
class _Fold:
    """What one replayed cell printed while hidden."""

    number: int
    lines: int = 0
    open_streams: int = len(STREAMS)


class ChildOutput:
    """Routes the child's stdout and stderr: shows, folds, counts and keeps.

    `stream`: show anything at all (False: only keep). `show_replay`: stream replayed cells
    live too instead of folding them. `shown_limit`: the bytes shown live, None for no limit
    (a script's output, as the terminal would show it).
    """

    def __init__(self, stream: bool = True, show_replay: bool = False,
                 shown_limit: int | None = SHOWN_BYTES) -> None:
        self.stream = stream
        self.show_replay = show_replay
        self.shown_limit = shown_limit
        self.kept = {name: bytearray() for name in STREAMS}
        self.device_lines = DeviceLineScanner()
        self.shown = 0
        self.hidden = 0
        """Bytes not shown because the live output reached `shown_limit`."""
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace")
                          for name in STREAMS}
        self._carry = {name: b"" for name in STREAMS}
        self._role: dict[str, tuple[int, str] | None] = {name: None for name in STREAMS}
        self._ends_line = {name: True for name in STREAMS}
        self._folds: list[_Fold] = []
        self._queue: dict[str, deque[bytes | tuple[int, str]]] = {
            name: deque() for name in STREAMS}
        self._cells_entered = {name: 0 for name in STREAMS}
        self._held = {name: b"" for name in STREAMS}
        """A newline held back from the live output until the next write (see _redrawn)."""

    def take(self, name: str, data: bytes) -> None:
        """Route a chunk the child wrote on stream `name` (`stdout` or `stderr`)."""
        buffer = self._carry[name] + data
        events = self._queue[name]
        position = 0
        for marker in _MARKER.finditer(buffer):
            events.append(buffer[position:marker.start()])
            events.append((int(marker.group(1)), marker.group(2).decode()))
            position = marker.end()
        rest = buffer[position:]
        cut = rest.rfind(b"\x00")
        if cut != -1 and _may_start_marker(rest[cut:]):
            rest, self._carry[name] = rest[:cut], rest[cut:]
        else:
            self._carry[name] = b""
        events.append(rest)
        self._drain(wait=True)

    def finish(self) -> None:
        """The streams have ended: route what was held back, fold the last replayed cells,
        scan the last unterminated lines, say how much was not shown."""
        for name in STREAMS:
            self._queue[name].append(self._carry[name])
            self._carry[name] = b""
        self._drain(wait=False)
        for name in STREAMS:
            self._leave(name)
            self.device_lines.end(name)
            if self.stream and self._held[name]:
                (sys.stdout if name == "stdout" else sys.stderr).write("\n")
                self._held[name] = b""
        if self.stream:
            sys.stdout.flush()
            sys.stderr.flush()
        if self.hidden and self.stream:
            print(_("cudadiag: {count:,} more bytes of output from the isolated run were not "
                    "shown (only its first {size} MiB is shown live)").format(
                count=self.hidden, size=SHOWN_BYTES >> 20),
                  file=sys.stderr, flush=True)

    def _drain(self, wait: bool) -> None:
        """Route the queued events. With `wait`, a stream's output waits while that stream
        is in a later cell than the other one (whose marker is on its way), so the folded
        line of a replayed cell counts both streams and comes before the next cell's
        output."""
        progress = True
        while progress:
            progress = False
            for name in STREAMS:
                other = STREAMS[1 - STREAMS.index(name)]
                events = self._queue[name]
                while events:
                    event = events[0]
                    if isinstance(event, tuple):
                        self._enter(name, *event)
                    elif wait and self._cells_entered[name] > self._cells_entered[other]:
                        break
                    else:
                        self._route(name, event)
                    events.popleft()
                    progress = True

    def text(self, name: str) -> str:
        """The kept tail of stream `name`, markers removed."""
        return bytes(self.kept[name]).decode(errors="replace")

    def _route(self, name: str, data: bytes) -> None:
        if not data:
            return
        self.device_lines.feed(name, data)
        kept = self.kept[name]
        kept += data
        del kept[:-KEPT_BYTES]
        role = self._role[name]
        if role is not None and role[1] == REPLAY and not self.show_replay:
            fold = self._fold_of(role[0])
            fold.lines += data.count(b"\n")
            self._ends_line[name] = data.endswith(b"\n")
            return
        self._show(name, data)

    def _show(self, name: str, data: bytes) -> None:
        if not self.stream:
            return
        limit = self.shown_limit
        if limit is not None and self.shown >= limit:
            self.hidden += len(data)
            return
        visible = data if limit is None else data[: limit - self.shown]
        self.shown += len(visible)
        self.hidden += len(data) - len(visible)
        out = sys.stdout if name == "stdout" else sys.stderr
        out.write(self._decoders[name].decode(self._redrawn(name, visible, out)))
        if b"\n" in visible or b"\r" in visible:
            out.flush()  # per line, not per write: a kernel sends one message per flush

    def _redrawn(self, name: str, data: bytes, out: Any) -> bytes:
        """`data` with a cell's redraws kept as redraws: outside a kernel, IPython's
        `clear_output()` prints ERASE_LINE; the line before it then ends with a newline that
        would pile the redrawn lines up. That newline is held back until the next write
        shows whether a redraw follows, and in a notebook (where ANSI line erasing is not
        understood) only the carriage return is kept, which the front end honours within
        one stream's consecutive outputs."""
        data = self._held[name] + data
        self._held[name] = b""
        data = data.replace(b"\n" + ERASE_LINE, ERASE_LINE)
        if data.endswith(b"\n"):
            data, self._held[name] = data[:-1], b"\n"
        if type(out).__module__.startswith("ipykernel"):
            data = data.replace(ERASE_LINE, b"")
            if name == "stderr" and not data.strip(b"\r"):
                return b""  # clear_output's stderr half: a bare return would split stdout
        return data

    def _enter(self, name: str, number: int, role: str) -> None:
        self._leave(name)
        self._cells_entered[name] += 1
        self._role[name] = (number, role)
        self._ends_line[name] = True
        if role == REPLAY:
            self._fold_of(number)

    def _leave(self, name: str) -> None:
        """Stream `name` is done with its current cell: fold the cells both streams left."""
        role = self._role[name]
        self._role[name] = None
        if role is None or role[1] != REPLAY:
            return
        fold = self._fold_of(role[0])
        fold.open_streams -= 1
        if not self._ends_line[name]:
            fold.lines += 1  # an unterminated last line is a line
        while self._folds and self._folds[0].open_streams <= 0:
            fold = self._folds.pop(0)
            if fold.lines and self.stream and not self.show_replay:
                print(ngettext("In[{n}]: {count:,} line hidden; --show-replay to see them",
                               "In[{n}]: {count:,} lines hidden; --show-replay to see them",
                               fold.lines).format(n=fold.number, count=fold.lines), flush=True)

    def _fold_of(self, number: int) -> _Fold:
        for fold in self._folds:
            if fold.number == number:
                return fold
        self._folds.append(_Fold(number))
        return self._folds[-1]


def _may_start_marker(tail: bytes) -> bool:
    """True when `tail` (from a NUL on) could be the start of a marker cut by a read."""
    if len(tail) <= len(_MARKER_HEAD):
        return _MARKER_HEAD.startswith(tail)
    return (tail.startswith(_MARKER_HEAD) and len(tail) < _MARKER_MAX
            and re.fullmatch(rb"\d*(?::[a-z]*)?", tail[len(_MARKER_HEAD):]) is not None)
