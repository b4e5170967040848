"""cudadiag's own tensor work runs outside the user's torch modes (own_work.py)."""

from __future__ import annotations

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from cudadiag import classify, summarize
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.own_work import outside_user_modes
from cudadiag.repro.minimize import Signature
from cudadiag.repro.notebook import export_notebook
from cudadiag.testing import SimulatedAcceleratorError, is_poisoned, simulated_cuda


class Counting(TorchDispatchMode):
    """A user's mode that counts the operators it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen += 1
        return func(*args, **(kwargs or {}))


def _poison() -> None:
    F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4])).item()


def test_cudadiag_loads_its_files_while_the_simulated_context_is_poisoned(tmp_path):
    path, state = tmp_path / "rng.pt", torch.get_rng_state()
    torch.save({3: {"torch": state}}, path)
    with simulated_cuda():
        with pytest.raises(SimulatedAcceleratorError):
            _poison()
        with pytest.raises(SimulatedAcceleratorError):
            torch.load(path, weights_only=False)  # the user's own load fails, as on a GPU
        with outside_user_modes():
            states = torch.load(path, weights_only=False)
        assert is_poisoned()
    assert torch.equal(states[3]["torch"], state)


def test_a_repro_notebook_with_a_batch_is_written_on_a_poisoned_simulated_device(tmp_path):
    batch = {"ids": torch.tensor([[1, 7], [2, 0]]), "x": torch.randn(2, 3)}
    message = "CUDA error: device-side assert triggered"
    incident = Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                        diagnosis=classify(message), run=RunInfo(mode="isolated"))
    with simulated_cuda():
        with pytest.raises(SimulatedAcceleratorError):
            _poison()
        result = export_notebook(incident, tmp_path / "r.ipynb", {1: "pass"},
                                 signature=Signature.of(incident), batch=(4, batch),
                                 rng_states={1: {"torch": torch.get_rng_state()}},
                                 verify=False)
    cells = [c.source for c in nbformat.read(result.path, as_version=4).cells]
    assert any("torch.tensor([1, 7, 2, 0], dtype=torch.int64)" in c for c in cells)
    assert (tmp_path / "r.rng.pt").exists()


def test_summaries_are_invisible_to_a_users_mode():
    batch = {"ids": torch.tensor([3, 1, 2])}
    with Counting() as mode:
        summary = summarize(batch)
        assert mode.seen == 0
        torch.ones(2) + 1
    assert mode.seen > 0 and summary.tensor("batch['ids']").max == 3


def test_a_users_default_device_does_not_move_cudadiags_tensors():
    with torch.device("meta"):
        assert torch.zeros(1).device.type == "meta"
        with outside_user_modes():
            assert torch.zeros(1).device.type == "cpu"
        assert torch.zeros(1).device.type == "meta"


def test_the_users_modes_are_back_in_order_when_the_block_raises():
    with Counting() as outer, Counting() as inner:
        before = _get_current_dispatch_mode_stack()
        with pytest.raises(ValueError), outside_user_modes():
            assert _get_current_dispatch_mode_stack() == []
            raise ValueError("inside")
        assert _get_current_dispatch_mode_stack() == before == [outer, inner]
