"""The one builder of incidents: the kernel hook, the isolated worker and the runner agree."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import incidents, run_isolated, watch
from cudadiag.diagnose import incident_from_exception, incident_of_dead_process, later_error
from cudadiag.incident import RunInfo
from cudadiag.testing import simulated_cuda
from cudadiag.trace import OpTracer
from scenarios import MODEL, SETUP, run

LATER_OOM = "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')"


def test_a_precheck_names_operator_value_and_range():
    with pytest.raises(IndexError) as raised, OpTracer() as tracer:
        F.cross_entropy(torch.zeros(3, 4), torch.tensor([0, 2, 4]))
    incident = incident_from_exception(raised.value, RunInfo(mode="isolated", blocking=True),
                                       op=tracer.failed, violation=raised.value.violation)
    details = incident.diagnosis.details
    assert (details["op"], details["value"], details["valid_range"]) == (
        "aten::nll_loss_forward", 4, [0, 4])
    assert incident.op.name == "aten::nll_loss_forward" and incident.op.precheck
    assert "outside [0, 4)" in incident.diagnosis.summary
    assert incident.env is not None and not incident.run.simulated


def test_the_step_and_batch_of_an_active_watch_are_attached():
    batches = [torch.tensor([0, 1]), torch.tensor([2, 9])]
    with pytest.raises(RuntimeError) as raised:
        for step, _batch in enumerate(watch(batches, name="train")):
            if step == 1:
                raise RuntimeError("CUDA error: device-side assert triggered")
    incident = incident_from_exception(raised.value, RunInfo(mode="kernel"))
    assert incident.step.iteration == 1 and incident.step.loader == "train"
    assert incident.batch.tensor("batch").max == 9


def test_an_error_while_the_simulator_is_in_use_is_marked_simulated():
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert not incident_from_exception(error, RunInfo(mode="kernel")).run.simulated
    with simulated_cuda():
        assert incident_from_exception(error, RunInfo(mode="kernel")).run.simulated


def test_a_later_error_is_named_by_its_qualified_type():
    later = later_error(torch.OutOfMemoryError("CUDA out of memory."), 7)
    assert (later.type, later.family, later.cell) == ("torch.OutOfMemoryError", "oom", 7)


def test_a_process_that_died_is_named_by_its_signal_and_its_output():
    incident = incident_of_dead_process(
        "", "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        RunInfo(mode="isolated", signal="SIGABRT", exit_status=-6))
    assert incident.error.type == "ProcessDied(SIGABRT)"
    assert incident.diagnosis.family == "illegal_memory"
    assert incident.error.message.startswith("RuntimeError: CUDA error: an illegal")


@pytest.mark.slow
def test_later_errors_are_named_alike_in_the_kernel_and_in_an_isolated_run(shell):
    run(shell, SETUP)
    run(shell, MODEL)
    run(shell, "loss.item()")
    run(shell, LATER_OOM)
    (kernel,) = incidents()
    isolated = run_isolated(LATER_OOM, cells=[SETUP, MODEL + "\nloss.item()"],
                            stream=False).incident
    assert kernel.error.later[-1].type == isolated.error.later[-1].type == \
        "torch.OutOfMemoryError"
