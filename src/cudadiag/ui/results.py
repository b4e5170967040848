"""The latest comparison, validation and fix check made in each shell, kept as sections so the
panel can show them with the incident they are about (the cell compared or validated, the
incident checked). The features put their sections here; this module imports none of them."""

from __future__ import annotations

from typing import Any

from cudadiag.i18n import N_, _
from cudadiag.incident import Incident
from cudadiag.ui.render import Section

TAB_ORDER = (N_("Compare"), N_("Validate"), N_("Fix check"))
"""The tabs' titles, in the order the panel shows them (the keys features remember their
sections by; sections_for gives them in the current language)."""

_kept: dict[tuple[int, str, tuple[str, Any]], Section] = {}


def remember(shell: Any, title: str, about: tuple[str, Any], section: Section) -> None:
    """Keep `section` as the latest `title` tab of `shell` for what it is `about`: ("cell", N)
    for a result about cell N, ("incident", ID) for one about an incident."""
    _kept[(id(shell), title, about)] = section


def sections_for(shell: Any, incident: Incident) -> list[tuple[str, Section]]:
    """Return (tab title in the current language, section) of the results kept for
    `incident` in `shell`: those about its cell (the isolated run's own cell for an isolated
    incident) or about it."""
    cells = incident.run.cells
    cell = (cells[-1] if incident.run.mode == "isolated" else cells[0]) if cells else None
    found = []
    for title in TAB_ORDER:
        for about in (("cell", cell), ("incident", incident.id)):
            section = _kept.get((id(shell), title, about))
            if section is not None:
                found.append((_(title), section))
    return found
