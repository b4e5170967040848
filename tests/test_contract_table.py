"""Every row of the index-contract table, driven forward and backward: on the simulated device
(assertion line, device-side assert, sticky context) and under the tracer's prechecks (the
operator, argument, value and position named)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from cudadiag import classify, contracts
from cudadiag.testing import SimulatedAcceleratorError, is_poisoned, simulated_cuda
from cudadiag.trace import OpTracer, PrecheckError

pytestmark = pytest.mark.filterwarnings(r"ignore:index_reduce\(\) is in beta")
ROWS = list(contracts.CONTRACTS.values())
ROW_IDS = [row.op for row in ROWS]


def run_example(row: contracts.IndexContract) -> torch.Tensor:
    """The row's violating call on the CPU, then its backward pass when it has one."""
    out = eval(row.example, {"torch": torch, "F": F, "dev": "cpu"})
    if out.requires_grad:
        out.sum().backward()
    return out


def expected_assert_line(row: contracts.IndexContract) -> re.Pattern[str]:
    ka = row.kernel_assert
    return re.compile(
        re.escape(f"{ka.file}:{ka.line or 0}: {ka.kernel}: block: [0,0,0], thread: [")
        + r"\d+" + re.escape(f",0,0] Assertion `{ka.assertion}` failed."))


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_each_row_names_an_argument_of_its_operator(row):
    packet = getattr(torch.ops.aten, row.op)
    for overload in packet.overloads():
        arguments = [a.name for a in getattr(packet, overload)._schema.arguments]
        if row.argument in arguments:
            assert arguments.index(row.argument) == row.index_arg, overload
            if row.ignore_arg is not None:
                assert arguments[row.ignore_arg] == "ignore_index"
            if row.dim_arg is not None:
                assert arguments[row.dim_arg] == "dim"
            return
    pytest.fail(f"aten::{row.op} has no argument {row.argument!r}")


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_each_row_asserts_on_the_simulated_device_forward_and_backward(row, capfd):
    with simulated_cuda():
        out = run_example(row)  # neither the forward nor the backward raises: kernels queue
        lines = [ln for ln in capfd.readouterr().err.splitlines() if "Assertion" in ln]
        with pytest.raises(SimulatedAcceleratorError) as raised:
            out.sum().item()
        with pytest.raises(SimulatedAcceleratorError, match="device-side assert triggered"):
            torch.ones(2) + 1  # sticky: every later operator fails too
    assert raised.value.violation.op == row.op
    assert str(raised.value).startswith("CUDA error: device-side assert triggered")
    assert "might be asynchronously reported" in str(raised.value)
    assert classify(raised.value).family == "device_assert" and classify(raised.value).sticky
    assert is_poisoned()
    if row.kernel_assert is None:
        assert lines == []  # no assertion text is known for this kernel: none is made up
    else:
        # One line per offending element of the first faulting kernel only: the backward
        # pass met the same bad indices while the assert was pending and printed nothing.
        assert lines and all(expected_assert_line(row).fullmatch(ln) for ln in lines), lines
        assert len(lines) == raised.value.violation.count


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_each_row_raises_at_the_faulty_operator_with_blocking_launches(row, monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    with simulated_cuda(), pytest.raises(SimulatedAcceleratorError) as raised:
        run_example(row)
    assert raised.value.violation.op == row.op
    assert "might be asynchronously reported" not in str(raised.value)


@pytest.mark.parametrize("on_simulator", [False, True], ids=["cpu", "simulated"])
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_each_row_is_named_by_the_tracer_precheck(row, on_simulator):
    with pytest.raises(PrecheckError) as raised, OpTracer() as tracer:
        if on_simulator:
            with simulated_cuda():
                run_example(row)
        else:
            run_example(row)
    violation = raised.value.violation
    value, position = violation.values[0], violation.positions[0]
    assert not violation.low <= value < violation.high
    shown = position[0] if len(position) == 1 else position
    assert str(raised.value).startswith(
        f"aten::{row.op}: {row.argument} {value} at position {shown} outside "
        f"[{violation.low}, {violation.high})")
    assert tracer.failed.name.split(".")[0] == f"aten::{row.op}"
    family = classify(raised.value).family
    if on_simulator:
        assert raised.value.simulated and family == "device_assert"
        assert "device-side assert triggered (the precheck stopped it" in str(raised.value)
        assert not is_poisoned()  # the precheck stopped the kernel before it asserted
    elif row.cpu_error is None:
        assert "On the CPU this kernel does not check the range" in str(raised.value)
    else:
        assert family == "index_out_of_bounds"
        assert "On the CPU this kernel raises: " in str(raised.value)


@pytest.mark.parametrize("row", [r for r in ROWS if r.cpu_error], ids=lambda r: r.op)
def test_precheck_quotes_what_the_cpu_kernel_raises(row):
    with pytest.raises(PrecheckError) as precheck, OpTracer():
        run_example(row)
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        run_example(row)
    quoted = precheck.value.violation.cpu_message()
    assert quoted in str(precheck.value) and quoted in str(cpu.value)
    assert classify(cpu.value).family == "index_out_of_bounds"
