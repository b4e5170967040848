"""Every error cudadiag raises to its users, under one base: `CudadiagError`.

`except cudadiag.errors.CudadiagError` tells cudadiag's own refusals and stops apart from the
errors of the program it diagnoses. Each class also keeps the built-in base its callers
caught before there was a common one (`GuardError` and `PlanError` are ValueErrors,
`IncidentNotFound` a LookupError...). One lives with the data it describes: the tracer's
`cudadiag.trace.PrecheckError` (an IndexError too), whose type name incidents and repro
signatures record. Calls given a bad value (a negative timeout, a case name with a slash)
raise the built-in ValueError or TypeError as Python's own functions do; failures of the
system (a disk that is full) stay OSErrors.

The command line turns a CudadiagError into `cudadiag CMD: message` (exit status 1 or 2), the
magics into an IPython UsageError: the message alone says what was wrong and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class CudadiagError(Exception):
    """The base of every error cudadiag raises to its users."""


class IncidentSchemaError(CudadiagError, ValueError):
    """An incident record this version of cudadiag cannot read."""


class IncidentNotFound(CudadiagError, LookupError):
    """No incident, or more than one, matches the id given."""


class IncidentFromNewerVersion(IncidentNotFound):
    """The id names a record that a newer cudadiag wrote and this version cannot read."""


class IncidentNotSaved(CudadiagError, OSError):
    """An incident could not be written to the log; it is kept in memory and retried with
    the next write and at exit. Its message says what failed, where, and that."""


class CheckpointNotSaved(CudadiagError, OSError):
    """A checkpoint could not be written (a full disk, a read-only directory); nothing of it
    is left and the previous checkpoint of that name is unchanged. The message says why."""


class PlanError(CudadiagError, ValueError):
    """The plan of an isolated run cannot provide what the cell needs, or was asked for
    something it cannot do; nothing was run."""


class IsolatedRunFailed(CudadiagError, RuntimeError):
    """A `%%blocking_launch` body failed in its fresh process; the message is the one-line
    diagnosis. cudadiag has already reported it (`cudadiag_reported`): the isolated incident
    `incident_id` is the record, so the kernel capture does not file it again."""

    cudadiag_reported = True

    def __init__(self, message: str, incident_id: str | None) -> None:
        super().__init__(message)
        self.incident_id = incident_id

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback into cudadiag's own code."""
        return [f"{type(self).__name__}: {self}"]


class ExplainError(CudadiagError, ValueError):
    """The input of `explain` cannot be read as a log (no such file, a directory,
    unreadable)."""


class ExportError(CudadiagError, RuntimeError):
    """A repro cannot be made from this incident, or could not be written (then nothing was
    left behind). The message says why."""


class MinimizeError(CudadiagError, RuntimeError):
    """The program to minimize does not fail the way the incident says."""


class MinimizeInterrupted(MinimizeError):
    """Ctrl-C before the full program's run finished: there is nothing to keep."""


class GuardError(CudadiagError, ValueError):
    """A broken contract found by a guard. `argument`, `rule`, `values` and `positions`
    (first 10) say which."""

    def __init__(self, message: str, *, argument: str, rule: str,
                 values: Sequence[Any] = (), positions: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.argument = argument
        self.rule = rule
        self.values = list(values)
        self.positions = list(positions)


class TorchrunOptionsError(CudadiagError, ValueError):
    """Options torchrun does not know or would refuse, or that cudadiag sets itself
    (`cudadiag run --nproc-per-node N [torchrun options] -- SCRIPT`)."""


class RanksAfterCudaError(CudadiagError, RuntimeError):
    """Raised in an isolated run when the cells start their processes with
    torch.multiprocessing after CUDA was initialised: a forked rank cannot use that
    context."""


class NodesError(CudadiagError, OSError):
    """A job across nodes that cannot start here: no rendezvous store answers at the
    endpoint, the node rank is taken by another agent, the record folder is unusable."""
