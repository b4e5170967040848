"""The incident log's index: one short line per record, so that listing, filtering and
finding an incident never parse the records themselves.

Each line is a JSON array: the entry's fields (IndexEntry: id, time, family, sticky, mode,
cell, script, one-line summary, simulated, schema, and where the record lies: the log
file's inode, offset and length) and the number of entries up to it; a three-item line
`[inode, end, count]` covers bytes of the log that hold no readable record. The first line
names the format.

The log stays the truth. The store keeps this file in step with it under the log's lock
and rebuilds it from the log when it is missing, unreadable, of another format or does not
match the log's files; it catches up records the index does not list yet (a writer that
died between its two writes, an older cudadiag that wrote only the log). Lines are appended
whole (a torn last line is ignored by readers and cut by the next writer); a rebuild writes
a new file and renames it over the old one. Appends are not synced: a line lost in a crash
is caught up from the synced log.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from cudadiag.durable import append_whole, replace_atomically
from cudadiag.incident import SCHEMA, Incident

INDEX_NAME = "incidents.index"
HEADER = b'{"cudadiag incident index": 1}\n'
SUMMARY_MAX = 90
"""Summaries longer than this are cut in the index (as a listing shows them)."""
IN_MEMORY = 0
"""The `segment` of a record that only this process holds (it could not be written yet)."""
_ENTRY_FIELDS = 14
"""Items of an entry's line: the fields of IndexEntry."""
_TAIL_CHUNK = 64 * 2**10

by_id = itemgetter(0)
by_creation = itemgetter(1)
"""Sort key of entries: their creation time."""


class IndexEntry(NamedTuple):
    """What a listing needs of one incident, and where its record lies."""

    id: str
    created_at: str
    family: str | None
    sticky: bool
    mode: str | None
    cell: int | None
    """The cell a listing names (the kernel's failing cell, the cell an isolated run
    raised in), when the incident came from a notebook."""
    script: str | None
    """The script (or `-m module`) of a `cudadiag run` incident."""
    summary: str
    simulated: bool
    schema: Any
    segment: int
    """Inode of the log file holding the record (IN_MEMORY: not written yet)."""
    offset: int
    length: int
    """Bytes of the record's line, its newline included."""
    number: int = 0
    """How many entries the index held up to this one (its line's last item)."""

    @property
    def newer(self) -> bool:
        """True for a record written by a newer cudadiag (listed, not readable here)."""
        return is_newer_schema(self.schema)

    def where(self) -> str:
        """Return `In[N]`, the script's name, or the mode (`kernel`, `cli`...)."""
        if self.cell is not None:
            return f"In[{self.cell}]"
        if self.script:
            return os.path.basename(self.script.rstrip("/")) or self.script
        return self.mode or "?"

    def describe_newer(self) -> str:
        """Return `recorded by a newer cudadiag (schema N)`."""
        return f"recorded by a newer cudadiag (schema {self.schema})"


@dataclass
class IndexState:
    """The index as read: entries in the order they were appended (an updated incident
    appears once per record, the last one wins), the bytes of each log file it covers, and
    the number of entries it has counted."""

    entries: list[IndexEntry] = field(default_factory=list)
    covered: dict[int, int] = field(default_factory=dict)
    count: int = 0
    torn_at: int | None = None
    """Where a torn last line of the file starts (a writer died mid-line), if one does."""

    def add(self, entry: IndexEntry) -> None:
        """Add an entry appended after the others."""
        self.entries.append(entry)
        self.count += 1
        self.cover(entry.segment, entry.offset + entry.length)

    def cover(self, segment: int, end: int) -> None:
        """Note that the log file `segment` is indexed up to byte `end`."""
        if self.covered.get(segment, -1) < end:
            self.covered[segment] = end

    def latest(self, pending: Iterable[IndexEntry] = ()) -> list[IndexEntry]:
        """Return one entry per incident (its last record, those of `pending` last), oldest
        first by creation."""
        latest = dict(zip(map(by_id, self.entries), self.entries, strict=True))
        latest.update((entry.id, entry) for entry in pending)
        return sorted(latest.values(), key=by_creation)


def is_newer_schema(schema: Any) -> bool:
    """True when a record's schema is one a newer cudadiag wrote."""
    return schema is not None and (not isinstance(schema, int) or schema > SCHEMA)


def failing_cell(incident: Incident) -> int | None:
    """Return the cell that was running when the error was raised: the kernel's failing
    cell; for an isolated run, the outermost cell of the traceback (In[6] when In[6] called
    a function of In[4]), else its suspect cell — never merely the first cell replayed.
    None when the incident ran no cell (a script)."""
    run = incident.run
    if not run.cells:
        return None
    if run.mode == "kernel":
        return run.cells[0]
    raised_in = [frame.cell for frame in incident.error.traceback if frame.cell is not None]
    return raised_in[0] if raised_in else run.cells[-1]


def entry_for_incident(incident: Incident, segment: int = IN_MEMORY, offset: int = 0,
                       length: int = 0) -> IndexEntry:
    """Return the index entry of `incident`, its record at `offset` of log file `segment`."""
    command = incident.run.command
    script = (command[1] if command[:1] == ["-m"] and len(command) > 1 else
              command[0] if command else None)
    summary = incident.diagnosis.summary
    if len(summary) > SUMMARY_MAX:
        summary = summary[: SUMMARY_MAX - 1] + "…"
    return IndexEntry(incident.id, incident.created_at, incident.diagnosis.family,
                      bool(incident.diagnosis.sticky), incident.run.mode,
                      failing_cell(incident), script, summary, bool(incident.run.simulated),
                      incident.schema, segment, offset, length)


def entry_for_newer(record_id: str, created_at: str, schema: Any, family: str | None,
                    segment: int = IN_MEMORY, offset: int = 0, length: int = 0) -> IndexEntry:
    """Return the index entry of a record a newer cudadiag wrote (what can be told of it)."""
    return IndexEntry(record_id, created_at, family, False, None, None, None, "", False,
                      schema, segment, offset, length)


def entry_line(entry: IndexEntry, count: int) -> bytes:
    """The index line of `entry`, the `count`-th entry of the index."""
    return _line([*entry[:-1], count])


def cover_line(segment: int, end: int, count: int) -> bytes:
    """The index line saying log file `segment` is indexed up to `end`."""
    return _line([segment, end, count])


def _line(row: list[Any]) -> bytes:
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


class IncidentIndex:
    """The index file of one incident log. Writers call the writing methods under the log's
    lock; readers read it at any time."""

    def __init__(self, home: Path) -> None:
        self.path = home / INDEX_NAME

    def read(self) -> IndexState | None:
        """Return the index, or None when it is missing, unreadable or of another format."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        return parse_index(data)

    def last_line(self) -> tuple[bool, list[Any] | None, int | None]:
        """Return (the format is this one, the last whole line's row or None, where a torn
        last line starts or None), reading only the file's head and tail."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False, None, None
        try:
            size = os.fstat(fd).st_size
            if os.pread(fd, len(HEADER), 0) != HEADER:
                return False, None, None
            tail_start = max(len(HEADER), size - _TAIL_CHUNK)
            tail = os.pread(fd, size - tail_start, tail_start)
        finally:
            os.close(fd)
        whole_end = tail.rfind(b"\n") + 1
        torn = tail_start + whole_end if whole_end < len(tail) else None
        if whole_end == 0:
            return tail_start == len(HEADER), None, torn
        line_start = tail.rfind(b"\n", 0, whole_end - 1) + 1
        if line_start == 0 and tail_start > len(HEADER):
            return False, None, torn  # a line longer than the chunk: not one of ours
        try:
            row = json.loads(tail[line_start:whole_end])
        except ValueError:
            return False, None, torn
        return isinstance(row, list), row if isinstance(row, list) else None, torn

    def first_created_at(self) -> str | None:
        """The creation time of the index's first entry (the oldest record appended), if
        there is one."""
        try:
            with self.path.open("rb") as f:
                f.seek(len(HEADER))
                row = json.loads(f.readline() or b"null")
        except (OSError, ValueError):
            return None
        if isinstance(row, list) and len(row) == _ENTRY_FIELDS and isinstance(row[1], str):
            return row[1]
        return None

    def append(self, lines: list[bytes], torn_at: int | None = None) -> bool:
        """Append `lines` whole, after cutting a torn last line at `torn_at`; return False
        when the file cannot be written (the log still holds the records)."""
        if not lines and torn_at is None:
            return True
        try:
            if torn_at is not None:
                os.truncate(self.path, torn_at)
            if lines:
                append_whole(self.path, b"".join(lines), sync=False)
        except OSError:
            return False
        return True

    def rewrite(self, state: IndexState) -> bool:
        """Replace the file with `state` (entries renumbered, one coverage line per log
        file); return False when it cannot be written."""
        lines = [entry_line(entry, n) for n, entry in enumerate(state.entries, start=1)]
        lines += [cover_line(segment, end, len(state.entries))
                  for segment, end in state.covered.items()]
        state.count = len(state.entries)
        try:
            replace_atomically(self.path, HEADER + b"".join(lines))
        except OSError:
            return False
        return True


def parse_index(data: bytes) -> IndexState | None:
    """Return the state an index file's bytes describe, None when they are not an index of
    this format or a whole line is not one of its lines. A torn last line is left out."""
    # Parsing makes a container per line and no cycle: the cyclic collector, run again and
    # again over the growing result, would take as long as the parse itself.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse_index(data)
    finally:
        if collecting:
            gc.enable()


def _parse_index(data: bytes) -> IndexState | None:
    if not data.startswith(HEADER):
        return None
    whole = data.rfind(b"\n") + 1
    torn_at = whole if whole < len(data) else None
    body = data[len(HEADER): whole]
    if len(body) == 0:
        return IndexState(torn_at=torn_at)
    try:  # one parse for the whole file: JSON text never holds a raw newline
        rows = json.loads(b"[" + body[:-1].replace(b"\n", b",") + b"]")
    except ValueError:
        return None
    try:  # C-level passes: a long index is read in a blink
        entries = list(map(tuple.__new__, repeat(IndexEntry),
                           [row for row in rows if len(row) == _ENTRY_FIELDS]))
        # lines of one log file cover it in order: the last one reaches furthest
        covered = {(row[10] if len(row) == _ENTRY_FIELDS else row[0]):
                   (row[11] + row[12] if len(row) == _ENTRY_FIELDS else row[1])
                   for row in rows}
    except (TypeError, KeyError, IndexError):  # a line that is not one of the index's
        return None
    markers = sum(len(row) == 3 for row in rows)
    if len(entries) + markers != len(rows) or not all(
            type(s) is int and type(e) is int for s, e in covered.items()):
        return None
    state = IndexState(entries=entries, covered=covered, torn_at=torn_at)
    state.count = rows[-1][-1] if rows and type(rows[-1][-1]) is int else len(entries)
    return state


def row_coverage(row: list[Any]) -> tuple[int, int] | None:
    """The (log file, end) a line of the index covers, None if it is not an index line."""
    if len(row) == _ENTRY_FIELDS and type(row[10]) is int and type(row[11]) is int \
            and type(row[12]) is int:
        return row[10], row[11] + row[12]
    if len(row) == 3 and all(type(x) is int for x in row):
        return row[0], row[1]
    return None
