"""The fix check (method point 9: find an input that fails before the fix and passes after it,
and check the output, not only the absence of an exception): the recorded failing case of an
incident, run with the old code and with the current version of the cell, each in a fresh
isolated process.

The old code runs as recorded (its cells, RNG states, batch, shipped values). The new code is
the current kernel's plan of the cell, starting from the RNG states the failing cell started
from; when the incident named a watch() step, the new loop runs only that step of its (maybe
fixed) data. "Failed before, passes now" is said only when the old code fails, the new code
passes and every value it assigns is finite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cudadiag.comparison.run import FAILED, OK, Program, Row, assigned_names, run_row
from cudadiag.i18n import N_, _
from cudadiag.isolate.plan import Rerun
from cudadiag.shortlist import cut_list
from cudadiag.validate.run import CHILD_HOOKS

PASSES_NOW = N_("failed before, passes now")
INDICES_SHOWN = 12
FIX_CHECK_RUN = Rerun(2, N_("twice (the old code, then the new code)"), frozenset(),
                      subject=N_("the failing case"))
"""A fix check runs the failing cell twice: its recorded version, then its new one."""


@dataclass
class FixCheck:
    """The old code and the new code on the recorded failing case."""

    incident: str
    before: Row
    after: Row
    old_cell: int
    new_cell: int
    step: int | None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    """Summary of each value the new code assigned (shape, dtype, min, max, NaN, Inf)."""
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True only when the old code failed, the new one passed and its outputs are
        finite."""
        return not self.before.ok and self.after.ok and not self.nonfinite

    @property
    def nonfinite(self) -> list[str]:
        """The new code's outputs holding NaN or Inf."""
        return [o["path"] for o in self.outputs if (o.get("nan") or 0) + (o.get("inf") or 0)]

    @property
    def verdict(self) -> str:
        """One line: failed before, passes now — or what stands in the way of saying so."""
        if self.before.ok:
            return _("the recorded case no longer fails with the old code: this check cannot "
                     "tell whether the change fixed it (was the fix outside the cells, e.g. in "
                     "a data file?)")
        if not self.after.ok:
            return _("still fails: {now} (before: {before})").format(
                now=_failure(self.after), before=_failure(self.before))
        if self.nonfinite:
            return _("failed before; the new code runs without an error, but its outputs are "
                     "not finite: {names}").format(names=", ".join(self.nonfinite))
        return _(PASSES_NOW)

    def to_dict(self) -> dict[str, Any]:
        """Return the check as JSON-ready data."""
        return {"incident": self.incident, "verdict": self.verdict, "passed": self.passed,
                "old_cell": self.old_cell, "new_cell": self.new_cell, "step": self.step,
                "before": self.before.to_dict(), "after": self.after.to_dict(),
                "outputs": self.outputs, "notes": self.notes}


def _failure(row: Row) -> str:
    return row.failure if row.outcome == FAILED else _(row.outcome)


def check_fix(incident_id: str, before: Program, after: Program, *,
              step: tuple[str, int] | None = None, timeout: float | None = None,
              progress: Callable[[str, Row], None] | None = None) -> FixCheck:
    """Run the recorded failing case `before` (old code) and `after` (new code); `step`
    = (watch name, step) makes both loops run only that step when they have no recorded
    batch. Returns the FixCheck; raises KeyboardInterrupt when interrupted."""
    from cudadiag.batch import summarize

    before = _only_step(before, step)
    after = _only_step(after, step)
    old = run_row(before, None, assigned_names(before.code, before.target), timeout)
    if progress is not None:
        progress(_("before (old code)"), old)
    new = run_row(after, None, assigned_names(after.code, after.target), timeout)
    if progress is not None:
        progress(_("now (new code)"), new)
    summary = summarize(new.outputs, root="out") if new.ok else None
    outputs = [vars(t) for t in summary.tensors] if summary is not None else []
    check = FixCheck(incident_id, old, new, before.target, after.target,
                     step[1] if step else None, outputs)
    check.notes = _step_notes(step, old, new)
    return check


def _only_step(program: Program, step: tuple[str, int] | None) -> Program:
    if step is None or program.batch is not None:
        return program
    options = {**program.options, "child_hooks": CHILD_HOOKS, "watch": step[0], "steps": [step[1]]}
    return replace(program, options=options)


def _step_notes(step: tuple[str, int] | None, old: Row, new: Row) -> list[str]:
    """Say which samples each run saw at the step, so a changed loader shows."""
    if step is None:
        return []
    notes = []
    for label, row in ((_("before"), old), (_("now"), new)):
        seen = [s for s in row.info.get("validation", {}).get("steps", [])
                if s["step"] == step[1]]
        if row.info.get("validation") is None:
            continue
        if not seen:
            notes.append((_("{label}: the loop never reached step {step} of watch {watch!r}")
                          if row.outcome == OK else
                          _("{label}: the loop never reached step {step} of watch {watch!r} "
                            "before failing")).format(label=label, step=step[1], watch=step[0]))
        elif seen[0]["indices"]:
            notes.append(_("{label}: step {step} held dataset indices {indices}").format(
                label=label, step=step[1],
                indices=cut_list(seen[0]["indices"], INDICES_SHOWN)))
    return notes
