"""What an executed notebook keeps (nbclient, as nbconvert --execute and papermill run it):
the restart reminder before the cell's own output, and an export's outcome in the static
form of its progress widget."""

from __future__ import annotations

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from scenarios import MODEL, SETUP

pytestmark = pytest.mark.slow
WIDGET = "application/vnd.jupyter.widget-view+json"
SPEAKS = ("import sys\nprint('the cell speaks on stdout', flush=True)\n"
          "print('and on stderr', file=sys.stderr, flush=True)\nprint('and stdout again')")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """A notebook that fails with a (simulated) device assert, runs one more cell that
    prints on both streams, re-runs the failure isolated and exports it with --wait."""
    folder = tmp_path_factory.mktemp("notebook")
    cells = ["%load_ext cudadiag", SETUP, MODEL + "\nloss.item()", SPEAKS, "%cuda_isolate",
             "%cudadiag export repro.ipynb --wait"]
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDADIAG_HOME", str(folder / "home"))
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(folder)}}).execute()
    return nb, folder


def test_the_restart_reminder_is_stored_before_the_cells_own_output(executed):
    nb, _ = executed
    outputs = nb.cells[3].outputs
    texts = [(o.name, o.text) for o in outputs if o.output_type == "stream"]
    assert len(texts) == len(outputs), outputs
    assert texts[0][0] == "stderr" and texts[0][1].startswith(
        "cudadiag: the CUDA context (simulated) has been unusable since In[3] "
        "(device_assert); restart the kernel")
    spoken = "".join(text for _, text in texts[1:])
    assert "the cell speaks on stdout" in spoken and "and on stderr" in spoken
    assert "restart the kernel" not in spoken


def test_an_export_with_wait_stores_its_outcome_not_an_empty_progress_bar(executed):
    nb, _ = executed
    (shown,) = [o for o in nb.cells[5].outputs if o.output_type == "display_data"]
    plain, page = shown.data["text/plain"], shown.data["text/html"]
    assert "VBox(" not in plain and "IntProgress" not in plain
    assert plain.startswith("cudadiag repro notebook: repro.ipynb\n"), plain
    assert "reproduces: yes" in plain and "reproduces: yes" in page
    assert WIDGET in shown.data  # live, it is still the widget
    printed = "".join(o.text for o in nb.cells[5].outputs if o.output_type == "stream")
    assert "reproduces: yes" not in printed  # said once, by the output that stays
