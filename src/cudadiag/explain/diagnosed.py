"""cudadiag's own diagnosis in a log: the line `cudadiag [ID] FAMILY — SUMMARY` that `cudadiag
run` prints under a failed program. In a job across nodes every node's agent prints the same
line, the job's first failure agreed with the other nodes (isolate/nodes.py): one node's log
then names a failure its own lines do not show. The line is quoted as printed (in the
language it was printed in); the incident itself is read from the local incident log when
the run was on this machine.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cudadiag import knowledge

if TYPE_CHECKING:
    from cudadiag.incident import Incident

KEY = b"cudadiag ["
"""What a log line holding cudadiag's diagnosis holds (for the scan's key lines)."""
_LINE = re.compile(r"^cudadiag \[(?P<id>[0-9a-f]{12})\] (?P<family>[a-z_]+) — (?P<summary>.+)$")


@dataclass
class DiagnosedLine:
    """cudadiag's diagnosis as a log holds it."""

    line: int
    """1-based line number in the log."""
    incident_id: str
    family: str
    summary: str
    """As printed (in the language it was printed in)."""

    @property
    def text(self) -> str:
        """The line as printed."""
        return f"cudadiag [{self.incident_id}] {self.family} — {self.summary}"


def diagnosed_line(text: str, line: int) -> DiagnosedLine | None:
    """Return log line `line` (`text`, without its rank prefix) as cudadiag's diagnosis, or
    None when it is not one (its family unknown to this cudadiag among them)."""
    found = _LINE.match(text.strip())
    if found is None or found["family"] not in knowledge.FAMILIES:
        return None
    return DiagnosedLine(line, found["id"], found["family"], found["summary"])


def stored_incident(incident_id: str) -> Incident | None:
    """Return the incident from this machine's incident log, None when the log (never
    created here: nothing is created) or the incident is not there, or cannot be read."""
    from cudadiag.errors import CudadiagError
    from cudadiag.log.store import IncidentStore

    store = IncidentStore()
    if not store.path.exists():
        return None
    with contextlib.suppress(CudadiagError, OSError):
        return store.get(incident_id)
    return None
