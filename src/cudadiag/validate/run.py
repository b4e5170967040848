"""Validate in the original scope (method point 10): re-run a loop's cell in a fresh isolated
process over the steps that matter (or every step), and report per step whether it passed,
the processed sample count against the expected one, the samples guards rejected and the
exceptions user code caught and swallowed.

A step counts as processed when the loop body finished it without swallowing an exception;
its samples are then counted. A GuardError caught in the body names the rejected samples.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.comparison.run import FAILED, TIMED_OUT, Program, Row, run_row
from cudadiag.i18n import N_, _, ngettext
from cudadiag.isolate.plan import Rerun
from cudadiag.steps import StepProfile
from cudadiag.validate.child import PROGRESS_FILE

PASSED, NOT_REACHED, CAUGHT, LEFT = (N_("ok"), N_("not reached"), N_("exception caught"),
                                     N_("left early"))
"""A step's outcome (shown with `_`)."""
CHILD_HOOKS = "cudadiag.validate.child"
"""The child side of a validated run (comparison/variants.py calls its setup, start and finish)."""
VALIDATION_RUN = Rerun(1, N_("once"), frozenset())
"""A validation runs the loop's cell once, over the chosen steps."""


@dataclass
class StepOutcome:
    """One chosen step of the validated loop."""

    step: int
    why: list[str]
    outcome: str
    size: int | None = None
    indices: list[int] | None = None
    run: int = 0
    detail: str = ""


@dataclass
class Validation:
    """The report of one `%cudadiag validate`."""

    cell: int
    watch: str | None
    steps: list[StepOutcome]
    expected: int
    processed: int
    unknown_sizes: int
    swallowed: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    """`family at op` of the step that failed, when one did."""
    failing_step: int | None = None
    every_step: bool = False
    wall_s: float | None = None

    @property
    def verdict(self) -> str:
        """One line: the failing step, or the counts and what is missing."""
        count = _("{processed} of {expected} samples processed").format(
            processed=self.processed, expected=self.expected)
        if self.unknown_sizes:
            count += " " + ngettext("({count} step of unknown size not counted)",
                                    "({count} steps of unknown size not counted)",
                                    self.unknown_sizes).format(count=self.unknown_sizes)
        if self.failure is not None:
            where = (_("step {step}").format(step=self.failing_step)
                     if self.failing_step is not None else _("the cell"))
            return _("fails at {where}: {failure}; {count}").format(
                where=where, failure=self.failure, count=count)
        if self.processed == self.expected and not self.swallowed and not self.rejected:
            return _("every chosen step passes: {count}").format(count=count)
        if self.swallowed:
            return _("the cell ran, but {count}; {caught} exception(s) caught and "
                     "swallowed").format(count=count,
                                         caught=sum(s["count"] for s in self.swallowed))
        return _("the cell ran, but {count}").format(count=count)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {"cell": self.cell, "watch": self.watch, "verdict": self.verdict,
                "expected": self.expected, "processed": self.processed,
                "steps": [vars(s) for s in self.steps], "swallowed": self.swallowed,
                "rejected": self.rejected, "failure": self.failure,
                "failing_step": self.failing_step, "every_step": self.every_step}


def validate_program(program: Program, watch: str | None, chosen: dict[int, list[str]] | None,
                     seen: list[StepProfile], *, total: int | None = None,
                     timeout: float | None = None,
                     progress: Callable[[int], None] | None = None) -> Validation:
    """Run `program` once, its watch() `watch` yielding only the `chosen` steps (None: every
    step, `total` of them when known); `seen` are the kernel's profiles of that loop (for the
    sizes of steps the run does not reach). `progress` gets the number of steps completed so
    far, while it runs. Returns the Validation; raises KeyboardInterrupt when
    interrupted."""
    options = {**program.options, "child_hooks": CHILD_HOOKS, "watch": watch,
               "steps": None if chosen is None else sorted(chosen)}
    run = Program(**{**vars(program), "options": options})
    row = _run_with_progress(run, timeout, progress)
    expected = chosen if chosen is not None else {s: [] for s in range(total or 0)}
    report = _report(program.target, watch, expected, seen, row)
    report.every_step = chosen is None
    return report


def _run_with_progress(program: Program, timeout: float | None,
                       progress: Callable[[int], None] | None) -> Row:
    if progress is None:
        return run_row(program, None, [], timeout)
    stop = threading.Event()
    folder: list[Path] = []

    shown = [-1]

    def show() -> None:
        for path in folder:
            try:
                done = int((path / PROGRESS_FILE).read_text() or 0)
            except (OSError, ValueError):
                continue
            if done != shown[0]:
                progress(done)
                shown[0] = done

    def poll() -> None:
        while not stop.wait(0.25):
            show()

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        return run_row(program, None, [], timeout, on_folder=folder.append,
                       before_cleanup=show)
    finally:
        stop.set()
        watcher.join()


def _report(cell: int, watch: str | None, chosen: dict[int, list[str]],
            seen: list[StepProfile], row: Row) -> Validation:
    data = row.info.get("validation", {})
    ran = data.get("steps", [])
    swallowed, rejected = data.get("swallowed", []), data.get("rejected", [])
    caught = {(s["run"], s["step"]): s for s in swallowed}
    failed = row.outcome in (FAILED, TIMED_OUT)
    failing = next((s for s in reversed(ran) if not s["completed"]), None) if failed else None
    outcomes = []
    for s in ran:
        key = (s["run"], s["step"])
        if not s["completed"]:
            outcome = FAILED if s is failing else LEFT
            detail = (_failure(row) if s is failing
                      else _("the loop ended before this step did"))
        elif key in caught:
            outcome = CAUGHT
            detail = f"{caught[key]['type']}: {caught[key]['message']}"
        else:
            outcome, detail = PASSED, ""
        why = chosen.get(s["step"], [])
        outcomes.append(StepOutcome(s["step"], why, outcome, s["size"], s["indices"],
                                    s["run"], detail))
    reached = {s["step"] for s in ran}
    sizes = {p.step: p.size for p in seen}
    for step, why in chosen.items():
        if step not in reached:
            detail = (_("the run stopped before it") if failed
                      else _("the loop ended before it (fewer steps than the kernel saw)"))
            outcomes.append(StepOutcome(step, why, NOT_REACHED, sizes.get(step), None, 0,
                                        detail))
    outcomes.sort(key=lambda o: (o.run, o.step))
    expected = sum(o.size or 0 for o in outcomes)
    processed = sum(o.size or 0 for o in outcomes if o.outcome == PASSED)
    return Validation(
        cell=cell, watch=watch, steps=outcomes, expected=expected, processed=processed,
        unknown_sizes=sum(o.size is None for o in outcomes), swallowed=swallowed,
        rejected=rejected, failure=_failure(row) if failed else None,
        failing_step=failing["step"] if failing else None, wall_s=row.wall_s)


def _failure(row: Row) -> str:
    if row.outcome == TIMED_OUT:
        return row.reason
    return row.failure
