"""The demo notebook in a real ipykernel through nbclient: capture, panel, warning, isolated
re-run, restart."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from cudadiag import incidents

DEMO = Path(__file__).parent.parent / "notebooks" / "device_assert_demo.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"
pytestmark = pytest.mark.slow


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True).execute()
    return nb


def code_cell(nb: nbformat.NotebookNode, startswith: str) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(startswith)]
    return cell


def stream(cell: nbformat.NotebookNode, name: str) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == name)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo notebook, executed once, with its own incident log."""
    home = tmp_path_factory.mktemp("demo-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDADIAG_HOME", str(home))
        nb = execute(nbformat.read(DEMO, as_version=4))
        found = incidents()
    return nb, found, home


def test_the_first_error_is_the_incident_with_its_batch(demo):
    nb, found, _ = demo
    failing = code_cell(nb, "for features, target in cudadiag.watch")
    (error,) = [o for o in failing.outputs if o.output_type == "error"]
    assert "device-side assert triggered" in error.evalue
    kernel = [i for i in found if i.run.mode == "kernel"]
    (incident,) = kernel
    d = incident.diagnosis
    assert d.family == "device_assert" and d.sticky and d.asynchronous
    assert incident.run.simulated and incident.run.cells == [failing.execution_count]
    assert incident.error.reported_at.cell == failing.execution_count
    assert incident.error.reported_at.source.startswith('print("loss", loss.item())')
    # the kernel's assertion line reached the incident through the process's fd 2
    assert d.details["assertion"] == "t >= 0 && t < n_classes"
    assert (incident.step.iteration, incident.step.last_incomplete) == (3, True)
    assert incident.batch.indices == [24, 25, 26, 27, 28, 29]


def test_the_panel_is_displayed_with_static_fallbacks(demo):
    nb, _, _ = demo
    failing = code_cell(nb, "for features, target in cudadiag.watch")
    (panel,) = [o for o in failing.outputs if o.output_type == "display_data"]
    assert WIDGET in panel.data
    html = panel.data["text/html"]
    assert "device_assert" in html
    assert 'class="cd-restart"' in html and "Restart required" in html
    assert 'class="cd-batch-table"' in html and "batch[1]" in html
    assert "last incomplete batch" in html
    assert "noticed (not necessarily the cause) at" in html
    assert panel.data["text/plain"].startswith("cudadiag [")


def test_later_cells_are_warned(demo):
    nb, found, _ = demo
    failing = code_cell(nb, "for features, target in cudadiag.watch")
    later = code_cell(nb, "y = torch.ones")
    assert stream(later, "stderr").startswith(
        f"cudadiag: the CUDA context (simulated) has been unusable since "
        f"In[{failing.execution_count}]")
    kernel = next(i for i in found if i.run.mode == "kernel")
    assert later.execution_count in [x.cell for x in kernel.error.later]


def test_the_isolated_rerun_names_op_value_and_position(demo):
    nb, found, _ = demo
    rerun = code_cell(nb, "%cuda_isolate --batch last")
    out = stream(rerun, "stdout")
    assert "replaying step 3 of watch 'train' only" in out
    (isolated,) = [i for i in found if i.run.mode == "isolated"]
    assert isolated.op.precheck.startswith("aten::nll_loss_forward: target 4 at position 2")
    assert isolated.run.batch_replay == 3
    listing = stream(code_cell(nb, "%cudadiag incidents"), "stdout")
    assert isolated.id in listing


def test_incidents_are_still_listed_after_a_kernel_restart(demo, monkeypatch):
    _, found, home = demo
    monkeypatch.setenv("CUDADIAG_HOME", str(home))
    fresh = new_notebook(cells=[new_code_cell("%load_ext cudadiag"),
                                new_code_cell("%cudadiag incidents")])
    fresh.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    listing = stream(execute(fresh).cells[1], "stdout")
    assert all(i.id in listing for i in found)


def test_nbconvert_html_shows_the_readable_fallback(tmp_path, monkeypatch):
    """A notebook saved without widget state (JupyterLab's default) converts to the panel's
    HTML fallback, not to an empty widget placeholder."""
    import subprocess
    import sys

    monkeypatch.setenv("CUDADIAG_HOME", str(tmp_path / "home"))
    nb = nbformat.read(DEMO, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True,
                   store_widget_state=False).execute()
    executed = tmp_path / "demo.ipynb"
    nbformat.write(nb, executed)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html",
                    str(executed)], check=True, capture_output=True)
    page = (tmp_path / "demo.html").read_text()
    # rendered markup (inside widget state it would be JSON with escaped quotes)
    assert '<div class="cudadiag-report"' in page
    assert '<div class="cd-restart"' in page and '<table class="cd-batch-table">' in page
    assert "device_assert" in page
