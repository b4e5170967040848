"""`%cuda_compare` / `%%cuda_compare` and `cudadiag.compare()`: one change at a time, from
the notebook (method point 9).

The compared cell is planned as `%cuda_isolate` plans it (the earlier cells it needs, the
values shipped, the RNG states each cell started from, optionally one recorded batch); every
row runs that same program in its own fresh process. The kernel's variables, devices and RNG
are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from cudadiag.argtypes import positive_seconds
from cudadiag.kernel.magics import (
    capture_for,
    cell_history,
    parse_magic_line,
    plan_in_shell,
    recorded_batch,
)

if TYPE_CHECKING:  # loaded on first use: %load_ext only registers the magic
    from cudadiag.isolate.compare import Program, Row
    from cudadiag.isolate.plan import Plan, Rerun
    from cudadiag.ui.comparison import ComparisonView


def compare_in_shell(shell: Any, cell: int | str | None = None, *,
                     variants: str | Sequence[str] | None = None,
                     timeout: float | None = None, batch: str | None = None,
                     ship: str = "auto", allow_side_effects: bool = False,
                     quiet: bool = False) -> ComparisonView:
    """Compare cell `cell` of `shell`'s history (a number; the source of a new cell; None:
    the cell of the kernel's latest incident) as it is and once per variant; return the
    comparison, which displays as its table. The plan is printed first (unless `quiet`),
    its side effects named; a cell with side effects runs once per row only with
    `allow_side_effects`.

    Raises UsageError for a bad cell, variant, plan or batch, or a run that would repeat
    side effects; KeyboardInterrupt when interrupted.
    """
    from cudadiag.isolate.compare import (
        CompareError,
        compare_program,
        comparison_rerun,
        parse_variants,
    )
    from cudadiag.ui import results
    from cudadiag.ui.comparison import viewable

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
    program, plan = plan_program(shell, history, target, ship=ship,
                                 allow_side_effects=allow_side_effects, batch=batch,
                                 rerun=comparison_rerun(variants))
    if not quiet:
        print(f"comparing In[{target}]: the cell as it is, then one change at a time, each "
              "in a fresh process", flush=True)
    check_plans([("", plan)], show=not quiet)
    try:
        comparison = compare_program(program, variants, timeout=timeout,
                                     progress=None if quiet else print_row)
    except (CompareError, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    results.remember(shell, comparison)
    return viewable(comparison)


def print_row(row: Row, label: str | None = None) -> None:
    """Print one line as a run ends: its label (default: the variant), outcome, wall time."""
    from cudadiag.isolate.compare import NOT_APPLICABLE
    from cudadiag.ui.comparison import outcome_text

    shown = row.wall_s is not None and row.outcome != NOT_APPLICABLE
    wall = f" ({row.wall_s:.2f} s)" if shown else ""
    print(f"  {label or row.variant}: {outcome_text(row)}{wall}", flush=True)


def _latest_incident_cell(shell: Any) -> int:
    incident = capture_for(shell).current
    if incident is None or not incident.run.cells:
        raise UsageError("no incident in this kernel yet: name the cell to compare, e.g. "
                         "%cuda_compare 12")
    return incident.run.cells[0]


def plan_program(shell: Any, history: dict[int, str], target: int, *, ship: str = "auto",
                 allow_side_effects: bool = False, batch: str | None = None,
                 rerun: Rerun | None = None) -> tuple[Program, Plan]:
    """Return the Program of cell `target`, planned as an isolated run plans it (the cells
    it needs, values shipped, RNG states, optionally one recorded batch; no earlier cell
    that failed in this session), and its Plan, for a command that runs it as `rerun` says
    (default: once). Raises UsageError for a plan that cannot be made."""
    from cudadiag.errors import PlanError
    from cudadiag.isolate.compare import Program
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


@magics_class
class CompareMagics(Magics):
    """`%cuda_compare` (line and cell magic)."""

    @magic_arguments()
    @argument("cell", nargs="?", type=int,
              help="execution count of the cell to compare (default: the cell of the "
                   "latest incident of this kernel); in %%%%cuda_compare, the cell's body")
    @argument("--variants", metavar="a,b,...",
              help="variants to run, each alone (default: all): cpu, fp32, no_cudnn, "
                   "sdpa_math, no_tf32, deterministic, contiguous, eager")
    @argument("--timeout", type=positive_seconds, metavar="S",
              help="kill a run (its whole process group) after S seconds")
    @argument("--batch", metavar="last|STEP",
              help="every run replays only this batch recorded by watch()")
    @argument("--ship", default="auto", metavar="auto|none|a,b",
              help="values sent to the runs instead of replaying the cells that made them")
    @argument("--allow-side-effects", action="store_true",
              help="run even when the runs repeat what cells did to this machine (files "
                   "written, processes started, the network reached): earlier cells "
                   "replayed, or the compared cell run once per row")
    @argument("--before", metavar="ID",
              help="fix check: the recorded failing case of incident ID with the old code, "
                   "then with the cell's current version (N, this cell's body, or the "
                   "newest cell most like the failing one)")
    @line_cell_magic
    def cuda_compare(self, line: str, cell: str | None = None) -> Any:
        """Run a cell once as it is and once per variant, one change at a time.

        Each run is a fresh process with the same plan, RNG states and batch. The table
        gives, per run: the outcome (ok, or family and operator), the largest absolute and
        relative differences of the tensors the cell assigns from the reference (from the
        cpu row when the reference fails), allclose at the dtype's tolerance, the cell's wall
        time, and what the variant actually changed. A variant that means nothing on this
        machine is shown as "not applicable". CPU success is a clue, not a CUDA validation.
        The plan is printed first, every side effect named; a cell that writes files, starts
        processes or reaches the network runs once per row only with --allow-side-effects.
        Returns the comparison (it displays as the table). The kernel's state is untouched.

        With --before ID, a fix check instead: the recorded failing case of incident ID (its
        cells, RNG states and batch) with the old code, then with the current version of
        the cell (only the failing watch() step of its data); "failed before, passes now"
        only when the old code fails, the new one passes and its outputs are finite (a cell
        with side effects runs twice, old and new, only with --allow-side-effects).
        """
        args = parse_magic_line(self.cuda_compare, line)
        if cell is not None and args.cell is not None:
            raise UsageError("%%cuda_compare compares its own body: drop the cell number")
        if args.before:
            from cudadiag.kernel.fixchecking import check_in_shell

            if args.variants or args.batch:
                raise UsageError("--before runs the failing case with the old and the new "
                                 "code only: drop --variants and --batch")

            return check_in_shell(self.shell, args.before,
                                  cell if cell is not None else args.cell, timeout=args.timeout,
                                  allow_side_effects=args.allow_side_effects)
        return compare_in_shell(
            self.shell, cell if cell is not None else args.cell, variants=args.variants,
            timeout=args.timeout, batch=args.batch, ship=args.ship,
            allow_side_effects=args.allow_side_effects)


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
        raise RuntimeError("cudadiag.compare() compares notebook cells: call it in IPython or "
                           "Jupyter, after %load_ext cudadiag")
    return compare_in_shell(shell, cell, variants=variants, timeout=timeout, batch=batch,
                            allow_side_effects=allow_side_effects)
