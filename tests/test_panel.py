"""The ipywidgets panel, driven from Python: browsing, filtering, actions, mime bundle."""

from __future__ import annotations

import nbformat
import pytest

from cudadiag import Panel, classify, incidents
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.store import IncidentStore
from cudadiag.panel.widget import ALL_FAMILIES

WIDGET = "application/vnd.jupyter.widget-view+json"


def _store_with(*messages: str) -> tuple[IncidentStore, list[Incident]]:
    store = IncidentStore()
    made = []
    for n, message in enumerate(messages, start=1):
        incident = Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                            diagnosis=classify(message), run=RunInfo(mode="kernel", cells=[n]),
                            created_at=f"2026-12-02T10:00:0{n}+00:00")
        store.append(incident)
        made.append(incident)
    return store, made


def test_shows_the_newest_incident_and_lists_all_newest_first():
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB",
                              "Expected all tensors to be on the same device")
    panel = Panel(store=store)
    assert panel.incident.id == made[-1].id
    assert [value for _, value in panel.selector.options] == [i.id for i in reversed(made)]
    assert "device_mismatch" in panel.header.value
    assert "cd-restart-line" not in panel.header.value  # not sticky
    assert panel.tabs.titles == ("First error", "Batch", "Next checks", "Environment",
                                 "Later errors")


def test_selecting_an_incident_shows_it_with_its_restart_line_and_how_to_restart():
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB")
    panel = Panel(store=store)
    panel.selector.value = made[0].id
    assert panel.incident.id == made[0].id
    assert 'class="cd-restart-line"' in panel.header.value
    assert "Restart required: the CUDA context has been unusable since In[1]" in (
        panel.header.value)
    assert "Kernel &gt; Restart Kernel" in panel.tabs.children[0].value  # First error


def test_the_lead_comes_first_and_holds_at_most_twelve_lines_before_the_tabs(shell):
    """The widget form: the lead, then the tabs; browsing the log comes last."""
    from cudadiag.ui.render import LEAD_BUDGET
    from scenarios import fail_with_device_assert

    fail_with_device_assert(shell)
    panel = Panel(store=IncidentStore())
    assert panel.children[0] is panel.header and panel.children[1] is panel.tabs
    assert panel.selector in panel.children[-1].children
    lines = panel.header.value.split("</div><div")
    assert len(lines) <= LEAD_BUDGET
    kinds = [line.split('class="cd-', 2)[2].split('"', 1)[0] for line in lines[:1]]
    kinds += [line.split('class="cd-', 1)[1].split('"', 1)[0] for line in lines[1:]]
    assert kinds == ["headline", "noticed", "restart-line", "check", "next"], kinds


def test_filtering_by_family():
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB")
    panel = Panel(store=store)
    assert panel.family.options == ("all families", "device_assert", "oom")
    panel.family.value = "device_assert"
    assert [value for _, value in panel.selector.options] == [made[0].id]
    assert panel.incident.id == made[0].id


def test_report_button_shows_the_markdown_report():
    store, made = _store_with("CUDA error: device-side assert triggered")
    panel = Panel(made[0], store=store)
    panel.copy.click()
    first, _, report = panel.report.value.partition("\n\n")
    assert first == f"**cudadiag incident** `{made[0].id}` (2026-12-02 10:00, In[1])"
    assert report.startswith("## device_assert: Device-side assertion")
    assert panel.report.layout.display == "block"


def test_choosing_another_incident_closes_the_report_of_the_one_shown_before():
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB")
    panel = Panel(store=store)
    panel.copy.click()
    assert made[1].id in panel.report.value

    panel.selector.value = made[0].id

    assert panel.incident.id == made[0].id
    assert panel.report.value == "" and panel.report.layout.display == "none"
    panel.copy.click()
    assert panel.report.value.startswith(f"**cudadiag incident** `{made[0].id}`")
    assert "device_assert" in panel.report.value and "oom" not in panel.report.value


def test_rerun_and_export_need_a_kernel():
    store, made = _store_with("CUDA error: device-side assert triggered")
    panel = Panel(made[0], store=store)  # no shell given
    assert panel.rerun.disabled and panel.export.disabled
    assert panel.export.description == "Export repro notebook"


def test_mime_bundle_carries_widget_html_and_text():
    store, made = _store_with("CUDA error: device-side assert triggered")
    bundle = Panel(store=store)._repr_mimebundle_()
    assert WIDGET in bundle
    assert 'class="cd-restart"' in bundle["text/html"]
    assert bundle["text/plain"].startswith(f"cudadiag [{made[0].id}]")


def test_an_empty_log_says_so():
    panel = Panel(store=IncidentStore())
    assert "no incident recorded yet" in panel.header.value
    assert panel._repr_mimebundle_()["text/plain"] == "cudadiag: no incident recorded yet"


def test_panel_magic_displays_the_panel(shell, capsys):
    shell.run_cell("raise RuntimeError('CUDA error: an illegal memory access was encountered')",
                   store_history=True)
    shell.run_cell("%cudadiag panel", store_history=True)
    out = capsys.readouterr().out
    assert "cudadiag [" in out and "Illegal memory access" in out


def _panel_on_a_bad_target(shell, tmp_path, monkeypatch):
    """A panel on the kernel incident of target 4 for 4 classes, run in tmp_path."""
    monkeypatch.chdir(tmp_path)
    shell.run_cell("import torch, torch.nn.functional as F", store_history=True)
    shell.run_cell("loss = F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))",
                   store_history=True)
    (kernel_incident,) = incidents()
    return Panel(kernel_incident, shell=shell), kernel_incident


@pytest.mark.slow
def test_panel_buttons_rerun_isolated_and_export(shell, tmp_path, monkeypatch):
    panel, _ = _panel_on_a_bad_target(shell, tmp_path, monkeypatch)
    assert not panel.rerun.disabled
    panel.rerun.click()
    assert panel.incident.run.mode == "isolated"  # the new incident is shown
    assert panel.incident.op.name == "aten::nll_loss_forward"
    assert panel.selector.options[0][1] == panel.incident.id
    panel.export.click()
    exported = tmp_path / f"repro-{panel.incident.id}.ipynb"
    assert exported.exists()
    assert nbformat.read(exported, as_version=4).metadata["cudadiag"]["reproduces"] is True


def test_the_first_tab_shows_the_failing_statement_in_its_loop(shell):
    shell.run_cell("import torch", store_history=True)
    shell.run_cell("for step in range(4):\n    torch.zeros(2)[torch.tensor([step])]",
                   store_history=True)
    assert len(incidents()) == 1
    panel = Panel(store=IncidentStore())
    assert "loop: step=2 (In[" in panel.header.value
    first_tab = panel.tabs.children[0].value
    assert "<pre># In[" in first_tab
    assert "for step in range(4):  # step=2" in first_tab


def test_the_selector_says_what_failed_and_pages_only_when_there_is_more_than_a_page():
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB")
    panel = Panel(store=store)
    labels = [label for label, _ in panel.selector.options]
    assert labels[0].startswith("12-02 10:00  In[2]  oom: ") and "2.00 GiB" in labels[0]
    assert labels[1].startswith("12-02 10:00  In[1]  device_assert: device-side assert")
    assert all(made[0].id not in label for label in labels)  # words, not ids
    assert panel.newer.layout.display == panel.older.layout.display == "none"


def test_the_selector_drops_only_the_familys_own_title_from_what_failed():
    store, _ = _store_with("Torch not compiled with CUDA enabled",
                           "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                           "unhandled system error, NCCL version 2.14.3")
    nccl, build = [label for label, _ in Panel(store=store).selector.options]
    # a pitfall's title says what failed: it stays (the family is `driver`)
    assert build.startswith("12-02 10:00  In[1]  driver: This PyTorch is a build without CUDA")
    # the family's title goes; a colon in the error's own words stays
    assert nccl.startswith("12-02 10:00  In[2]  distributed: NCCL error in: ../torch/csrc/")


def test_every_tab_is_as_high_as_the_others_and_nothing_shows_none(shell):
    from scenarios import fail_with_device_assert

    fail_with_device_assert(shell)
    panel = Panel(store=IncidentStore())
    assert {tab.layout.height for tab in panel.tabs.children} == {"32em"}
    assert all(tab.layout.overflow == "auto" for tab in panel.tabs.children)
    environment = panel.tabs.children[panel.tabs.titles.index("Environment")].value
    assert "None" not in environment, environment
    import torch

    built_for = (f"CUDA {torch.version.cuda}" if torch.version.cuda  # a CUDA build, no device
                 else "this build has no CUDA, HIP or cuDNN")
    assert built_for in environment, environment


@pytest.mark.slow
@pytest.mark.isolates
def test_the_first_error_tab_is_a_grid_with_the_half_open_range(shell):
    from scenarios import fail_with_device_assert

    fail_with_device_assert(shell)
    shell.run_cell("%cuda_isolate", store_history=True)
    panel = Panel(store=IncidentStore())  # the newest: the isolated run
    first = panel.tabs.children[0].value
    grid = first.split('class="cd-grid"', 1)[1]
    assert "<div>[0, 4)</div>" in grid and "valid_range" in grid
    assert "valid_range: " not in first  # not a key: value dump


def test_changing_the_filter_leaves_the_incident_shown_and_its_report_alone():
    """Refilling the selector (a filter, a page) does not pass through another incident: the
    lead never shows one, and the report box of the incident still shown stays open."""
    store, made = _store_with("CUDA error: device-side assert triggered",
                              "CUDA out of memory. Tried to allocate 2.00 GiB",
                              "CUDA error: an illegal memory access was encountered")
    panel = Panel(made[0], store=store)
    panel.copy.click()
    leads = []
    panel.header.observe(lambda change: leads.append(change["new"]), names="value")
    panel.family.value = "device_assert"
    panel.family.value = ALL_FAMILIES
    assert leads == [] and panel.incident.id == made[0].id
    assert f"`{made[0].id}`" in panel.report.value and panel.report.layout.display == "block"
    panel.family.value = "oom"  # the incident shown is filtered out: the filter's first shows
    assert [made[1].id in lead for lead in leads] == [True]
    assert panel.report.value == "" and panel.report.layout.display == "none"


@pytest.mark.slow
def test_a_rerun_that_shows_its_new_incident_closes_the_report_of_the_one_before(
        shell, tmp_path, monkeypatch):
    panel, kernel_incident = _panel_on_a_bad_target(shell, tmp_path, monkeypatch)
    panel.copy.click()
    assert f"`{kernel_incident.id}`" in panel.report.value
    panel.rerun.click()
    assert panel.incident.run.mode == "isolated"  # the new incident is shown
    assert kernel_incident.id not in panel.report.value
    assert panel.report.layout.display == "none" or f"`{panel.incident.id}`" in panel.report.value
