"""Cells shared by the tests that drive a real IPython shell: the guide's example."""

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
    """Run the guide's example until its device-side assert surfaces; return the cell where
    it did."""
    run(shell, SETUP)
    run(shell, MODEL)
    result, cell = run(shell, "print('loss', loss.item())")
    assert result.error_in_exec is not None
    return cell


GUIDE_SCRIPT = "\n".join([SETUP, MODEL, "print('loss', loss.item())", ""])
"""The guide's example as a script (`cudadiag run -- python guide.py`)."""
