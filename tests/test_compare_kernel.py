"""The journey in real kernels through nbclient: a cell fails, %cuda_isolate, %cuda_compare
and %cudadiag validate name the failure; after a data fix (across a restart, or in the same
kernel with the loop re-run), %cuda_compare --before says "failed before, passes now" and
validate's counts match."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from cudadiag import incidents
from scenarios import WALK_DATA, WALK_FIX, WALK_LOOP, WALK_SETUP

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
    # one output per command: the table took the place of the plan and the progress lines
    assert [o.output_type for o in compare.outputs] == ["display_data"], compare.outputs
    assert [o.output_type for o in validate.outputs] == ["display_data"], validate.outputs
    html = compare.outputs[0].data
    assert '<div class="cudadiag-compare"' in html["text/html"]
    assert "plan:" not in shown(compare) and "has been unusable since" not in shown(compare)
    assert 'style="text-align: right; white-space: nowrap; padding: 1px 8px">' in (
        html["text/html"])  # the wall time
    assert "fails at step 3: device_assert at aten::nll_loss_forward; 24 of 30 samples" \
        in shown(validate)
    (isolated,) = [i for i in incidents() if i.run.mode == "isolated"]

    cells = execute(SETUP, DATA.format(bad=3), LOOP, f"%cuda_compare --before {isolated.id}",
                    "%cudadiag validate")  # a new kernel: the restart, then the data fix
    check, validate = cells[-2], cells[-1]
    assert f"Fix check for incident {isolated.id}\n  failed before, passes now" in shown(check)
    assert "every chosen step passes: 30 of 30 samples processed" in shown(validate)


def test_fail_fix_re_run_then_validate_and_the_fix_check_judge_the_re_run(cudadiag_home):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True)

    def execute_one(source: str) -> nbformat.NotebookNode:
        nb.cells.append(new_code_cell(source))
        return client.execute_cell(nb.cells[-1], len(nb.cells) - 1)

    with client.setup_kernel():
        for source in ("%load_ext cudadiag", WALK_SETUP, WALK_DATA):
            execute_one(source)
        failed = execute_one(WALK_LOOP)  # In[4]: a label 4 among 4 classes at index 27
        assert any(o.output_type == "error" for o in failed.outputs)
        execute_one(WALK_FIX)  # In[5]: yl[27] = 3, a new loader
        assert not any(o.output_type == "error" for o in execute_one(WALK_LOOP).outputs)
        validate = shown(execute_one("%cudadiag validate 6 --all"))
        (kernel,) = incidents()
        check = shown(execute_one(f"%cuda_compare --before {kernel.id}"))
    assert "every chosen step passes: 30 of 30 samples processed" in validate
    assert f"Fix check for incident {kernel.id}\n  failed before, passes now" in check
    assert "In[4] as recorded, then In[6] as it is now, step 3 only" in check
    # the plan ("not replayed: In[4] failed in this session") stood while the run went; the
    # report took its place: the re-run cell, not the failed one, is validated
    assert validate.startswith("Validate In[6] over every step of watch 'train'")
