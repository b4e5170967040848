"""What an isolated run gave (IsolatedResult): read by the runner that fills it, the rank
jobs that complete it and every view that prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cudadiag.isolate.launcher import BlockingSettings

if TYPE_CHECKING:
    from cudadiag.incident import Incident


@dataclass
class IsolatedResult:
    """What an isolated run gave: the incident (None when the run succeeded) and the output."""

    incident: Incident | None
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    settings: BlockingSettings
    timed_out: bool = False
    interrupted: bool = False
    cells: list[int] = field(default_factory=list)
    pid: int | None = None
    """The child's pid, which is also its process group id."""
    message: str = ""
    """One line for the user when the run ended without an incident to show."""
    start: str = ""
    """How the process was made (warm or cold, and why cold) and whether the blocking
    variables were in effect in it, as the child checked."""
    unrelated: str = ""
    """For a script that failed with an error unrelated to PyTorch (no incident): its
    exception, `KeyError: 'lr'`."""

