"""The journey in real kernels through nbclient: a cell fails, %cuda_isolate, %cuda_compare
and %cudadiag validate name the failure; after a restart and a data fix, %cuda_compare
--before says "failed before, passes now" and validate's counts match."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from cudadiag import incidents

pytestmark = pytest.mark.slow

SETUP = ("import torch\nimport torch.nn.functional as F\n"
         "from torch.utils.data import DataLoader, TensorDataset\nimport cudadiag\n"
         "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
DATA = ("labels = torch.tensor([i % 4 for i in range(30)])\n"
        "labels[24:] = torch.tensor([0, 1, {bad}, 2, 3, 1])\n"
        "loader = DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8)\n"
        "model = torch.nn.Linear(8, 4)")
LOOP = ("for features, target in cudadiag.watch(loader, name='train'):\n"
        "    loss = F.cross_entropy(model(features), target)\n    print('loss', loss.item())")


def execute(*sources: str) -> list[nbformat.NotebookNode]:
    """Run the cells in a fresh kernel; return the executed cells."""
    nb = new_notebook(cells=[new_code_cell(s) for s in ("%load_ext cudadiag", *sources)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    return nb.cells[1:]


def shown(cell: nbformat.NotebookNode) -> str:
    """What the cell showed: its streams and the text of its results."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def test_compare_validate_and_the_fix_check_across_a_restart(cudadiag_home):
    cells = execute(SETUP, DATA.format(bad=4), LOOP, "%cuda_isolate",
                    "%cuda_compare --variants cpu", "%cudadiag validate")
    compare, validate = cells[-2], cells[-1]
    assert "reference  failed: device_assert at aten::nll_loss_forward" in shown(compare)
    assert "cpu        failed: index_out_of_bounds" in shown(compare)
    html = next(o for o in compare.outputs if o.output_type == "execute_result").data
    assert '<div class="cudadiag-compare"' in html["text/html"]
    assert "fails at step 3: device_assert at aten::nll_loss_forward; 24 of 30 samples" \
        in shown(validate)
    (isolated,) = [i for i in incidents() if i.run.mode == "isolated"]

    cells = execute(SETUP, DATA.format(bad=3), LOOP, f"%cuda_compare --before {isolated.id}",
                    "%cudadiag validate")  # a new kernel: the restart, then the data fix
    check, validate = cells[-2], cells[-1]
    assert f"Fix check for incident {isolated.id}\n  failed before, passes now" in shown(check)
    assert "every chosen step passes: 30 of 30 samples processed" in shown(validate)
