"""The one builder of incidents: an exception, or what a process printed before it died,
becomes an Incident with its diagnosis, environment, loop context, step and batch in flight,
and the advice that fits its operator, its values and its case (advice.py).

The kernel hook (an error raised in the notebook itself), the isolated worker (an error
raised in a fresh process, a `cudadiag run` script's included, each rank of a multi-process
run among them), the runner (a child that died without a Python exception; the device's own
lines, which only the parent reads) and the multi-process job (a rank killed before it wrote
its incident, or dead without an exception) all build their incidents here, so every kind of
incident says the same things the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from cudadiag import probes
from cudadiag.advice import advise, index_keys
from cudadiag.batch.positions import position_in_batch
from cudadiag.classification import classify, deciding_error, first_error_line
from cudadiag.contracts import Violation
from cudadiag.env import collect_env
from cudadiag.generated_code import describe_generated_code
from cudadiag.i18n import msg
from cudadiag.incident import (
    Diagnosis,
    ErrorInfo,
    Incident,
    LaterError,
    LoopContext,
    OpInfo,
    RunInfo,
    exception_chain,
    qualified_type_name,
)
from cudadiag.knowledge import FAMILIES
from cudadiag.loopvars import loop_context
from cudadiag.spawn_report import make_child_incident, read_spawn_report

CellLocator = Callable[[str], "int | None"]
"""filename -> the execution count of the cell a code object was compiled from (None for
files)."""
CellSource = Callable[[int], "str | None"]
"""execution count -> that cell's source (None when not known)."""
CRASH_TAIL_LINES = 30
"""Lines of a dead process's stderr kept as the error's text."""


def _no_cell(filename: str) -> int | None:
    return None


def _no_source(cell: int) -> str | None:
    return None


def incident_from_exception(exc: BaseException, run: RunInfo, *,
                            diagnosis: Diagnosis | None = None,
                            locate_cell: CellLocator = _no_cell,
                            cell_source: CellSource = _no_source, device_lines: str = "",
                            op: OpInfo | None = None, violation: Violation | None = None,
                            loop: LoopContext | None = None) -> Incident:
    """Return the incident of `exc`, raised in a run described by `run` (whose `simulated`
    is set here).

    `diagnosis` is classify()'s reading when the caller made it already (else it is made
    here, with `device_lines`, the device's own lines printed before the error, as
    context); the device lines come first in the error's text. `op` is the operator the
    tracer saw fail; `violation` the index contract a precheck (or a blocking simulated
    kernel) found broken: it names the operator, the value and the range in the diagnosis.
    `loop` is the loop context when it was read earlier (before later code changed the
    frames' values); else it is read now. A torch.multiprocessing wrapper of a failed child
    becomes the child's incident (spawn_report.py). The step and batch of an active watch()
    are attached. Never raises for an exception it does not know (the family is `unknown`).
    """
    diagnosis = diagnosis or classify(exc, context=device_lines or None)
    error = ErrorInfo.from_exception(deciding_error(exc), locate_cell, cell_source, exc)
    describe_generated_code(diagnosis, exc, f"{device_lines}\n{error.text}")
    if device_lines:
        error.text = f"{device_lines}\n{error.text}"
    run.simulated = raised_on_simulator(exc)
    if violation is not None:
        _name_the_violation(diagnosis, violation)
        op = op or OpInfo(name=f"aten::{violation.op}")
    incident = Incident(
        error=error, diagnosis=diagnosis, run=run, env=collect_env(), op=op,
        loop=loop if loop is not None else loop_context(exc, locate_cell))
    report = read_spawn_report(exc)
    if report is not None:
        make_child_incident(incident, report, device_lines, locate_cell, cell_source)
    in_flight = probes.step_in_flight()
    if in_flight is not None:
        incident.step, incident.batch = in_flight
        incident.model = probes.model_in_flight()
    if violation is not None:
        _locate_in_batch(incident, violation)
    advise(incident, violation)
    return incident


def _locate_in_batch(incident: Incident, violation: Violation) -> None:
    """Name the batch element the violation's position is (`batch['labels'][2, 10] (row 2:
    dataset index 45)`) in the operator and the summary, when the batch in flight holds the
    operator's targets."""
    if incident.op is None or incident.batch is None:
        return
    found = position_in_batch(violation, incident.batch,
                              index_keys(incident, ("class_target", "token_target")))
    if found is not None:
        incident.op.in_batch = found
        incident.diagnosis.summary = msg("{summary}; position {position} is {element}",
                                         summary=incident.diagnosis.summary,
                                         position=_position_text(violation),
                                         element=found.describe())


def _position_text(violation: Violation) -> str:
    position = violation.positions[0]
    return str(position[0]) if len(position) == 1 else str(tuple(position))


def later_error(exc: BaseException, cell: int | None, *, family: str | None = None,
                probable_consequence: bool = True) -> LaterError:
    """Return the record of an error raised after an incident's first error in the same
    process (`family`: its family when the caller classified it already)."""
    return LaterError(
        type=qualified_type_name(exc),
        message=(str(exc).strip().splitlines() or [""])[0],
        family=family or classify(exc).family,
        at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cell=cell,
        probable_consequence=probable_consequence,
    )


def incident_from_recorded_error(error_type: str, message: str, text: str,
                                 run: RunInfo) -> Incident:
    """Return the incident of an exception known only by what was recorded of it in its
    process (its type name, the first line and the text of its message): a rank of a
    multi-process run that was killed before it could build its own incident."""
    incident = Incident(error=ErrorInfo(type=error_type, message=message, text=text),
                        diagnosis=classify(f"{error_type}: {text}"), run=run)
    advise(incident)
    return incident


def incident_of_dead_process(stdout: str, stderr: str, run: RunInfo, *,
                             process: str | None = None) -> Incident:
    """Return the incident of a child that died without writing its result (a signal,
    os._exit, an abort in a library): what it printed, classified. `run.signal` names the
    signal that killed it; `run.exit_status` is its exit status otherwise; `process` names
    the child in the message (`rank 1`)."""
    output = stderr + "\n" + stdout
    process = process or msg("the isolated process")
    died = (msg("{process} was killed by {signal}", process=process, signal=run.signal)
            if run.signal else
            msg("{process} exited with status {status} without a Python exception",
                process=process, status=str(run.exit_status)))
    incident = Incident(
        error=ErrorInfo(type=f"ProcessDied({run.signal or run.exit_status})",
                        message=first_error_line(output) or died,
                        text="\n".join(stderr.strip().splitlines()[-CRASH_TAIL_LINES:])),
        diagnosis=classify(output),
        run=run,
    )
    advise(incident)
    return incident


def add_device_lines(incident: Incident, lines: str) -> None:
    """Read `incident` again with the device's own lines, which only the parent of the
    process saw: they come first, so a kernel assertion decides over the error the host
    noticed later (unless a precheck stopped the kernel: then they are not about it)."""
    incident.error.text = f"{lines}\n{incident.error.text}"
    if incident.op is not None and incident.op.precheck:
        return
    fresh = classify(f"{incident.error.type}: {incident.error.text}", context=lines)
    fresh.details = {**incident.diagnosis.details, **fresh.details}
    incident.diagnosis = fresh
    advise(incident)


def is_diagnosable(error_type: str, family: str, simulated: bool) -> bool:
    """Return True for an error that makes an incident: one of a known family, an exception
    type of torch's (`error_type` as qualified_type_name writes it), or one raised on the
    simulated device. A NameError, a KeyError or a program's own exception class are not:
    the kernel and `cudadiag run` both file only what this admits."""
    return family != "unknown" or error_type.split(".")[0] == "torch" or simulated


def is_simulated(exc: BaseException) -> bool:
    """Return True when `exc` (or a cause of it) came from cudadiag's simulated device."""
    return any(getattr(e, "simulated", False) for e in exception_chain(exc))


def raised_on_simulator(exc: BaseException) -> bool:
    """Return True when `exc` came from cudadiag's simulated device, or was raised while one
    is entered or after one faulted (whatever fails then is marked simulated)."""
    return is_simulated(exc) or probes.simulator_in_use()


def _name_the_violation(diagnosis: Diagnosis, violation: Violation) -> None:
    diagnosis.details.update(
        op=f"aten::{violation.op}", argument=violation.argument, value=violation.values[0],
        position=list(violation.positions[0]), valid_range=[violation.low, violation.high],
    )
    diagnosis.summary = msg("{title}: {violation}", title=FAMILIES[diagnosis.family].title,
                            violation=violation.message())
