"""The op tracer: ring buffer, the failing op with its arguments, index prechecks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify, trace_native
from cudadiag.testing import simulated_cuda
from cudadiag.trace import OpTracer, PrecheckError, prechecks_active


@pytest.fixture(scope="module")
def built():
    """The C++ tracer's extension, built here when it is not yet (about a minute, once)."""
    if trace_native.load() is None:
        trace_native.build()


@pytest.fixture(scope="module", params=["native", "dispatch mode"])
def native(request, built):
    """Each tracer: the C++ one and the Python dispatch mode."""
    return request.param == "native"


def test_records_recent_ops_with_argument_metadata(native):
    with OpTracer(keep=3, native=native) as tracer:
        a = torch.ones(4, 6)[:, ::2]
        (a * 2).sum()
        torch.cat([a, a])
    names = [c.name for c in tracer.recent]
    assert len(names) == 3 and names[-1] == "aten::cat"
    mul = next(c for c in tracer.recent if c.name == "aten::mul.Tensor")
    strided = mul.args[0]
    assert strided.shape == [4, 3] and strided.kind == "tensor"
    assert strided.dtype == "torch.float32" and strided.device == "cpu"
    assert mul.args[1].kind == "scalar" and mul.args[1].value == "2"
    assert tracer.recent[-1].args[0].value == "[torch.float32[4, 3], torch.float32[4, 3]]"
    assert tracer.native is False  # after exit: its calls stay readable


def test_both_tracers_record_the_same_training_step(built):
    def step(tracer_native):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
        with OpTracer(native=tracer_native) as tracer:
            loss = F.cross_entropy(model(torch.tensor([1, 2])), torch.tensor([0, 2]))
            loss.backward()
            assert tracer.native is tracer_native
        return tracer.recent

    # they differ only in autograd's and torch.tensor's bookkeeping: the detaches of saved
    # tensors (below autograd: the dispatch mode's), the new tensor's empty and detach_ (made
    # with dispatch modes off: the native tracer's)
    bookkeeping = {"aten::detach", "aten::detach_", "aten::empty.memory_format"}
    natively, in_python = step(True), step(False)
    assert [c for c in natively if c.name not in bookkeeping] == [
        c for c in in_python if c.name not in bookkeeping]
    names = [c.name for c in natively]
    assert "aten::nll_loss_forward" in names and "aten::embedding_dense_backward" in names


def test_a_call_of_an_operator_torn_down_before_the_ring_is_read_keeps_its_name(native):
    with OpTracer(keep=4, native=native) as tracer:
        library = torch.library.Library("cudadiag_test_gone", "DEF")
        library.define("twice(Tensor x) -> Tensor")
        library.impl("twice", lambda x: x * 2, "CPU")
        torch.ops.cudadiag_test_gone.twice(torch.ones(3))
        library._destroy()  # the operator and its schema are deregistered
    names = [c.name for c in tracer.recent]
    assert "cudadiag_test_gone::twice" in names, names
    gone = next(c for c in tracer.recent if c.name == "cudadiag_test_gone::twice")
    assert gone.args[0].shape == [3]


def test_the_failing_call_keeps_its_arguments_strides_and_contiguity(native):
    with pytest.raises(RuntimeError), OpTracer(precheck=False, native=native) as tracer:
        torch.ones(4, 6)[:, ::2] @ torch.ones(4, 5)
    strided = tracer.failed.args[0]
    assert strided.shape == [4, 3] and strided.stride == [6, 2] and strided.contiguous is False


def test_the_op_that_raises_is_named_with_its_arguments(native):
    with pytest.raises(RuntimeError), OpTracer(precheck=False, native=native) as tracer:
        torch.ones(2, 3) @ torch.ones(4, 5)
    assert tracer.failed.name == "aten::mm"
    assert [a.shape for a in tracer.failed.args] == [[2, 3], [4, 5]]
    assert tracer.failed.precheck is None


@pytest.mark.parametrize(("call", "op", "text"), [
    (lambda: F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4])), "nll_loss_forward",
     "aten::nll_loss_forward: target 4 at position 2 outside [0, 4) (ignore_index=-100)"),
    (lambda: F.cross_entropy(torch.randn(2, 3, 5, 5), torch.full((2, 5, 5), 3)),
     "nll_loss2d_forward", "aten::nll_loss2d_forward: target values [3, 3, 3, 3, 3, 3, 3, 3, 3, "
                           "3] at positions [(0, 0, 0), (0, 0, 1),"),
    (lambda: F.embedding(torch.tensor([[1, 2], [7, 0]]), torch.randn(5, 3)), "embedding",
     "aten::embedding: indices 7 at position (1, 0) outside [0, 5)"),
    (lambda: torch.randn(5, 3).index_select(0, torch.tensor([0, -1])), "index_select",
     "aten::index_select: index -1 at position 1 outside [0, 5)"),
    (lambda: torch.randn(2, 3).gather(1, torch.tensor([[0], [3]])), "gather",
     "aten::gather: index 3 at position (1, 0) outside [0, 3)"),
    (lambda: torch.zeros(2, 3).scatter_(1, torch.tensor([[5]]), 1.0), "scatter_",
     "aten::scatter_: index 5 at position (0, 0) outside [0, 3)"),
    (lambda: torch.randn(4)[torch.tensor([1, 9])], "index",
     "aten::index: indices 9 at position 1 outside [-4, 4)"),
    (lambda: torch.zeros(4).index_put_((torch.tensor([4]),), torch.tensor(1.0)), "index_put_",
     "aten::index_put_: indices 4 at position 0 outside [-4, 4)"),
])
def test_prechecks_name_op_argument_values_and_positions(call, op, text, native):
    with pytest.raises(PrecheckError) as raised, OpTracer(native=native) as tracer:
        call()
    assert str(raised.value).startswith(text)
    assert tracer.failed.name.startswith(f"aten::{op}")
    assert tracer.failed.precheck.startswith(text)
    assert classify(raised.value).family == "index_out_of_bounds"


def test_precheck_reads_values_before_the_kernel_and_says_what_cpu_raises():
    with pytest.raises(PrecheckError) as raised, OpTracer():
        F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))
    assert raised.value.violation.values == [4] and raised.value.violation.positions == [(2,)]
    assert "On the CPU this kernel raises: Target 4 is out of bounds." in str(raised.value)


def test_on_the_simulated_device_the_precheck_is_a_device_assert():
    with pytest.raises(PrecheckError) as raised, OpTracer(), simulated_cuda():
        F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))
    d = classify(raised.value)
    assert d.family == "device_assert" and d.sticky
    assert raised.value.simulated


def test_without_precheck_the_kernel_runs_and_its_own_error_is_recorded(native):
    with pytest.raises(IndexError, match="Target 4 is out of bounds") as raised, \
            OpTracer(precheck=False, native=native) as tracer:
        F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))
    assert not isinstance(raised.value, PrecheckError)
    assert tracer.failed.name == "aten::nll_loss_forward"
    target = tracer.failed.args[1]
    assert target.name == "target" and target.value == "0..4"


def test_ignore_index_and_valid_values_pass():
    with OpTracer():
        F.cross_entropy(torch.randn(3, 4), torch.tensor([0, -100, 3]))
        F.embedding(torch.tensor([0, 4]), torch.randn(5, 2))


def test_tracing_is_off_outside_a_tracer():
    assert not prechecks_active()
    assert not torch._C._is_torch_function_mode_enabled()
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None
    with OpTracer():
        assert prechecks_active()
    assert not prechecks_active()


def test_the_tracer_s_first_op_does_not_import_torch_dynamo():
    # torch._dynamo takes seconds to import: a diagnostic run pays it only if the program
    # compiles something (the tracer keeps its own frames out of compilation without it)
    code = ("import sys, torch\n"
            "from cudadiag.trace import OpTracer\n"
            "with OpTracer() as tracer:\n"
            "    torch.ones(2).add(1)\n"
            "print([c.name for c in tracer.recent], 'torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "['aten::ones', 'aten::add.Tensor'] False", done.stderr


def test_code_compiled_under_the_tracer_runs_and_its_eager_ops_are_recorded(native):
    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos() + 1

    compiled = torch.compile(f, backend="eager")
    torch._dynamo.reset()  # compiled under each tracer
    with OpTracer(native=native) as tracer:
        out = compiled(torch.zeros(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert [c.name for c in tracer.recent][-3:] == ["aten::sin", "aten::cos",
                                                     "aten::add.Tensor"]


def test_where_the_extension_cannot_be_built_the_tracer_says_so_once_and_traces_in_python(
        tmp_path):
    code = ("import torch\n"
            "from cudadiag import trace_native\n"
            "from cudadiag.trace import OpTracer\n"
            "folder = trace_native.build_folder()\n"
            "folder.mkdir(parents=True)\n"
            "(folder / trace_native.FAILED).write_text('CalledProcessError: no compiler')\n"
            "for _ in range(2):\n"
            "    with OpTracer() as tracer:\n"
            "        torch.ones(2).add(1)\n"
            "    print(tracer.native, [c.name for c in tracer.recent])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert done.stdout.splitlines() == ["False ['aten::ones', 'aten::add.Tensor']"] * 2
    assert done.stderr.count("traces in Python") == 1
    assert "could not be built here (CalledProcessError: no compiler)" in done.stderr
