"""Cells shared by the tests that drive a real IPython shell: the method's worked example."""

from __future__ import annotations

from typing import Any

SETUP = (
    "import torch, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()"
)
MODEL = (
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(8, 4)\n"
    "x = torch.randn(3, 8)\n"
    "target = torch.tensor([0, 2, 4])\n"
    "loss = F.cross_entropy(model(x), target)"
)


def run(shell: Any, source: str) -> tuple[Any, int]:
    """Run one cell the way a notebook does; return (result, its execution count)."""
    count = len(shell.user_ns["In"])
    return shell.run_cell(source, store_history=True), count


def fail_with_device_assert(shell: Any) -> int:
    """Run the method's worked example until its device-side assert surfaces; return the cell where
    it did."""
    run(shell, SETUP)
    run(shell, MODEL)
    result, cell = run(shell, "print('loss', loss.item())")
    assert result.error_in_exec is not None
    return cell

# A label 4 among 4 classes at dataset index 27, on plain CPU tensors (no device to poison):
# the training loop fails at its last step; the user fixes the label and re-runs the loop.
WALK_SETUP = ("import torch\nimport torch.nn.functional as F\n"
              "from torch.utils.data import DataLoader, TensorDataset\nimport cudadiag")
WALK_DATA = ("torch.manual_seed(0)\nxl = torch.randn(30, 8)\n"
             "yl = torch.tensor([i % 4 for i in range(30)])\nyl[27] = 4\n"
             "loader = DataLoader(TensorDataset(xl, yl), batch_size=8)\n"
             "model = torch.nn.Linear(8, 4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)")
WALK_LOOP = ("for features, target in cudadiag.watch(loader, name='train'):\n"
             "    loss = F.cross_entropy(model(features), target)\n"
             "    opt.zero_grad()\n    loss.backward()\n    opt.step()")
WALK_FIX = "yl[27] = 3\nloader = DataLoader(TensorDataset(xl, yl), batch_size=8)"


def fail_fix_rerun(shell: Any) -> tuple[int, int]:
    """Run the walk: the loop fails, the data is fixed, the loop is re-run; return the
    numbers of the failed loop cell and of its re-run."""
    run(shell, WALK_SETUP)
    run(shell, WALK_DATA)
    result, failed = run(shell, WALK_LOOP)
    assert result.error_in_exec is not None
    run(shell, WALK_FIX)
    result, rerun = run(shell, WALK_LOOP)
    assert result.error_in_exec is None
    return failed, rerun


GUIDE_SCRIPT = "\n".join([SETUP, MODEL, "print('loss', loss.item())", ""])
"""The method's worked example as a script (`cudadiag run -- python guide.py`)."""


def unwrapped(text: str) -> str:
    """The text cudadiag prints under a cell with each of its wrapped lines joined again
    (render.LEAD_WIDTH columns; a continuation is indented 4 more spaces than its line)."""
    import re

    return re.sub(r"\n {4,}", " ", text)
