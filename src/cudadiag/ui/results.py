"""The latest comparison, validation and fix check made in each shell, kept so the panel can
show them as sections of the incident they are about (the cell compared or validated, the
incident checked)."""

from __future__ import annotations

from typing import Any

from cudadiag.incident import Incident
from cudadiag.isolate.compare import Comparison
from cudadiag.isolate.fixcheck import FixCheck
from cudadiag.ui.comparison import comparison_section
from cudadiag.ui.fixcheck import fixcheck_section
from cudadiag.ui.render import Section
from cudadiag.ui.validation import validation_section
from cudadiag.validate import Validation

_kept: dict[tuple[int, str, Any], Any] = {}


def remember(shell: Any, result: Comparison | Validation | FixCheck) -> None:
    """Keep `result` as the latest of its kind for its cell (or incident) in `shell`."""
    if isinstance(result, FixCheck):
        _kept[(id(shell), "fixcheck", result.incident)] = result
    elif isinstance(result, Comparison):
        _kept[(id(shell), "compare", result.cell)] = result
    else:
        _kept[(id(shell), "validate", result.cell)] = result


def sections_for(shell: Any, incident: Incident) -> list[tuple[str, Section]]:
    """Return (tab title, section) of the results kept for `incident` in `shell`."""
    cells = incident.run.cells
    cell = (cells[-1] if incident.run.mode == "isolated" else cells[0]) if cells else None
    found = []
    for title, kind, key, section in (
            ("Compare", "compare", cell, comparison_section),
            ("Validate", "validate", cell, validation_section),
            ("Fix check", "fixcheck", incident.id, fixcheck_section)):
        result = _kept.get((id(shell), kind, key))
        if result is not None:
            found.append((title, section(result)))
    return found
