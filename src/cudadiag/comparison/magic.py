"""What `%cuda_compare` and `cudadiag.compare()` do in the shell: one change at a time, from
the notebook (method point 9). The magic itself is kernel/compare_magics.py.

The compared cell is planned as `%cuda_isolate` plans it (the earlier cells it needs, the
values shipped, the RNG states each cell started from, optionally one recorded batch); every
row runs that same program in its own fresh process. The kernel's variables, devices and RNG
are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from IPython.core.error import UsageError

from cudadiag.capture.shell_state import capture_for, cell_history, plan_in_shell, recorded_batch
from cudadiag.i18n import _

if TYPE_CHECKING:  # loaded on first use: %load_ext only registers the magic
    from cudadiag.comparison.run import Program, Row
    from cudadiag.comparison.view import ComparisonView
    from cudadiag.isolate.plan import Plan, Rerun


def compare_in_shell(shell: Any, cell: int | str | None = None, *,
                     variants: str | Sequence[str] | None = None,
                     timeout: float | None = None, batch: str | None = None,
                     ship: str = "auto", allow_side_effects: bool = False,
                     quiet: bool = False) -> ComparisonView:
    """Compare cell `cell` of `shell`'s history (a number; the source of a new cell; None:
    the cell of the kernel's latest incident) as it is and once per variant; return the
    comparison, which displays as its table. The plan is printed first (unless `quiet`);
    in a notebook kernel the table then takes the place of the plan and progress lines,
    its side effects named; a cell with side effects runs once per row only with
    `allow_side_effects`.

    Raises UsageError for a bad cell, variant, plan or batch, or a run that would repeat
    side effects; KeyboardInterrupt when interrupted.
    """
    from cudadiag.comparison.run import (
        CompareError,
        compare_program,
        comparison_rerun,
        parse_variants,
    )
    from cudadiag.comparison.view import ComparisonView, comparison_section
    from cudadiag.ui import results
    from cudadiag.ui.displayed import CommandOutput, as_view

    try:
        variants = parse_variants(variants)
    except CompareError as exc:
        raise UsageError(str(exc)) from None
    history = cell_history(shell)
    if isinstance(cell, str):
        target = max(history, default=0) + 1
        history[target] = cell
    else:
        target = cell if cell is not None else _latest_incident_cell(shell)
    with CommandOutput(shell) as output:
        program, plan = plan_program(shell, history, target, ship=ship,
                                     allow_side_effects=allow_side_effects, batch=batch,
                                     rerun=comparison_rerun(variants))
        if not quiet:
            print(_("comparing In[{cell}]: the cell as it is, then one change at a time, "
                    "each in a fresh process").format(cell=target), flush=True)
        check_plans([("", plan)], show=not quiet)
        try:
            comparison = compare_program(program, variants, timeout=timeout,
                                         progress=None if quiet else print_row)
        except (CompareError, OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    results.remember(shell, "Compare", ("cell", comparison.cell), comparison_section(comparison))
    return cast("ComparisonView", output.replace(as_view(ComparisonView, comparison)))


def print_row(row: Row, label: str | None = None) -> None:
    """Print one line as a run ends: its label (default: the variant), outcome, wall time."""
    from cudadiag.comparison.run import NOT_APPLICABLE
    from cudadiag.comparison.view import outcome_text

    shown = row.wall_s is not None and row.outcome != NOT_APPLICABLE
    wall = f" ({row.wall_s:.2f} s)" if shown else ""
    print(f"  {label or row.variant}: {outcome_text(row)}{wall}", flush=True)


def _latest_incident_cell(shell: Any) -> int:
    incident = capture_for(shell).current
    if incident is None or not incident.run.cells:
        raise UsageError(_("no incident in this kernel yet: name the cell to compare, e.g. "
                           "%cuda_compare 12"))
    return incident.run.cells[0]


def plan_program(shell: Any, history: dict[int, str], target: int, *, ship: str = "auto",
                 allow_side_effects: bool = False, batch: str | None = None,
                 rerun: Rerun | None = None) -> tuple[Program, Plan]:
    """Return the Program of cell `target`, planned as an isolated run plans it (the cells
    it needs, values shipped, RNG states, optionally one recorded batch; no earlier cell
    that failed in this session), and its Plan, for a command that runs it as `rerun` says
    (default: once). Raises UsageError for a plan that cannot be made."""
    from cudadiag.comparison.run import Program
    from cudadiag.errors import PlanError
    from cudadiag.isolate.plan import ISOLATED_RUN

    shipping: str | list[str] = ship if ship in ("auto", "none") else [
        n.strip() for n in ship.split(",") if n.strip()]
    try:
        plan = plan_in_shell(shell, history, target, ship=shipping,
                             allow_side_effects=allow_side_effects, rerun=rerun or ISOLATED_RUN)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    program = Program(
        code=plan.sources[target], target=target,
        cells=[(n, plan.sources[n]) for n in plan.replay if n != target],
        rng_states=capture_for(shell).rng_states_including_running(target),
        batch=recorded_batch(batch) if batch else None,
        ship={name: shell.user_ns[name] for name in plan.ship},
    )
    return program, plan


def check_plans(plans: Sequence[tuple[str, Plan]], *, show: bool = True) -> None:
    """Before anything runs: print each plan of one command under its label (what is
    replayed, every side effect named) unless not `show`; raise UsageError when together
    they would repeat side effects (isolate/plan.repeat_refusal, the rule of every
    re-run)."""
    from cudadiag.isolate.plan import repeat_refusal

    if show:
        for label, plan in plans:
            print(f"{label}{plan.describe()}", flush=True)
    refusal = repeat_refusal([plan for _, plan in plans])
    if refusal:
        raise UsageError(refusal)


def compare(cell: int | str | None = None, *, variants: str | Sequence[str] | None = None,
            timeout: float | None = None, batch: str | None = None,
            allow_side_effects: bool = False) -> ComparisonView:
    """Compare a cell of this notebook as it is and once per variant (see %cuda_compare);
    `cell` is an execution count, the source of a cell to compare, or None (the cell of the
    latest incident). Returns the comparison (it displays as its table).

    Raises RuntimeError outside IPython, UsageError for a bad cell, variant or batch, or for
    runs that would repeat side effects without `allow_side_effects`.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError(_("cudadiag.compare() compares notebook cells: call it in IPython "
                             "or Jupyter, after %load_ext cudadiag"))
    return compare_in_shell(shell, cell, variants=variants, timeout=timeout, batch=batch,
                            allow_side_effects=allow_side_effects)
