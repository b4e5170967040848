"""torch.multiprocessing's report of a process it started that failed, read as that
process's own error.

`torch.multiprocessing.spawn` / `start_processes` raise in the parent one of two wrappers:
`ProcessRaisedException` carries the child's traceback as text ("-- Process 1 terminated with
the following error: Traceback ... IndexError: Target 4 is out of bounds."),
`ProcessExitedException` only the exit code or signal ("process 0 terminated with exit code
1"). Either way the process index (the rank, as spawn numbers them) is `error_index`. The
incident of such a failure is the child's: its exception type and message, its frames, its
family — with the rank named, and the kernel's CUDA context left usable (the child's is
gone with it). When the child died before running anything (a function it could not load),
what it printed itself (kept by the kernel's device-line tail) decides.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from cudadiag.classification import STICKY_TAIL, classify
from cudadiag.i18n import msg
from cudadiag.incident import Frame, Incident

SPAWN_EXCEPTIONS = {
    "torch.multiprocessing.spawn.ProcessRaisedException": "raised",
    "torch.multiprocessing.spawn.ProcessExitedException": "exited",
}
"""torch.multiprocessing's wrappers of a failed child, by module-qualified type name."""
_HEADER = re.compile(r"-- Process (?P<index>\d+) terminated with the following error:\n")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|"
                             r"Warning|Failure))(?:: (?P<message>.*))?$")
_LIBRARY_MARKERS = (
    os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep,
    os.path.dirname(os.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep,
    "<frozen ", "<string>",
)
"""Frames of PyTorch, the standard library and cudadiag (its simulated device): not the
program's."""


@dataclass
class SpawnReport:
    """One failed child of torch.multiprocessing, as its parent was told."""

    rank: int
    """The process index spawn gave the child (its first argument: the rank)."""
    pid: int | None
    child_traceback: str
    """The child's own traceback ('' when it only exited)."""
    ended: str
    """`raised` or `exited`."""


def read_spawn_report(exc: BaseException) -> SpawnReport | None:
    """Return the report of a failed child when `exc` is one of torch.multiprocessing's
    wrappers (SPAWN_EXCEPTIONS), else None. Never raises."""
    cls = type(exc)
    ended = SPAWN_EXCEPTIONS.get(f"{cls.__module__}.{cls.__qualname__}")
    index = getattr(exc, "error_index", None)
    if ended is None or not isinstance(index, int):
        return None
    text = str(exc)
    header = _HEADER.search(text)
    child = text[header.end():].strip("\n") if header and ended == "raised" else ""
    return SpawnReport(rank=index, pid=getattr(exc, "error_pid", None), child_traceback=child,
                       ended=ended)


def make_child_incident(incident: Incident, report: SpawnReport, printed: str,
                        locate_cell: Callable[[str], int | None] = lambda filename: None,
                        cell_source: Callable[[int], str | None] = lambda cell: None) -> None:
    """Make `incident` (filed for the parent's wrapper exception) the failed child's: its
    exception type, message and frames when it raised, the diagnosis of its own text (and of
    `printed`, the lines it printed itself, which come first), the rank named in the summary.
    `locate_cell` / `cell_source` map a frame's file to the notebook cell it came from."""
    error = incident.error
    if report.child_traceback:
        error.type, error.message = child_exception(report.child_traceback)
        frames = child_frames(report.child_traceback, locate_cell, cell_source)
        if frames:
            error.traceback = frames
            error.reported_at = next((f for f in reversed(frames) if f.user), frames[-1])
        diagnosis = classify(report.child_traceback, context=printed or None)
    else:
        diagnosis = classify(error.text, context=printed or None)
    diagnosis.rank = report.rank
    # the context the error made unusable was the child's, which is gone: the kernel's is not
    diagnosis.summary = diagnosis.summary.removesuffix(STICKY_TAIL)
    diagnosis.sticky = False
    where = error.reported_at if report.child_traceback else None
    if report.ended != "raised":
        diagnosis.summary = msg("{summary} — rank {rank} failed: {message}",
                                summary=diagnosis.summary, rank=report.rank,
                                message=error.message)
    elif where is not None:
        diagnosis.summary = msg("{summary} — rank {rank} raised it in its own process at "
                                "{place}", summary=diagnosis.summary, rank=report.rank,
                                place=where.location())
    else:
        diagnosis.summary = msg("{summary} — rank {rank} raised it in its own process",
                                summary=diagnosis.summary, rank=report.rank)
    incident.diagnosis = diagnosis


def child_exception(traceback_text: str) -> tuple[str, str]:
    """The (type, first message line) of the exception a traceback text ends with: its last
    `Type: message` line at the start of a line; ('', last line) when there is none."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        m = _EXCEPTION_LINE.match(line)
        if m:
            return m.group("type"), (m.group("message") or "").strip()
    return "", lines[-1].strip() if lines else ""


def child_frames(traceback_text: str, locate_cell: Callable[[str], int | None],
                 cell_source: Callable[[int], str | None]) -> list[Frame]:
    """The frames of a traceback text (the last traceback in it), innermost last, mapped to
    the notebook's cells where the child ran a function a cell defined."""
    lines = traceback_text.splitlines()
    frames: list[Frame] = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            frames = []
        m = _FRAME.match(line)
        if not m:
            continue
        cell = locate_cell(m.group("file"))
        number = int(m.group("line"))
        following = lines[i + 1] if i + 1 < len(lines) else ""
        source = None if _FRAME.match(following) or _EXCEPTION_LINE.match(following) \
            else following.strip()
        if cell is not None and not source:
            cell_lines = (cell_source(cell) or "").splitlines()
            source = cell_lines[number - 1].strip() if 0 < number <= len(cell_lines) else None
        library = any(marker in m.group("file") for marker in _LIBRARY_MARKERS)
        frames.append(Frame(file=m.group("file"), line=number, function=m.group("function"),
                            source=source or None, cell=cell,
                            user=cell is not None or not library))
    return frames
