"""cudadiag.testing.simulated_cuda: CUDA's asynchronous, sticky device asserts on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify, incidents
from cudadiag.testing import is_poisoned, simulated_cuda
from scenarios import MODEL, SETUP, run


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


def _embedding_then_loss(bad_id: int, bad_target: int) -> torch.Tensor:
    weight = torch.randn(5, 3, requires_grad=True)
    features = F.embedding(torch.tensor([[1, bad_id], [2, 0]]), weight).mean(1)
    return F.cross_entropy(features, torch.tensor([0, bad_target]))


def test_a_second_violation_while_the_assert_is_pending_stays_on_the_device(capfd):
    with simulated_cuda():
        loss = _embedding_then_loss(bad_id=5, bad_target=3)  # two broken contracts
        loss.backward()  # nll_loss_backward and embedding_dense_backward meet them again
        with pytest.raises(RuntimeError) as raised:
            loss.item()
    assert type(raised.value).__name__ == "SimulatedAcceleratorError"
    assert raised.value.violation.op == "embedding"  # the first kernel that asserted
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "Assertion" in ln]
    assert lines == ["/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422: "
                     "indexSelectLargeIndex: block: [0,0,0], thread: [1,0,0] "
                     "Assertion `srcIndex < srcSelectDimSize` failed."]


def test_with_blocking_launches_the_first_violation_raises_and_the_second_never_runs(
        monkeypatch, capfd):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    with simulated_cuda(), pytest.raises(RuntimeError) as raised:
        _embedding_then_loss(bad_id=5, bad_target=3)
    assert raised.value.violation.op == "embedding"
    assert "Loss.cu" not in capfd.readouterr().err


def test_a_training_step_with_bad_targets_fails_with_the_device_assert_in_the_kernel(shell):
    # pytest re-points fds 1/2 between the setup and call phases: load again inside the test.
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, SETUP)
    run(shell, "torch.manual_seed(0)\n"
               "model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(),\n"
               "                            torch.nn.Linear(16, 10))\n"
               "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
               "ids = torch.randint(0, 50, (32, 2)); ids[21, 1] = 50\n"
               "labels = torch.randint(0, 10, (32,)); labels[27] = 10")
    # The bad token id is in the third batch, the bad target in the fourth: the second
    # violation (forward and backward) runs while the first assert is pending.
    result, cell = run(shell, "for start in range(0, 32, 8):\n"
                              "    loss = F.cross_entropy(model(ids[start:start + 8]),\n"
                              "                           labels[start:start + 8])\n"
                              "    opt.zero_grad(); loss.backward(); opt.step()\n"
                              "print(start, loss.item())")
    assert type(result.error_in_exec).__name__ == "SimulatedAcceleratorError"
    (incident,) = incidents()
    assert incident.error.type.endswith("SimulatedAcceleratorError")
    assert incident.diagnosis.family == "device_assert" and incident.run.simulated
    assert incident.diagnosis.details["kernel"] == "indexSelectLargeIndex"
    assert incident.error.reported_at.source == "print(start, loss.item())"
    assert incident.run.cells == [cell]


def test_an_error_raised_while_the_simulator_is_on_is_marked_simulated(shell):
    run(shell, SETUP)
    result, _ = run(shell, "torch.ones(2, 3) @ torch.ones(4, 5)")  # the CPU's own error
    assert result.error_in_exec is not None and not getattr(result.error_in_exec,
                                                             "simulated", False)
    (incident,) = incidents()
    assert incident.diagnosis.family == "shape_mismatch" and incident.run.simulated


@pytest.mark.slow
def test_export_of_an_isolated_incident_works_while_the_simulated_context_is_poisoned(
        shell, tmp_path, capsys):
    run(shell, SETUP)
    run(shell, MODEL)
    run(shell, "print('loss', loss.item())")
    assert is_poisoned()
    run(shell, "%cuda_isolate")
    isolated = incidents()[-1]
    assert isolated.run.mode == "isolated" and isolated.run.simulated
    path = tmp_path / "repro.ipynb"
    result, _ = run(shell, f"%cudadiag export {isolated.id} {path} --max-trials 2")
    assert result.error_in_exec is None, result.error_in_exec
    assert "reproduces: yes" in capsys.readouterr().out
    assert is_poisoned()  # the user's simulated context is as the export found it


def test_one_hot_takes_cudas_path_and_asserts_in_scatter(capfd):
    with simulated_cuda():
        assert F.one_hot(torch.tensor([1, 2]), 4).tolist() == [[0, 1, 0, 0], [0, 0, 1, 0]]
        out = F.one_hot(torch.tensor([1, 4]), num_classes=4)  # the CPU would raise here
        with pytest.raises(RuntimeError, match="device-side assert triggered") as raised:
            out.sum().item()
    assert raised.value.violation.op == "scatter_" and raised.value.violation.values == [4]
    assert "ScatterGatherKernel.cu:367: operator()" in capfd.readouterr().err


def test_code_written_for_a_gpu_runs_unchanged_and_fails_as_on_one():
    available_before = torch.cuda.is_available()
    with simulated_cuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.current_device() == 0
        assert "simulated" in torch.cuda.get_device_name(0)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(8, 4).to(device).cuda()
        x = torch.randn(3, 8, device=device)
        target = torch.tensor([0, 2, 4]).cuda()
        halves = torch.ones(2, device="cuda:0").to("cuda", torch.float64, non_blocking=True)
        assert halves.dtype == torch.float64 and x.device.type == "cpu"
        if hasattr(torch, "accelerator"):  # torch >= 2.6: the device-agnostic API
            assert torch.accelerator.current_accelerator().type == "cuda"
            assert not torch.accelerator.current_stream().is_capturing()
        opt = torch.optim.Adam(model.parameters())  # its step asks for the current stream
        F.cross_entropy(model(x), torch.tensor([0, 2, 3]).cuda()).backward()
        opt.step()
        loss = F.cross_entropy(model(x), target)
        with pytest.raises(RuntimeError) as raised:
            torch.cuda.synchronize()
    assert str(raised.value).startswith("CUDA error: device-side assert triggered")
    assert loss.device.type == "cpu"
    assert torch.cuda.is_available() is available_before  # restored at exit
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1).cuda()
