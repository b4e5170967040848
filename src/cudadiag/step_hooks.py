"""The hooks every watch() step passes through, in a module that imports no torch: the
extension registers its step profiling at `%load_ext` without loading torch (loading stays
fast), and `batch.watch()` calls what is registered here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

YIELD, SKIP, STOP = "yield", "skip", "stop"
"""A hook's answers before a step is yielded: hand it to the loop, skip it, end the loop."""

StepHook = Callable[[Any, Any, bool], "str | None"]
"""`hook(record, item, done)`: record is the watch's `batch.WatchRecord` (typed Any: naming it
here would import the batch package, and torch with it, at `%load_ext`)."""

_step_hooks: list[StepHook] = []
"""Called with each recorded step before it is yielded (done=False: may answer SKIP or STOP,
an isolated child's choice of steps) and after the loop body asked for the next one
(done=True). `%cudadiag validate` records and selects steps through them."""


def add_step_hook(hook: StepHook) -> None:
    """Call `hook(record, item, done)` for every step of every later watch() (once)."""
    if hook not in _step_hooks:
        _step_hooks.append(hook)


def remove_step_hook(hook: StepHook) -> None:
    """Stop calling `hook` (nothing happens when it was not added)."""
    if hook in _step_hooks:
        _step_hooks.remove(hook)


def step_hooks() -> list[StepHook]:
    """Return the hooks registered, in the order they were added."""
    return list(_step_hooks)
