"""The panel's selector pages through a long log, newest first, from the index: opening it
reads one record (the incident shown), whatever the length of the log."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cudadiag import Panel, classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.store import IncidentStore
from cudadiag.panel.widget import PAGE_SIZE

ASSERT = "CUDA error: device-side assert triggered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _log(n: int) -> list[Incident]:
    store = IncidentStore()
    made = []
    for k in range(n):
        message = OOM if k % 3 == 0 else ASSERT
        incident = Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                            diagnosis=classify(message), run=RunInfo(mode="kernel", cells=[k]),
                            created_at=(START + timedelta(minutes=k)).isoformat())
        store.append(incident)
        made.append(incident)
    return made


def _ids(panel: Panel) -> list[str]:
    return [value for _, value in panel.selector.options]


def test_the_selector_pages_newest_first():
    made = _log(2 * PAGE_SIZE + 20)
    newest_first = [i.id for i in reversed(made)]
    panel = Panel(store=IncidentStore())
    assert panel.incident.id == made[-1].id
    assert _ids(panel) == newest_first[:PAGE_SIZE]
    assert panel.position.value == f"1–{PAGE_SIZE} of {len(made)}, newest first"
    assert panel.newer.disabled and not panel.older.disabled
    panel.older.click()
    assert _ids(panel) == newest_first[PAGE_SIZE: 2 * PAGE_SIZE]
    assert panel.incident.id == newest_first[PAGE_SIZE]  # the page's first is shown
    panel.older.click()
    assert _ids(panel) == newest_first[2 * PAGE_SIZE:]
    assert panel.position.value == f"{2 * PAGE_SIZE + 1}–{len(made)} of {len(made)}, newest first"
    assert panel.older.disabled and not panel.newer.disabled
    panel.newer.click()
    assert _ids(panel) == newest_first[PAGE_SIZE: 2 * PAGE_SIZE]


def test_pages_follow_the_family_filter():
    made = _log(2 * PAGE_SIZE)
    ooms = [i.id for i in reversed(made) if i.diagnosis.family == "oom"]
    panel = Panel(store=IncidentStore())
    panel.family.value = "oom"
    assert _ids(panel) == ooms[:PAGE_SIZE] and len(ooms) < PAGE_SIZE
    assert panel.position.value == f"1–{len(ooms)} of {len(ooms)}, newest first"
    assert panel.older.disabled and panel.newer.disabled


def test_an_old_incident_opens_on_its_page():
    made = _log(PAGE_SIZE + 10)
    panel = Panel(made[3].id, store=IncidentStore())
    assert panel.incident.id == made[3].id
    assert panel.selector.value == made[3].id
    assert panel.position.value.startswith(f"{PAGE_SIZE + 1}–")


def test_opening_the_panel_reads_only_the_incident_it_shows(monkeypatch):
    made = _log(PAGE_SIZE + 5)
    read = []
    real = Incident.from_dict.__func__
    monkeypatch.setattr(Incident, "from_dict",
                        classmethod(lambda cls, data: read.append(data["id"]) or real(cls, data)))
    panel = Panel(store=IncidentStore())
    assert read == [made[-1].id]
    panel.selector.value = made[-7].id
    assert read == [made[-1].id, made[-7].id]
    assert panel.incident.id == made[-7].id
