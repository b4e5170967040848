"""The steps a watch() saw, in brief, and the choice of the steps that matter (method point
10: validate in the original scope).

While `%load_ext cudadiag` is active, every step of every watch() gets a StepProfile: its
size, dataset indices, sequence length and the range of its integer values (labels, token
ids) — read on the CPU only, never from a GPU tensor. `%cudadiag validate` chooses from them:
the failing step and its neighbours, the last (incomplete) step, the shortest and longest
sequences, the smallest and largest integer values, and a seeded random slice.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudadiag.i18n import msg
from cudadiag.own_work import outside_user_modes
from cudadiag.step_hooks import YIELD, add_step_hook, remove_step_hook

if TYPE_CHECKING:
    from cudadiag.batch import WatchRecord

RANGE_MAX_NUMEL = 1_000_000
"""Integer tensors above this size are not scanned for their range (the step's cost)."""
PROFILES_KEPT = 200_000
RANDOM_SLICE = 3
SEED = 0


@dataclass
class StepProfile:
    """One step of a watch(), in brief."""

    step: int
    size: int | None
    indices: list[int] | None
    length: int | None
    """Second dimension of the batch's multi-dimensional tensors (the longest): the padded
    sequence length of a token batch."""
    low: int | None
    high: int | None
    """Smallest and largest value of its integer CPU tensors (labels, token ids)."""


_profiles: weakref.WeakKeyDictionary[WatchRecord, list[StepProfile]] = \
    weakref.WeakKeyDictionary()
_cells: weakref.WeakKeyDictionary[WatchRecord, int | None] = weakref.WeakKeyDictionary()
_cell_now: list[Callable[[], int | None]] = []


def start_profiling(cell_now: Callable[[], int | None]) -> None:
    """Profile every step of every later watch() in this process; `cell_now()` names the
    cell running (a kernel's execution count), recorded with each watch."""
    _cell_now[:] = [cell_now]
    add_step_hook(_profile_step)


def stop_profiling() -> None:
    """Profile no later watch() step (`%unload_ext`); the profiles taken are kept."""
    remove_step_hook(_profile_step)
    _cell_now.clear()


def profiles(record: WatchRecord) -> list[StepProfile]:
    """Return the profiles of `record`'s steps, in order (empty when not profiled)."""
    return list(_profiles.get(record, []))


def watched_in(cell: int | None) -> WatchRecord | None:
    """Return the latest profiled watch that ran in cell `cell` (None: in any cell)."""
    found = [r for r, c in _cells.items() if cell is None or c == cell]  # in start order
    return found[-1] if found else None


def cell_of(record: WatchRecord) -> int | None:
    """Return the cell a profiled watch ran in."""
    return _cells.get(record)


def _profile_step(record: WatchRecord, item: Any, done: bool) -> str:
    if done:
        return YIELD
    if record not in _cells:
        _cells[record] = _cell_now[0]() if _cell_now else None
    kept = _profiles.setdefault(record, [])
    if len(kept) < PROFILES_KEPT:
        kept.append(_profile(record.step, record.current_tensors, record.current_size,
                             record.current_indices))
    return YIELD


def profile_of(step: int, item: Any, size: int | None,
               indices: list[int] | None) -> StepProfile:
    """Return the StepProfile of one batch (CPU integer tensors are read, nothing else)."""
    from cudadiag.batch import tensors_of

    return _profile(step, tensors_of(item), size, indices)


def _profile(step: int, tensors: list[Any], size: int | None,
             indices: list[int] | None) -> StepProfile:
    """The StepProfile of a batch of `tensors` (this runs every step of watch())."""
    lengths = [int(t.shape[1]) for t in tensors if t.dim() >= 2]
    scanned = [t for t in tensors if t.is_cpu and 0 < t.numel() <= RANGE_MAX_NUMEL
               and not (t.is_floating_point() or t.is_complex())]
    low = high = None
    if scanned:
        with outside_user_modes():
            ranges = [[int(v) for v in t.aminmax()] for t in scanned]  # one pass each
        low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    return StepProfile(step, size, indices, max(lengths) if lengths else None, low, high)


def choose_steps(seen: list[StepProfile], length: int | None, failing: int | None,
                 *, slice_size: int = RANDOM_SLICE, seed: int = SEED) -> dict[int, list[str]]:
    """Return the steps that matter, each with why: the failing step and its two neighbours,
    the last step, the shortest and longest sequences, the smallest and largest integer
    values, and a seeded random slice of `slice_size` steps. `length` is the loop's number of
    steps when known (else the steps seen count)."""
    total = length if length is not None else (max((p.step for p in seen), default=-1) + 1)
    chosen: dict[int, list[str]] = {}

    def add(step: int | None, why: str) -> None:
        if step is not None and 0 <= step < max(total, 1):
            chosen.setdefault(step, []).append(why)

    if failing is not None:
        add(failing, msg("failing step"))
        add(failing - 1, msg("neighbour of the failing step"))
        add(failing + 1, msg("neighbour of the failing step"))
    add(total - 1, msg("last step (incomplete)") if _incomplete(seen, total - 1)
        else msg("last step"))
    _add_extremes(add, seen, lambda p: p.length, msg("shortest sequence"),
                  msg("longest sequence"))
    _add_extremes(add, seen, lambda p: p.low, msg("smallest value"), None)
    _add_extremes(add, seen, lambda p: p.high, None, msg("largest value"))
    rest = [s for s in range(total) if s not in chosen]
    for step in random.Random(seed).sample(rest, min(slice_size, len(rest))):
        add(step, msg("random (seed {seed})", seed=seed))
    return dict(sorted(chosen.items()))


def _add_extremes(add: Any, seen: list[StepProfile], key: Any, smallest: str | None,
                  largest: str | None) -> None:
    """Add the steps with the smallest and largest `key`, when it varies at all."""
    known = [p for p in seen if key(p) is not None]
    if len({key(p) for p in known}) < 2:
        return
    if smallest:
        add(min(known, key=key).step, smallest)
    if largest:
        add(max(known, key=key).step, largest)


def _incomplete(seen: list[StepProfile], last: int) -> bool:
    """True when the last step's batch is smaller than the first's."""
    sizes = {p.step: p.size for p in seen}
    first, final = sizes.get(0), sizes.get(last)
    return first is not None and final is not None and final < first
