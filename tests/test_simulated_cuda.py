"""cudadiag.testing.simulated_cuda: CUDA's asynchronous, sticky device asserts on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify
from cudadiag.testing import is_poisoned, simulated_cuda


def _bad_loss() -> torch.Tensor:
    return F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))


@pytest.mark.parametrize("sync", [
    lambda t: t.item(), lambda t: t.tolist(), lambda t: t.cpu(), lambda t: print(t),
    lambda t: t.to("cpu"), lambda t: t.numpy(), lambda t: float(t),
], ids=["item", "tolist", "cpu", "print", "to_cpu", "numpy", "float"])
def test_device_assert_surfaces_at_the_next_synchronising_op(sync):
    with simulated_cuda():
        loss = _bad_loss()  # no error here: the kernel only queued
        doubled = loss * 2  # nor here
        with pytest.raises(RuntimeError) as raised:
            sync(doubled)
    exc = raised.value
    assert isinstance(exc, torch.AcceleratorError) and exc.error_code == 710
    assert exc.simulated is True
    assert str(exc).startswith("CUDA error: device-side assert triggered")
    assert "might be asynchronously reported" in str(exc)
    assert classify(exc).family == "device_assert" and classify(exc).sticky


def test_assertion_line_goes_to_the_stderr_file_descriptor(capfd):
    with simulated_cuda():
        _bad_loss()
    err = capfd.readouterr().err
    assert ("Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
            "thread: [2,0,0] Assertion `t >= 0 && t < n_classes` failed.") in err


def test_blocking_launches_raise_at_the_faulty_op(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    with simulated_cuda(), pytest.raises(RuntimeError) as raised:
        _bad_loss()
    assert "might be asynchronously reported" not in str(raised.value)
    assert raised.value.__traceback__ is not None


def test_after_the_fault_every_op_fails_until_the_process_ends():
    with simulated_cuda():
        loss = _bad_loss()
        with pytest.raises(RuntimeError):
            loss.item()
        with pytest.raises(RuntimeError, match="device-side assert triggered"):
            torch.ones(2) + 1
    assert is_poisoned()
    with simulated_cuda(), pytest.raises(RuntimeError, match="device-side assert"):
        torch.zeros(1).sum()
    assert torch.ones(2).sum().item() == 2.0  # plain CPU tensors outside the simulator


def test_valid_targets_and_ignore_index_do_not_fault():
    with simulated_cuda():
        loss = F.cross_entropy(torch.randn(3, 4), torch.tensor([0, -100, 3]))
        assert loss.item() == loss.item()
    assert not is_poisoned()


@pytest.mark.parametrize("call", [
    lambda: F.embedding(torch.tensor([1, 7]), torch.randn(5, 3)),
    lambda: torch.randn(5, 3).index_select(0, torch.tensor([0, 5])),
    lambda: torch.randn(2, 3).gather(1, torch.tensor([[0], [3]])),
    lambda: torch.randn(4)[torch.tensor([1, 9])],
], ids=["embedding", "index_select", "gather", "advanced_index"])
def test_index_contracts_fault_like_cuda(call):
    with simulated_cuda():
        out = call()  # the CPU would raise here; the simulated device does not
        with pytest.raises(RuntimeError, match="device-side assert triggered"):
            out.sum().item()


def test_decorator_form():
    @simulated_cuda()
    def step():
        return _bad_loss().item()

    with pytest.raises(RuntimeError, match="device-side assert"):
        step()


def test_memory_budget_raises_the_allocator_message():
    with simulated_cuda(memory_budget="1 MiB"):
        kept = torch.empty(100_000)  # 400 KB
        with pytest.raises(torch.OutOfMemoryError) as raised:
            torch.empty(300_000)
    assert kept.numel() == 100_000
    text = str(raised.value)
    assert text.startswith("CUDA out of memory. Tried to allocate 1.14 MiB. GPU 0 has a total "
                           "capacity of 1.00 MiB of which 633.38 KiB is free.")
    d = classify(raised.value)
    assert d.family == "oom" and not d.sticky and d.details["requested"] == "1.14 MiB"
    assert raised.value.simulated is True


def test_freed_memory_is_available_again():
    with simulated_cuda(memory_budget=1_000_000):
        for _ in range(10):
            torch.empty(200_000)  # 800 KB each, dropped at once


def test_bad_budget_is_a_clear_error():
    with pytest.raises(ValueError, match="not a size"):
        simulated_cuda(memory_budget="lots")


def test_tensor_methods_are_restored_on_exit():
    before = torch.Tensor.tolist
    with simulated_cuda():
        assert torch.Tensor.tolist is not before
    assert torch.Tensor.tolist is before and "tolist" not in torch.Tensor.__dict__
