"""What a listing needs of one incident: the columns of its row in the log (LogEntry), so
that listing, filtering and the panel's selector never parse a record."""

from __future__ import annotations

import os
from operator import itemgetter
from typing import Any, NamedTuple

from cudadiag.i18n import _
from cudadiag.incident import SCHEMA, Incident

SUMMARY_MAX = 90
"""Summaries longer than this are cut in the log's column (as a listing shows them)."""

by_id = itemgetter(0)


class LogEntry(NamedTuple):
    """One incident as the log's columns hold it."""

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
        return _("recorded by a newer cudadiag (schema {schema})").format(schema=self.schema)


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


def entry_for_incident(incident: Incident) -> LogEntry:
    """Return the log entry of `incident` (its summary cut to SUMMARY_MAX)."""
    command = incident.run.command
    script = (command[1] if command[:1] == ["-m"] and len(command) > 1 else
              command[0] if command else None)
    summary = incident.diagnosis.summary
    if len(summary) > SUMMARY_MAX:
        summary = summary[: SUMMARY_MAX - 1] + "…"
    return LogEntry(incident.id, incident.created_at, incident.diagnosis.family,
                    bool(incident.diagnosis.sticky), incident.run.mode,
                    failing_cell(incident), script, summary, bool(incident.run.simulated),
                    incident.schema)


def entry_for_newer(record_id: str, created_at: str, schema: Any,
                    family: str | None) -> LogEntry:
    """Return the log entry of a record a newer cudadiag wrote (what can be told of it)."""
    return LogEntry(record_id, created_at, family, False, None, None, None, "", False, schema)
