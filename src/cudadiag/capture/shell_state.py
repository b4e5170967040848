"""What every magic reads about the shell it runs in: the shell's capture (its incidents, its
RNG states, the cells that failed), its cells as typed, the batch its latest watch() kept, and
the plan of one of its cells."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from cudadiag.capture.hooks import KernelCapture
from cudadiag.i18n import _
from cudadiag.log.store import IncidentStore
from cudadiag.panel.announce import KernelAnnouncer

if TYPE_CHECKING:
    from cudadiag.isolate.plan import Plan

_captures: dict[int, KernelCapture] = {}


def capture_for(shell: Any) -> KernelCapture:
    """Return the capture state of `shell`, creating it (unregistered) if needed."""
    capture = _captures.get(id(shell))
    if capture is None:
        store = IncidentStore()
        capture = _captures[id(shell)] = KernelCapture(shell, store,
                                                       KernelAnnouncer(shell, store))
    return capture



def forget_capture(shell: Any) -> KernelCapture | None:
    """Drop the capture state of `shell` (the extension is unloaded); return it, or None
    when there was none."""
    return _captures.pop(id(shell), None)

def plan_in_shell(shell: Any, history: dict[int, str], target: int, **options: Any) -> Plan:
    """Return the plan of cell `target` of `shell`'s `history` (isolate/plan.make_plan with
    `options`): values shipped from the kernel's namespace, no earlier cell that failed in
    this session replayed. Raises PlanError as make_plan does."""
    from cudadiag.isolate.plan import make_plan

    return make_plan(history, target, shell.user_ns,
                     failed=capture_for(shell).failed_cells, **options)


def cell_history(shell: Any) -> dict[int, str]:
    """Earlier cells by execution count, as typed (the running cell, the last one, excluded).

    `In` holds the cells after IPython's transformations (`get_ipython().run_line_magic`);
    the raw history keeps the magics as typed, which the plan knows how to skip.
    """
    inputs = list(shell.history_manager.input_hist_raw) or [""]
    if capture_for(shell).cell_running:
        inputs = inputs[:-1]  # a magic typed in a cell; a panel button runs between cells
    return {n: src for n, src in enumerate(inputs) if n > 0 and src}


def recorded_batch(which: str) -> tuple[int, Any]:
    """The (step, CPU copy) kept by the latest watch() of this kernel."""
    from cudadiag.batch import latest_watch  # loaded already when watch() ran

    record = latest_watch()
    if record is None:
        raise UsageError(_("--batch: no watch() has recorded a batch in this kernel; wrap "
                           "the loop's iterable: for batch in cudadiag.watch(loader): ..."))
    try:
        step = which if which == "last" else int(which)
        kept = record.batch_at(step)
    except (LookupError, ValueError) as exc:
        raise UsageError(f"--batch {which}: {exc}") from None
    print(_("replaying step {step} of watch {name!r} only").format(step=kept.step,
                                                                    name=record.name))
    return kept.step, kept.batch
