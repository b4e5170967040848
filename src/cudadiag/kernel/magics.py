"""The `%cudadiag` magic and the extension's load/unload entry points."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from cudadiag import commands
from cudadiag.argtypes import positive_seconds, processes_per_node
from cudadiag.errors import (
    CudadiagError,
    ExportError,
    IncidentNotFound,
    IsolatedRunFailed,
    MinimizeError,
)
from cudadiag.kernel.hooks import KernelCapture
from cudadiag.listing_options import add_listing_options
from cudadiag.repro.options import add_export_options
from cudadiag.store import IncidentStore
from cudadiag.ui import render
from cudadiag.ui.announce import KernelAnnouncer

if TYPE_CHECKING:
    from cudadiag.incident import Incident
    from cudadiag.isolate.plan import Plan
    from cudadiag.isolate.result import IsolatedResult

_captures: dict[int, KernelCapture] = {}
SPAWN_LINE = ("ranks: the cells start processes with torch.multiprocessing; each one runs as "
              "a rank of its own, forked from the isolated process")
NPROC_IGNORED = " (their call sets how many: --nproc-per-node is not used)"


class MagicParser(argparse.ArgumentParser):
    """argparse that reports bad input as an IPython UsageError instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(message or self.format_help())


def _parser() -> argparse.ArgumentParser:
    parser = MagicParser(prog="%cudadiag", description="Browse cudadiag's incident log.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=MagicParser)
    listing = sub.add_parser("incidents", help="list recorded incidents, oldest first; "
                                               "--stats, --prune")
    add_listing_options(listing)
    show = sub.add_parser("show", help="print one incident in full (default: the newest)")
    show.add_argument("id", nargs="?", help="incident id or a unique prefix of it")
    show.add_argument("--json", action="store_true", help="print the incident as JSON")
    panel = sub.add_parser("panel", help="show the incident panel (default: the newest)")
    panel.add_argument("id", nargs="?", help="incident id or a unique prefix of it")
    report = sub.add_parser("report", help="print a scrubbed Markdown report for an issue")
    report.add_argument("id", nargs="?", help="incident id or a unique prefix of it")
    export = sub.add_parser("export", help="minimize, export and verify a repro notebook "
                                           "(in the background in a notebook)")
    export.add_argument("args", nargs="*", metavar="[ID] [PATH.ipynb|PATH.py]",
                        help="incident (default: the newest) and repro path (default: "
                             "repro-ID.ipynb)")
    add_export_options(export)
    export.add_argument("--wait", action="store_true",
                        help="minimize in the foreground even in a notebook (for nbconvert "
                             "or papermill runs, which end with the last cell)")
    checkpoints = sub.add_parser("checkpoints", help="list the checkpoints of a directory with "
                                                     "their verdicts (trusted or why not)")
    checkpoints.add_argument("directory", nargs="?",
                             help="the checkpoint directory (default: where this kernel last "
                                  "saved with cudadiag.checkpoint.save)")
    checkpoints.add_argument("--before", metavar="ID",
                             help="trust only checkpoints written before this incident "
                                  "(default: the first sticky incident of this kernel)")
    # read before this parser (their arguments are free text), listed so usage names them
    sub.add_parser("explain", help="diagnose a log file, pasted text, or the last error")
    sub.add_parser("validate", help="re-run a loop's cell over the steps that matter")
    return parser


def split_line(line: str) -> list[str]:
    """The words of a magic's line as a shell splits them; UsageError for bad quoting."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc} in: {line}") from None


def parse_magic_line(magic: Any, line: str) -> Any:
    """parse_argstring, with bad quoting reported as a UsageError like any bad option."""
    try:
        return parse_argstring(magic, line)
    except ValueError as exc:
        raise UsageError(f"{exc} in: {line}") from None


def _isolation_options(func: Any) -> Any:
    """The options shared by %cuda_isolate and %%blocking_launch."""
    options = [
        argument("--no-blocking", action="store_true",
                 help="a faithful asynchronous re-run (no blocking launches, no tracer): "
                      "does the error reproduce at all?"),
        argument("--timeout", type=positive_seconds, metavar="S",
                 help="kill the isolated run (its whole process group) after S seconds"),
        argument("--show-replay", action="store_true",
                 help="print the output of the replayed cells too, instead of one line each "
                      "(In[3]: 1,204 lines hidden)"),
        argument("--ship", default="auto", metavar="auto|none|a,b",
                 help="values sent to the child instead of replaying the cells that made "
                      "them: auto (only what the analysis shows untouched), none, or names"),
        argument("--cells", metavar="N,M,...",
                 help="replay these cells instead of the planned ones"),
        argument("--allow-side-effects", action="store_true",
                 help="replay cells that write, delete or move files, start processes or "
                      "reach the network (refused otherwise: ship their values instead)"),
        argument("--dry-run", action="store_true", help="print the plan and run nothing"),
        argument("--env", action="append", default=[], metavar="K=V",
                 help="set a variable in the child's environment (repeatable)"),
        argument("--no-precheck", action="store_true",
                 help="let index-taking kernels run unchecked, to see the raw CUDA error"),
        argument("--no-trace", action="store_true", help="do not record aten operators"),
        argument("--cold", action="store_true",
                 help="start a new interpreter for the run instead of forking the kernel's "
                      "warm one (no warm imports)"),
        argument("--batch", metavar="last|STEP",
                 help="replay one batch recorded by watch(): the child's watch() yields "
                      "only that batch, with its original step number"),
        argument("--nproc-per-node", type=processes_per_node, metavar="N",
                 help="run the cells as N ranks of a torchrun job (torch.distributed.run "
                      "--standalone; cells call init_process_group): the incident names the "
                      "rank that failed first, the others' errors are its consequences. "
                      "Cells that call torch.multiprocessing.spawn need no option: each "
                      "process they start is a rank"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@magics_class
class CudadiagMagics(Magics):
    """Magics registered by `%load_ext cudadiag`."""

    @line_magic
    def cudadiag(self, line: str) -> Any:
        """Browse the incident log.

        %cudadiag incidents [--family F] [--since WHEN] [--mode M] [--cell N]
                                           list incidents (id, time, family, cell, summary)
        %cudadiag incidents --stats | --prune [--keep N] [--keep-days D]
                                           the log's size and retention; prune it now
        %cudadiag show [ID]                print one incident in full (default: the newest)
        %cudadiag panel [ID]               the incident panel: browse, re-run, report
        %cudadiag report [ID]              a scrubbed Markdown report for an issue tracker
        %cudadiag export [ID] [PATH.ipynb] minimize, export and verify a repro notebook
        %cudadiag checkpoints [DIR] [--before ID]
                                           the checkpoints of DIR (default: where this kernel
                                           last saved), newest first: trusted, or why not
                                           (hash, NaN/Inf, written after the error)
        %cudadiag explain [--json] [FILE | TEXT]
                                           diagnose a log file, pasted text, or (with no
                                           argument) the last error of this kernel
        %cudadiag validate [N] [--all]     re-run a loop's cell over the steps that matter
                                           (or every step) in a fresh process; count samples
        """
        command, _, rest = line.strip().partition(" ")
        if command == "explain":
            print(_explain(self.shell, rest.strip()))
            return
        if command == "validate":
            from cudadiag.kernel.validating import validate_in_shell

            return validate_in_shell(self.shell, rest)
        args = _parser().parse_args(split_line(line))
        store = capture_for(self.shell).store
        try:
            if args.command == "incidents":
                from cudadiag.listing import run_listing

                print(run_listing(args, store))
            elif args.command == "show":
                print(commands.show(store, commands.ShowOptions(args.id, as_json=args.json)))
            elif args.command == "report":
                print(commands.report(store, args.id))
            elif args.command == "export":
                _export(self.shell, store, args)
            elif args.command == "checkpoints":
                _checkpoints(args)
            elif args.command == "panel":
                from IPython.display import display

                from cudadiag.ui.panel import Panel

                display(Panel(args.id, store=store, shell=self.shell))
        except CudadiagError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments()
    @argument("cell", nargs="?", type=int,
              help="execution count of the cell to re-run (default: the cell of the latest "
                   "incident of this kernel)")
    @_isolation_options
    @argument("--from-checkpoint", metavar="PATH|DIR|latest",
              help="load this checkpoint (a file, the newest trusted one of a directory, or "
                   "`latest`: of the directory this kernel last saved to with "
                   "cudadiag.checkpoint.save) as `ckpt` instead of replaying the cells that "
                   "trained the restored objects; it must be trusted (see %%cudadiag "
                   "checkpoints)")
    @argument("--restore", action="append", default=[], metavar="NAME=EXPR",
              help="with --from-checkpoint: what to restore before the cell runs, e.g. "
                   "model=ckpt['model'] (load_state_dict into the object when it has one, "
                   "else bind the name); repeatable")
    @line_magic
    def cuda_isolate(self, line: str) -> None:
        """Re-run a suspect cell in a fresh process with blocking launches.

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
        like interrupting any cell; bad options raise UsageError.
        """
        args = parse_magic_line(self.cuda_isolate, line)
        history = cell_history(self.shell)
        target = args.cell if args.cell is not None else self._latest_incident_cell()
        result = _run_isolated_cell(self.shell, args, history, target)
        if result is not None and result.interrupted:
            raise KeyboardInterrupt

    @magic_arguments()
    @_isolation_options
    @cell_magic
    def blocking_launch(self, line: str, cell: str) -> None:
        """Run this cell's body in a fresh process with blocking launches.

        Same options and behaviour as %cuda_isolate, for a cell you already suspect. The
        body is the cell's program, so the cell ends as the body did, as `%%script
        --raise-error` does: when the body fails (or is killed at --timeout), the cell
        raises IsolatedRunFailed with the one-line diagnosis, so "Run All" stops there; the
        isolated incident is the record (the kernel does not file it again). Interrupting
        it kills the run's process group and raises KeyboardInterrupt.
        """
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
            raise IsolatedRunFailed(f"{render.one_line(result.incident)} (details: "
                                    f"%cudadiag show {result.incident.id})",
                                    result.incident.id)
        if result.timed_out:
            raise IsolatedRunFailed(result.message.removeprefix("cudadiag: "), None)

    def _latest_incident_cell(self) -> int:
        incident = capture_for(self.shell).current
        if incident is None or not incident.run.cells:
            raise UsageError("no incident in this kernel yet: name the cell to re-run, e.g. "
                             "%cuda_isolate 12")
        return incident.run.cells[0]


def _explain(shell: Any, argument: str) -> str:
    """`%cudadiag explain [--json] [FILE | TEXT]`: the argument is a file when one exists by
    that name, an error when it looks like a path to nothing, else the text to explain
    (commands.explain_argument); without one, the last error of this kernel. Returns the
    text to print; raises UsageError."""
    as_json = argument == "--json" or argument.startswith("--json ")
    if as_json:
        argument = argument[len("--json"):].strip()
    try:
        if argument:
            explained = commands.explain_argument(argument)
        else:
            explained = commands.explain_pasted(_last_error_text(shell),
                                                "the last error of this kernel")
    except CudadiagError as exc:
        raise UsageError(str(exc)) from None
    return explained.text(as_json=as_json)


def _last_error_text(shell: Any) -> str:
    """The traceback of the last error of this kernel, the device's own lines first."""
    import traceback

    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if exc is None:
        raise UsageError("no error in this kernel yet: give a log file or the text to "
                         "explain, e.g. %cudadiag explain slurm-1234.out")
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    current = capture_for(shell).current
    if current is not None and current.error.message in text:
        text = current.error.text + "\n" + text
    return text


def _checkpoints(args: Any) -> None:
    """`%cudadiag checkpoints [DIR]`: each checkpoint of DIR (default: where this kernel last
    saved) with its verdict."""
    from cudadiag import checkpoint

    directory = args.directory or checkpoint.last_saved_directory()
    if directory is None:
        raise UsageError("this kernel has saved no checkpoint with cudadiag.checkpoint.save: "
                         "name the directory, e.g. %cudadiag checkpoints ckpts")
    try:
        verdicts = checkpoint.review(directory, before=args.before)
    except (NotADirectoryError, IncidentNotFound, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(render.render_checkpoints(str(directory), verdicts))


def capture_for(shell: Any) -> KernelCapture:
    """Return the capture state of `shell`, creating it (unregistered) if needed."""
    capture = _captures.get(id(shell))
    if capture is None:
        store = IncidentStore()
        capture = _captures[id(shell)] = KernelCapture(shell, store,
                                                       KernelAnnouncer(shell, store))
    return capture


def _export(shell: Any, store: IncidentStore, args: Any) -> None:
    """`%cudadiag export [ID] [PATH]`: in the background in a notebook kernel (`--wait`:
    in the foreground). Raises CudadiagError for a bad path, id or program."""
    from pathlib import Path

    from cudadiag.kernel.exporting import run_export

    # incident ids are hex: anything with a dot or a slash is meant as the repro's path
    paths = [a for a in args.args if "." in a or "/" in a]
    ids = [a for a in args.args if a not in paths]
    if len(paths) > 1 or len(ids) > 1:
        raise UsageError("usage: %cudadiag export [ID] [PATH.ipynb|PATH.py]")
    options = commands.ExportOptions(
        incident=ids[0] if ids else None, path=Path(paths[0]) if paths else None,
        max_trials=args.max_trials, timeout=args.timeout, bundle=args.bundle)
    incident, path = commands.export_target(store, options)
    inputs = _repro_inputs(shell, incident, store)
    try:
        run_export(shell, incident, path, inputs, options, store=store,
                   background=not args.wait)
    except MinimizeError as exc:
        raise UsageError(f"cannot minimize incident {incident.id}: {exc}") from None
    except ExportError as exc:
        raise UsageError(f"cannot export incident {incident.id}: {exc}") from None


def _repro_inputs(shell: Any, incident: Any, store: IncidentStore) -> Any:
    """Kernel incidents: plan the failing cell from this kernel's history, with its RNG
    states and the batch watch() kept. Isolated ones: what the log kept."""
    import os

    from cudadiag.repro.export import ReproInputs, failed_cells, stored_inputs

    if incident.run.mode != "kernel":
        return stored_inputs(incident, store)
    from cudadiag.errors import PlanError

    history = cell_history(shell)
    cell = incident.run.cells[0] if incident.run.cells else None
    if cell is None or cell not in history:
        raise ExportError(f"incident {incident.id} did not come from this kernel's history; "
                         "export an isolated incident instead")
    try:
        plan = plan_in_shell(shell, history, cell, ship="none")
    except PlanError as exc:
        raise ExportError(str(exc)) from None
    batch = None
    if incident.step is not None:
        try:
            batch = recorded_batch(str(incident.step.iteration))
        except UsageError:
            batch = None
    return ReproInputs(cells={n: plan.sources[n] for n in plan.replay},
                       rng_states=capture_for(shell).rng_states, batch=batch,
                       cwd=os.getcwd(), failed_at=failed_cells(incident))


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


def _run_isolated_cell(shell: Any, args: Any, history: dict[int, str],
                       target: int) -> IsolatedResult | None:
    """Plan and run cell `target` isolated, print the outcome; return the result (None for
    --dry-run). Raises UsageError for a bad option or plan."""
    from cudadiag.errors import PlanError
    from cudadiag.isolate.spawn import calls_spawn
    from cudadiag.isolate.verdict import verdict_line

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
    try:
        result = _isolated_run(shell, plan, target, args, env, recorded, restore_cell)
    except (OSError, ValueError) as exc:  # Windows, no interpreter
        raise UsageError(f"cannot run isolated: {exc}") from None
    ended = not (result.timed_out or result.interrupted)
    verdict = verdict_line(original, result.incident) if original and ended else None
    print(render.render_isolated(result, plan.describe(), verdict))
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
        raise UsageError("--from-checkpoint and --restore go together: %cuda_isolate "
                         "--from-checkpoint latest --restore model=ckpt['model']")
    assignments = []
    for quoted in pairs:
        # IPython's magic parser keeps the quotes around a spaced argument
        item = quoted[1:-1] if len(quoted) > 1 and quoted[0] == quoted[-1] in "'\"" else quoted
        name, sep, expression = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier() or not expression:
            raise UsageError(f"--restore takes NAME=EXPR, e.g. model=ckpt['model'], not {item!r}")
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
    print(f"checkpoint: {chosen.path} (step {chosen.step}, written {chosen.written_at}), "
          "trusted", flush=True)
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
        print(SPAWN_LINE + (NPROC_IGNORED if args.nproc_per_node is not None else ""),
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


def recorded_batch(which: str) -> tuple[int, Any]:
    """The (step, CPU copy) kept by the latest watch() of this kernel."""
    from cudadiag.batch import latest_watch  # loaded already when watch() ran

    record = latest_watch()
    if record is None:
        raise UsageError("--batch: no watch() has recorded a batch in this kernel; wrap the "
                         "loop's iterable: for batch in cudadiag.watch(loader): ...")
    try:
        step = which if which == "last" else int(which)
        kept = record.batch_at(step)
    except (LookupError, ValueError) as exc:
        raise UsageError(f"--batch {which}: {exc}") from None
    print(f"replaying step {kept.step} of watch {record.name!r} only")
    return kept.step, kept.batch


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"--env takes KEY=VALUE, not {item!r}")
    return key, value


def load(shell: Any) -> None:
    """Register the callbacks and magics on `shell`; ingest the error that just happened;
    start the kernel's warm interpreter in the background."""
    from cudadiag import checkpoint
    from cudadiag.isolate import warm

    capture = capture_for(shell)
    capture.register()
    checkpoint.follow_incidents(capture)
    shell.register_magics(CudadiagMagics)
    from cudadiag.kernel.compare_magics import CompareMagics
    from cudadiag.steps import start_profiling

    shell.register_magics(CompareMagics)
    # the running cell is the last of the raw history (IPython 8 and 9 differ on when
    # execution_count moves)
    start_profiling(lambda: len(shell.history_manager.input_hist_raw) - 1)
    capture.ingest_last_error()
    warm.start()


def unload(shell: Any) -> None:
    """Remove the callbacks and the sticky warnings from `shell`; stop the kernel's warm
    interpreter; profile no more watch() steps."""
    from cudadiag import checkpoint
    from cudadiag.isolate import warm
    from cudadiag.steps import stop_profiling

    stop_profiling()
    capture = _captures.pop(id(shell), None)
    if capture is not None:
        capture.unregister()
        if checkpoint.followed_incidents() is capture:
            checkpoint.follow_incidents(None)
    warm.stop()
