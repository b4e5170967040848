"""Questions about optional parts, answered by those parts once they are imported.

Two parts change what an incident records, yet must not be imported just to ask about them
(they import torch, and a kernel that never used them must not pay for it): watch(), which
knows the step and the batch in flight, and the simulated device (cudadiag.testing), whose
errors are marked simulated. Each registers its answers here when it is imported; until then
the answers are "nothing": nothing can be in flight in a part that was never imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudadiag.incident import BatchInfo, ModelFacts, StepInfo

InFlight = Callable[[], "tuple[StepInfo, BatchInfo] | None"]
ModelInFlight = Callable[[], "ModelFacts | None"]


def _nothing_in_flight() -> tuple[StepInfo, BatchInfo] | None:
    return None


def _no_model() -> ModelFacts | None:
    return None


def _no_cell_count() -> None:
    return None


def _no_simulator() -> bool:
    return False


def _no_entries() -> int:
    return 0


_step_in_flight: InFlight = _nothing_in_flight
_new_cell: Callable[[], None] = _no_cell_count
_model_in_flight: ModelInFlight = _no_model
_simulator_active: Callable[[], bool] = _no_simulator
_simulator_in_use: Callable[[], bool] = _no_simulator
_simulator_poisoned: Callable[[], bool] = _no_simulator
_simulator_skipped_entries: Callable[[], int] = _no_entries
_simulator_off = {"off": False}


def register_watches(in_flight: InFlight, new_cell: Callable[[], None],
                     model: ModelInFlight = _no_model) -> None:
    """watch()'s answers: the step and batch of the watch iterating now (None when none
    is), what to do when a new cell starts (watches abandoned earlier stop counting), and
    the model facts a library's trainer recorded with that step."""
    global _step_in_flight, _new_cell, _model_in_flight
    _step_in_flight, _new_cell, _model_in_flight = in_flight, new_cell, model


def register_simulator(active: Callable[[], bool], in_use: Callable[[], bool],
                       poisoned: Callable[[], bool], skipped_entries: Callable[[], int]) -> None:
    """The simulated device's answers: is one entered now; is one entered or has one
    faulted (whatever fails then is the simulator's doing, not a real GPU's); has its
    context been made unusable by a fault; how many entries a comparison switched off."""
    global _simulator_active, _simulator_in_use, _simulator_poisoned
    global _simulator_skipped_entries
    _simulator_active, _simulator_in_use, _simulator_poisoned = active, in_use, poisoned
    _simulator_skipped_entries = skipped_entries


def step_in_flight() -> tuple[StepInfo, BatchInfo] | None:
    """Return the step and the batch of the watch() iterating now, or None."""
    return _step_in_flight()


def model_in_flight() -> ModelFacts | None:
    """Return the model facts recorded with the step in flight, or None."""
    return _model_in_flight()


def new_cell() -> None:
    """Tell watch() that a new cell starts (called by the kernel hook and the worker)."""
    _new_cell()


def simulator_active() -> bool:
    """Return True while a simulated device is entered in this process."""
    return _simulator_active()


def simulator_poisoned() -> bool:
    """Return True when a simulated fault has made the simulated CUDA context unusable."""
    return _simulator_poisoned()


def switch_off_simulator() -> None:
    """Make every later `simulated_cuda()` entry in this process a no-op, whether the
    simulator is imported yet or not (the `cpu` variant of `%cuda_compare`)."""
    _simulator_off["off"] = True


def simulator_switched_off() -> bool:
    """Return True once switch_off_simulator() was called in this process."""
    return _simulator_off["off"]


def simulator_skipped_entries() -> int:
    """Return how many simulated_cuda() entries a comparison's variant switched off."""
    return _simulator_skipped_entries()


def simulator_in_use() -> bool:
    """Return True while a simulated device is entered or after one faulted."""
    return _simulator_in_use()
