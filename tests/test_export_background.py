"""%cudadiag export in a real notebook kernel (nbclient): the minimization runs in the
background, the kernel stays usable, the progress bar and the result land in the export
cell; a training loop on unseeded random minibatches is cut to its failing iteration."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
CELLS = [
    "%load_ext cudadiag",
    "import torch, torch.nn.functional as F",
    "X = torch.randn(20000, 8)\nY = torch.randint(0, 4, (20000,))\n"
    "Y[12345] = 4  # one label too large",
    "model = torch.nn.Linear(8, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "notes = ['an unrelated cell']",
    "for i in range(20000):\n"
    "    ix = torch.randint(0, X.shape[0], (32,))  # unseeded random minibatch\n"
    "    loss = F.cross_entropy(model(X[ix]), Y[ix])\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
    "    optimizer.step()",
    "%cudadiag export repro.ipynb",
    "import threading\n"
    "exporting = [t for t in threading.enumerate() if t.name == 'cudadiag export']\n"
    "print('export still running:', bool(exporting) and exporting[0].is_alive())",
    "for thread in exporting:\n    thread.join()\nprint('failed at', i)",
]


def _widget_states(nb) -> list[dict]:
    return [m["state"] for m in nb.metadata["widgets"][WIDGET_STATE]["state"].values()]


def test_export_runs_in_the_background_and_cuts_the_loop(tmp_path):
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    export_cell, other_cell, wait_cell = nb.cells[6], nb.cells[7], nb.cells[8]
    assert [o.output_type for o in export_cell.outputs] == ["display_data"]
    assert "export still running: True" in other_cell.outputs[0].text
    waited = "".join(o.get("text", "") for o in wait_cell.outputs)
    assert re.search(r"failed at (\d+)", waited), wait_cell.outputs
    failed_at = int(re.search(r"failed at (\d+)", waited).group(1))

    states = _widget_states(nb)
    (bar,) = [s for s in states if s.get("_model_name") == "IntProgressModel"]
    (result,) = [s["value"] for s in states if s.get("_model_name") == "HTMLModel"
                 and re.search("cudadiag (repro|export)", s["value"])]
    assert bar["bar_style"] == "success" and bar["value"] == bar["max"]
    assert "reproduces: yes" in result, result
    assert f"loop cut to i: only {failed_at}, from its random states" in result
    seconds = float(re.search(r"trials in ([\d.]+) s", result).group(1))
    assert seconds <= 65  # the default budget is 60 s; a trial never runs past it

    printed = [o.get("text", "") for c in nb.cells for o in c.outputs]
    assert not any("without encryption" in text for text in printed)  # verifier's kernel

    repro = nbformat.read(tmp_path / "repro.ipynb", as_version=4)
    code = "\n".join(c.source for c in repro.cells if c.cell_type == "code")
    assert f"for i in range({failed_at}, {failed_at + 1}):" in code
    assert "notes = " not in code
