"""Questions about optional parts, answered by those parts once they are imported.

Two parts change what an incident records, yet must not be imported just to ask about them
(they import torch, and a kernel that never used them must not pay for it): watch(), which
knows the step and the batch in flight, and the simulated device (cudadiag.testing), whose
errors are marked simulated. Each registers its answers here when it is imported; until then
the answers are "nothing": nothing can be in flight in a part that was never imported.
"""

from __future__ import annotations

from collections.abc import Callable

from cudadiag.incident import BatchInfo, StepInfo

InFlight = Callable[[], "tuple[StepInfo, BatchInfo] | None"]


def _nothing_in_flight() -> tuple[StepInfo, BatchInfo] | None:
    return None


def _no_cell_count() -> None:
    return None


def _no_simulator() -> bool:
    return False


_step_in_flight: InFlight = _nothing_in_flight
_new_cell: Callable[[], None] = _no_cell_count
_simulator_active: Callable[[], bool] = _no_simulator
_simulator_in_use: Callable[[], bool] = _no_simulator
_simulator_poisoned: Callable[[], bool] = _no_simulator


def register_watches(in_flight: InFlight, new_cell: Callable[[], None]) -> None:
    """watch()'s answers: the step and batch of the watch iterating now (None when none
    is), and what to do when a new cell starts (watches abandoned earlier stop counting)."""
    global _step_in_flight, _new_cell
    _step_in_flight, _new_cell = in_flight, new_cell


def register_simulator(active: Callable[[], bool], in_use: Callable[[], bool],
                       poisoned: Callable[[], bool]) -> None:
    """The simulated device's answers: is one entered now; is one entered or has one
    faulted (whatever fails then is the simulator's doing, not a real GPU's); has its
    context been made unusable by a fault."""
    global _simulator_active, _simulator_in_use, _simulator_poisoned
    _simulator_active, _simulator_in_use, _simulator_poisoned = active, in_use, poisoned


def step_in_flight() -> tuple[StepInfo, BatchInfo] | None:
    """Return the step and the batch of the watch() iterating now, or None."""
    return _step_in_flight()


def new_cell() -> None:
    """Tell watch() that a new cell starts (called by the kernel hook and the worker)."""
    _new_cell()


def simulator_active() -> bool:
    """Return True while a simulated device is entered in this process."""
    return _simulator_active()


def simulator_poisoned() -> bool:
    """Return True when a simulated fault has made the simulated CUDA context unusable."""
    return _simulator_poisoned()


def simulator_in_use() -> bool:
    """Return True while a simulated device is entered or after one faulted."""
    return _simulator_in_use()
