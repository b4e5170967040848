"""`%cudadiag validate [N] [--all]`: re-run a loop's cell in a fresh process over the steps
that matter, chosen from what its watch() saw in this kernel (method point 10)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast

from IPython.core.error import UsageError

from cudadiag.capture.shell_state import cell_history
from cudadiag.comparison.magic import check_plans, plan_program
from cudadiag.i18n import _
from cudadiag.options.option import add_options
from cudadiag.options.parsing import MagicParser, split_line
from cudadiag.options.runs import ALLOW_SIDE_EFFECTS, TIMEOUT
from cudadiag.steps import cell_of, choose_steps, profiles, watched_in
from cudadiag.ui import results
from cudadiag.ui.displayed import CommandOutput, as_view
from cudadiag.validate.run import VALIDATION_RUN, validate_program
from cudadiag.validate.view import ValidationView, validation_section

BAR_WIDTH = 30


def _parser() -> argparse.ArgumentParser:
    parser = MagicParser(prog="%cudadiag validate",
                          description=_("Re-run a loop's cell in a fresh process over the "
                                        "steps that matter and count the samples."))
    parser.add_argument("cell", nargs="?", type=int,
                        help=_("execution count of the cell (default: the latest cell that "
                               "ran watch())"))
    parser.add_argument("--all", action="store_true",
                        help=_("run every step, with a progress bar"))
    parser.add_argument("--seed", type=int, default=0,
                        help=_("seed of the random slice of steps (default 0)"))
    add_options(parser, TIMEOUT, ALLOW_SIDE_EFFECTS)
    return parser


def validate_in_shell(shell: Any, line: str) -> ValidationView:
    """Run `%cudadiag validate LINE` in `shell`; return the report (it displays itself).
    The plan is printed first, its side effects named; in a notebook kernel the report then
    takes the place of the plan and progress lines. Raises UsageError for bad options, a
    cell that ran no watch(), a plan that cannot run or one that would repeat what earlier
    cells did (without --allow-side-effects); KeyboardInterrupt when interrupted."""
    args = _parser().parse_args(split_line(line))
    record = watched_in(args.cell)
    if record is None:
        where = f"In[{args.cell}]" if args.cell is not None else _("this kernel")
        raise UsageError(_("no watch() has run in {where} since %load_ext cudadiag: wrap the "
                           "loop's iterable, for batch in cudadiag.watch(loader): ..., run "
                           "the cell, then validate it").format(where=where))
    cell = cell_of(record)
    if cell is None:
        raise UsageError(_("the latest watch() ran outside a notebook cell: name the cell"))
    history = cell_history(shell)
    if cell not in history:
        raise UsageError(_("In[{cell}] is not in this kernel's history").format(cell=cell))
    program, plan = plan_program(shell, history, cell, rerun=VALIDATION_RUN,
                                 allow_side_effects=args.allow_side_effects)
    seen = profiles(record)
    failing = None if record.exhausted else record.step
    chosen = None if args.all else choose_steps(seen, record.length, failing, seed=args.seed)
    fields = {"cell": cell, "watch": record.name, "steps": sorted(chosen or ())}
    with CommandOutput(shell) as output:
        print((_("validating In[{cell}] (watch {watch!r}) over every step in a fresh process")
               if chosen is None else
               _("validating In[{cell}] (watch {watch!r}) over steps {steps} in a fresh "
                 "process")).format(**fields), flush=True)
        check_plans([("", plan)])
        total = record.length if record.length is not None else len(seen)
        progress = _bar(total) if args.all else None
        try:
            report = validate_program(program, record.name, chosen, seen, total=record.length,
                                      timeout=args.timeout, progress=progress)
        except (OSError, ValueError) as exc:
            raise UsageError(_("cannot run isolated: {error}").format(error=exc)) from None
        if progress is not None:
            print(file=sys.stdout, flush=True)
    results.remember(shell, "Validate", ("cell", report.cell), validation_section(report))
    return cast(ValidationView, output.replace(as_view(ValidationView, report)))


def _bar(total: int) -> Any:
    """A progress bar on one line, redrawn in place (`\\r`)."""

    def show(done: int) -> None:
        filled = BAR_WIDTH * done // total if total else 0
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        print("\r" + _("[{bar}] {done}/{total} steps").format(bar=bar, done=done,
                                                             total=total or "?"),
              end="", flush=True)

    return show
