"""`%cuda_compare` / `%%cuda_compare`: one change at a time (comparison/), or with --before ID
the fix check of an incident (fixcheck/)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from cudadiag.i18n import N_, _
from cudadiag.options.magic_help import localized_help
from cudadiag.options.option import magic_options
from cudadiag.options.parsing import parse_magic_line
from cudadiag.options.runs import ALLOW_SIDE_EFFECTS, BATCH, SHIP, TIMEOUT

CUDA_COMPARE_HELP = N_("""Run a cell once as it is and once per variant, one change at a time.

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
with side effects runs twice, old and new, only with --allow-side-effects).""")


@magics_class
class CompareMagics(Magics):
    """`%cuda_compare` (line and cell magic)."""

    @magic_arguments()
    @localized_help(CUDA_COMPARE_HELP)
    @argument("cell", nargs="?", type=int,
              help=N_("execution count of the cell to compare (default: the cell of the "
                   "latest incident of this kernel); in %%%%cuda_compare, the cell's body"))
    @argument("--variants", metavar="a,b,...",
              help=N_("variants to run, each alone (default: all): cpu, fp32, no_cudnn, "
                   "sdpa_math, no_tf32, deterministic, contiguous, eager"))
    @magic_options(TIMEOUT, BATCH, SHIP, ALLOW_SIDE_EFFECTS)
    @argument("--before", metavar="ID",
              help=N_("fix check: the recorded failing case of incident ID with the old code, "
                   "then with the cell's current version (N, this cell's body, or the "
                   "newest cell most like the failing one)"))
    @line_cell_magic
    def cuda_compare(self, line: str, cell: str | None = None) -> Any:
        """Compare one change at a time (the help `%cuda_compare?` shows: CUDA_COMPARE_HELP)."""
        args = parse_magic_line(self.cuda_compare, line)
        if cell is not None and args.cell is not None:
            raise UsageError(_("%%cuda_compare compares its own body: drop the cell number"))
        # loaded on first use: %load_ext only registers the magic
        from cudadiag.comparison.magic import compare_in_shell
        from cudadiag.fixcheck.magic import check_in_shell

        if args.before:
            if args.variants or args.batch:
                raise UsageError(_("--before runs the failing case with the old and the new "
                                   "code only: drop --variants and --batch"))

            return check_in_shell(self.shell, args.before,
                                  cell if cell is not None else args.cell, timeout=args.timeout,
                                  allow_side_effects=args.allow_side_effects)
        return compare_in_shell(
            self.shell, cell if cell is not None else args.cell, variants=args.variants,
            timeout=args.timeout, batch=args.batch, ship=args.ship,
            allow_side_effects=args.allow_side_effects)
