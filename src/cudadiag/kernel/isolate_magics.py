"""`%cuda_isolate` and `%%blocking_launch`: re-run a cell in a fresh process with blocking
launches (method point 4), from the kernel's history, and print what it found."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from cudadiag.capture.shell_state import capture_for, cell_history, plan_in_shell, recorded_batch
from cudadiag.errors import IncidentNotFound, IsolatedRunFailed
from cudadiag.i18n import N_, _, localize
from cudadiag.options.magic_help import localized_help
from cudadiag.options.option import magic_options, option
from cudadiag.options.parsing import parse_magic_line
from cudadiag.options.runs import (
    ALLOW_SIDE_EFFECTS,
    BATCH,
    NO_BLOCKING,
    NO_PRECHECK,
    NO_TRACE,
    NPROC_PER_NODE,
    SHIP,
    TIMEOUT,
)
from cudadiag.ui import render

if TYPE_CHECKING:
    from cudadiag.incident import Incident
    from cudadiag.isolate.result import IsolatedResult

SPAWN_LINE = N_("ranks: the cells start processes with torch.multiprocessing; each one runs "
                "as a rank of its own, forked from the isolated process")
SPAWN_LINE_NPROC = N_("ranks: the cells start processes with torch.multiprocessing; each one "
                      "runs as a rank of its own, forked from the isolated process (their call "
                      "sets how many: --nproc-per-node is not used)")


ISOLATION_OPTIONS = (
    NO_BLOCKING, TIMEOUT,
    option("--show-replay", action="store_true",
           help=N_("print the output of the replayed cells too, instead of one line each "
                "(In[3]: 1,204 lines hidden)")),
    SHIP,
    option("--cells", metavar="N,M,...", help=N_("replay these cells instead of the planned ones")),
    ALLOW_SIDE_EFFECTS,
    option("--dry-run", action="store_true", help=N_("print the plan and run nothing")),
    option("--env", action="append", default=[], metavar="K=V",
           help=N_("set a variable in the child's environment (repeatable)")),
    NO_PRECHECK, NO_TRACE,
    option("--cold", action="store_true",
           help=N_("start a new interpreter for the run instead of forking the kernel's warm "
                "one (no warm imports)")),
    BATCH, NPROC_PER_NODE,
)
"""The options %cuda_isolate and %%blocking_launch share."""


CUDA_ISOLATE_HELP = N_("""Re-run a suspect cell in a fresh process with blocking launches.

The fresh process replays the earlier cells the suspect cell needs (or receives
their values), starts each from the RNG states it had, and records which aten
operator raised, with its arguments; index-taking operators are checked before they
run. Only the suspect cell's output is printed live; each replayed cell's output is
folded into one line (--show-replay prints it). The fresh process is forked from the
kernel's warm interpreter (started in the background by %load_ext, torch imported,
CUDA never initialised; the blocking variables are set in the child before any CUDA
call), in a fraction of a second; when it cannot be (still starting, dead, no safe
fork here), the run is a cold start and one line says why; --cold asks for one.
Works in a kernel whose CUDA context
is already unusable: the kernel itself never touches CUDA here, and its variables,
devices and RNG are left untouched (the isolated run's variables are not brought
back). The first line of the result says whether the run failed as the cell's
original incident did.

This is a diagnosis, not a re-run of the user's program: when the isolated run fails,
the diagnosis has succeeded (its incident is stored), so the cell does not fail and
"Run All" goes on; a run that exceeds --timeout is reported, not raised, for the same
reason. Interrupting it kills the run's process group and raises KeyboardInterrupt,
like interrupting any cell; bad options raise UsageError.""")

BLOCKING_LAUNCH_HELP = N_("""Run this cell's body in a fresh process with blocking launches.

Same options and behaviour as %cuda_isolate, for a cell you already suspect. The
body is the cell's program, so the cell ends as the body did, as `%%script
--raise-error` does: when the body fails (or is killed at --timeout), the cell
raises IsolatedRunFailed with the one-line diagnosis, so "Run All" stops there; the
isolated incident is the record (the kernel does not file it again). Interrupting
it kills the run's process group and raises KeyboardInterrupt.""")


@magics_class
class IsolateMagics(Magics):
    """%cuda_isolate and %%blocking_launch, registered by `%load_ext cudadiag`."""

    @magic_arguments()
    @localized_help(CUDA_ISOLATE_HELP)
    @argument("cell", nargs="?", type=int,
              help=N_("execution count of the cell to re-run (default: the cell of the latest "
                   "incident of this kernel)"))
    @magic_options(*ISOLATION_OPTIONS)
    @argument("--from-checkpoint", metavar="PATH|DIR|latest",
              help=N_("load this checkpoint (a file, the newest trusted one of a directory, or "
                   "`latest`: of the directory this kernel last saved to with "
                   "cudadiag.checkpoint.save) as `ckpt` instead of replaying the cells that "
                   "trained the restored objects; it must be trusted (see %%cudadiag "
                   "checkpoints)"))
    @argument("--restore", action="append", default=[], metavar="NAME=EXPR",
              help=N_("with --from-checkpoint: what to restore before the cell runs, e.g. "
                   "model=ckpt['model'] (load_state_dict into the object when it has one, "
                   "else bind the name); repeatable"))
    @line_magic
    def cuda_isolate(self, line: str) -> None:
        """Re-run a suspect cell isolated (the help `%cuda_isolate?` shows: CUDA_ISOLATE_HELP)."""
        args = parse_magic_line(self.cuda_isolate, line)
        history = cell_history(self.shell)
        target = args.cell if args.cell is not None else self._latest_incident_cell()
        result = _run_isolated_cell(self.shell, args, history, target)
        if result is not None and result.interrupted:
            raise KeyboardInterrupt

    @magic_arguments()
    @localized_help(BLOCKING_LAUNCH_HELP)
    @magic_options(*ISOLATION_OPTIONS)
    @cell_magic
    def blocking_launch(self, line: str, cell: str) -> None:
        """Run this cell isolated (the help `%%blocking_launch?` shows: BLOCKING_LAUNCH_HELP)."""
        args = parse_magic_line(self.blocking_launch, line)
        history = cell_history(self.shell)
        target = max(history, default=0) + 1
        history[target] = cell
        result = _run_isolated_cell(self.shell, args, history, target)
        if result is None:
            return
        if result.interrupted:
            raise KeyboardInterrupt
        if result.incident is not None:
            raise IsolatedRunFailed(_("{summary} (details: %cudadiag show {id})").format(
                summary=render.one_line(result.incident), id=result.incident.id),
                result.incident.id)
        if result.timed_out:
            raise IsolatedRunFailed(localize(result.message).removeprefix("cudadiag: "), None)

    def _latest_incident_cell(self) -> int:
        incident = capture_for(self.shell).current
        if incident is None or not incident.run.cells:
            raise UsageError(_("no incident in this kernel yet: name the cell to re-run, "
                               "e.g. %cuda_isolate 12"))
        return incident.run.cells[0]


def _run_isolated_cell(shell: Any, args: Any, history: dict[int, str],
                       target: int) -> IsolatedResult | None:
    """Plan and run cell `target` isolated, print the outcome; return the result (None for
    --dry-run). Raises UsageError for a bad option or plan."""
    from cudadiag.errors import PlanError
    from cudadiag.isolate.eager import EAGER_ENV, EAGER_LINE, should_run_eagerly
    from cudadiag.isolate.spawn import calls_spawn
    from cudadiag.isolate.verdict import verdict_line
    from cudadiag.isolate.view import render_isolated

    ship = args.ship if args.ship in ("auto", "none") else [
        n.strip() for n in args.ship.split(",") if n.strip()]
    if ship == "auto" and args.nproc_per_node is not None:
        ship = "none"  # each rank makes its own values: its rank, its process group
    restore = _restore_assignments(args)
    try:
        cells = [int(n) for n in args.cells.split(",")] if args.cells else None
        env = dict(_key_value(item) for item in args.env)
        def plan_shipping(ship: str | list[str]) -> Any:
            return plan_in_shell(shell, history, target, ship=ship, cells=cells,
                                 allow_side_effects=args.allow_side_effects,
                                 restore=[name for name, _ in restore])

        plan = plan_shipping(ship)
        if ship == "auto" and calls_spawn(plan.sources[n] for n in plan.replay):
            plan = plan_shipping("none")  # the ranks run the functions the cells define
    except (PlanError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    restore_cell = _restore_cell(args.from_checkpoint, restore) if restore else None
    print(plan.describe(), flush=True)
    if args.dry_run:
        return None
    if plan.refusal:
        raise UsageError(plan.refusal)
    recorded = recorded_batch(args.batch) if args.batch else None
    original = _original_incident(shell, target, history[target])
    eager = should_run_eagerly(original, [plan.sources[n] for n in {*plan.replay, target}],
                               env)
    if eager:
        env = {**env, **EAGER_ENV}
        print(_(EAGER_LINE), flush=True)
    try:
        result = _isolated_run(shell, plan, target, args, env, recorded, restore_cell)
    except (OSError, ValueError) as exc:  # Windows, no interpreter
        raise UsageError(_("cannot run isolated: {error}").format(error=exc)) from None
    ended = not (result.timed_out or result.interrupted)
    verdict = verdict_line(original, result.incident, eager) if original and ended else None
    print(render_isolated(result, plan.describe(), verdict))
    return result


def _original_incident(shell: Any, cell: int, source: str) -> Incident | None:
    """The kernel's latest incident for cell `cell` (filed with this very source, so a cell
    of another kernel with the same number does not count), if there is one."""
    store = capture_for(shell).store
    try:
        listed = [e for e in store.entries() if e.mode == "kernel" and e.cell == cell]
        for entry in reversed(listed):
            incident = store.read(entry)
            if incident.run.cells == [cell] and incident.run.sources.get(str(cell)) == source:
                return incident
    except (OSError, IncidentNotFound):
        return None
    return None


def _restore_assignments(args: Any) -> list[tuple[str, str]]:
    """The (name, expression) pairs of --restore; UsageError unless they come with
    --from-checkpoint and read as Python."""
    from_checkpoint = getattr(args, "from_checkpoint", None)
    pairs = getattr(args, "restore", None) or []
    if bool(from_checkpoint) != bool(pairs):
        raise UsageError(_("--from-checkpoint and --restore go together: %cuda_isolate "
                           "--from-checkpoint latest --restore model=ckpt['model']"))
    assignments = []
    for quoted in pairs:
        # IPython's magic parser keeps the quotes around a spaced argument
        item = quoted[1:-1] if len(quoted) > 1 and quoted[0] == quoted[-1] in "'\"" else quoted
        name, sep, expression = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier() or not expression:
            raise UsageError(_("--restore takes NAME=EXPR, e.g. model=ckpt['model'], not "
                               "{item!r}").format(item=item))
        try:
            compile(expression, "--restore", "eval")
        except SyntaxError as exc:
            raise UsageError(f"--restore {item}: {exc.msg}") from None
        assignments.append((name, expression))
    return assignments


def _restore_cell(spec: str, assignments: list[tuple[str, str]]) -> tuple[int, str]:
    """The replayed step that restores the checkpoint (as cell 0, just before the target).
    The kernel only reads the checkpoint's manifest and hash: loading is the child's."""
    from cudadiag import checkpoint

    try:
        chosen = checkpoint.resolve(spec)
    except checkpoint.CheckpointError as exc:
        raise UsageError(f"--from-checkpoint {spec}: {exc}") from None
    print(_("checkpoint: {path} (step {step}, written {written}), trusted").format(
        path=chosen.path, step=chosen.step, written=chosen.written_at), flush=True)
    return 0, checkpoint.restore_code(chosen.path.resolve(), assignments)


def _isolated_run(shell: Any, plan: Any, target: int, args: Any, env: dict[str, str],
                  recorded: tuple[int, Any] | None,
                  restore_cell: tuple[int, str] | None = None) -> IsolatedResult:
    from cudadiag.isolate.ranks import RankJob, SpawnJob, TorchrunJob
    from cudadiag.isolate.runner import run_isolated
    from cudadiag.isolate.spawn import calls_spawn
    from cudadiag.isolate.warm import WarmLauncher

    capture = capture_for(shell)
    ranks: RankJob | None = None
    if calls_spawn(plan.sources[n] for n in plan.replay):
        ranks = SpawnJob()
        print(_(SPAWN_LINE_NPROC if args.nproc_per_node is not None else SPAWN_LINE),
              flush=True)
    elif args.nproc_per_node is not None:
        ranks = TorchrunJob(["--nproc-per-node", args.nproc_per_node, "--standalone"],
                            sys.executable)
    return run_isolated(
        plan.sources[target],
        cells=[(n, plan.sources[n]) for n in plan.replay if n != target]
        + ([restore_cell] if restore_cell else []),
        target_cell=target,
        ship={name: shell.user_ns[name] for name in plan.ship},
        rng_states=capture.rng_states_including_running(target),
        blocking=not args.no_blocking,
        timeout=args.timeout,
        env=env,
        trace=not args.no_trace,
        precheck=not args.no_precheck,
        batch=recorded,
        show_replay=args.show_replay,
        ranks=ranks,
        launcher=None if isinstance(ranks, TorchrunJob) else WarmLauncher(cold=args.cold),
    )


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(_("--env takes KEY=VALUE, not {item!r}").format(item=item))
    return key, value
