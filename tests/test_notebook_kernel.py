"""The demo notebook in a real ipykernel through nbclient: capture, warning, restart."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from cudadiag import incidents

DEMO = Path(__file__).parent.parent / "notebooks" / "device_assert_demo.ipynb"
pytestmark = pytest.mark.slow


def _execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return nb


def _code_cell(nb: nbformat.NotebookNode, startswith: str) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(startswith)]
    return cell


def _stream(cell: nbformat.NotebookNode, name: str) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == name)


def test_demo_notebook_captures_the_first_error_and_warns_later_cells():
    nb = _execute(nbformat.read(DEMO, as_version=4))
    failing = _code_cell(nb, 'print("loss"')
    (error,) = [o for o in failing.outputs if o.output_type == "error"]
    assert "device-side assert triggered" in error.evalue

    (incident,) = incidents()
    d = incident.diagnosis
    assert d.family == "device_assert" and d.sticky and d.asynchronous
    assert incident.run.mode == "kernel" and incident.run.simulated
    assert incident.run.cells == [failing.execution_count]
    assert incident.error.reported_at.cell == failing.execution_count
    assert incident.error.reported_at.source.startswith('print("loss", loss.item())')
    # the kernel's assertion line reached the incident through ipykernel's forwarding
    assert d.details["assertion"] == "t >= 0 && t < n_classes"

    note = _stream(failing, "stderr")
    assert f"cudadiag [{incident.id}]" in note
    assert f"reported at In[{failing.execution_count}], line 1" in note
    assert "an observation point, not necessarily the cause" in note

    later = _code_cell(nb, "y = torch.ones")
    assert _stream(later, "stderr").startswith(
        f"cudadiag: the CUDA context (simulated) has been unusable since "
        f"In[{failing.execution_count}]")
    assert [x.cell for x in incidents()[0].error.later] == [later.execution_count]

    listing = _stream(_code_cell(nb, "%cudadiag incidents"), "stdout")
    assert incident.id in listing and "device_assert" in listing


def test_incident_is_still_listed_after_a_kernel_restart():
    _execute(nbformat.read(DEMO, as_version=4))
    (incident,) = incidents()
    fresh = new_notebook(cells=[new_code_cell("%load_ext cudadiag"),
                                new_code_cell("%cudadiag incidents")])
    fresh.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    listing = _stream(_execute(fresh).cells[1], "stdout")
    assert incident.id in listing and "device_assert" in listing
