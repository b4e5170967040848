"""The `cudadiag` command: environment, the incident log, and a CPU demo."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cudadiag import i18n
from cudadiag.durable import unwritable, write_failure
from cudadiag.errors import CudadiagError, ExportError, MinimizeInterrupted
from cudadiag.i18n import _
from cudadiag.interrupts import interrupt_pressed, remember_interrupts, restore_interrupts
from cudadiag.log.options import add_listing_options
from cudadiag.options.commands import add_command
from cudadiag.options.localized import LocalizedParser
from cudadiag.options.option import add_options
from cudadiag.options.runs import (
    NO_BLOCKING,
    NO_PRECHECK,
    NODE_RANK,
    NPROC_PER_NODE,
    RECORD_DIR,
    TIMEOUT,
)
from cudadiag.repro.options import add_export_options, add_report_options

if TYPE_CHECKING:
    from types import ModuleType

    from cudadiag.commands import ExportOptions
    from cudadiag.incident import EnvInfo, Incident
    from cudadiag.isolate.ranks import TorchrunJob
    from cudadiag.isolate.result import IsolatedResult
    from cudadiag.log.store import IncidentStore

DEMO_CELLS = (
    "%load_ext cudadiag",
    "%xmode Minimal",
    "import torch, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()  # CPU tensors behave like a CUDA device",
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(8, 4)           # 4 classes: 0..3\n"
    "x = torch.randn(3, 8)\n"
    "target = torch.tensor([0, 2, 4])         # 4 is not a class\n"
    "loss = F.cross_entropy(model(x), target) # the kernel fails here, silently",
    "print('loss', loss.item())               # ...and the error surfaces here",
    "y = torch.ones(2) * 2                    # every later cell is warned",
    "%cudadiag show",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `cudadiag` command; returns its exit status (2 for bad arguments, 130 when
    interrupted)."""
    previous = remember_interrupts()
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        words, said = _take_language(words)
        if said is not None:
            print(said, file=sys.stderr if words else sys.stdout)
            return 0 if not words else 2
        parser = _parser()  # after --lang: its descriptions are in the language chosen
        args = _multi_rank_run(words) or parser.parse_args(words)
        status: int = args.handler(args)
        return status
    except KeyboardInterrupt:  # a running script's group is killed by the runner already
        print(_("cudadiag: interrupted"), file=sys.stderr)
        return 128 + signal.SIGINT
    except ImportError:
        if not interrupt_pressed():  # an import that Ctrl-C cut short fails again later
            raise
        print(_("cudadiag: interrupted"), file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # `cudadiag show ID | head`: the reader left, as with any tool
        _silence_stdout()
        return 128 + signal.SIGPIPE
    finally:
        restore_interrupts(previous)


def _take_language(words: list[str]) -> tuple[list[str], str | None]:
    """Read `--lang X` / `--lang=X` before the command: choose X for this command. Return
    the other words, and the line to print instead of running anything when `--lang` comes
    alone (which language holds, and why) or names a language cudadiag does not speak."""
    if not words or not (words[0] == "--lang" or words[0].startswith("--lang=")):
        return words, None
    first, _, value = words[0].partition("=")
    rest = words[1:]
    if not value and rest and not rest[0].startswith("-"):
        value, rest = rest[0], rest[1:]
    if not value:
        return rest, i18n.describe(i18n.current())
    try:
        i18n.choose(None if value == "auto" else value)
    except ValueError as exc:
        return [first], f"cudadiag: {exc}"
    os.environ["CUDADIAG_LANG"] = i18n.current_code()  # the processes it starts speak it too
    return rest, (i18n.describe(i18n.current()) if not rest else None)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush of a closed pipe
    prints no second error at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _parser() -> argparse.ArgumentParser:
    parser = LocalizedParser(
        prog="cudadiag",
        description=_("Diagnose PyTorch CUDA errors: environment, incident log, demo."),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    env = sub.add_parser("env", help=_("print the environment (versions, backend, device)"),
                         description=_("Print versions, backend and device of this machine."))
    env.add_argument("--json", action="store_true", help=_("print JSON instead of text"))
    env.add_argument("--check", action="store_true",
                     help=_("check that the build runs here: device capability vs the build's "
                            "arch list, driver vs the build's CUDA, ROCm gfx targets, "
                            "torchvision / torchaudio / triton and compiled extensions vs "
                            "torch (exit status 1 when a check fails)"))
    env.add_argument("--capability", metavar="X.Y",
                     help=_("with --check: the capability of the GPU the program will run on "
                            "(8.6, sm_86, or a ROCm gfx target), instead of the GPUs found "
                            "here"))
    env.set_defaults(handler=_cmd_env, parser=env)
    incidents = add_command(
        sub, "incidents",
        description=_("List the incidents of the log, oldest first (filters combine), show "
                      "what the log holds and its retention (--stats), or prune what the "
                      "retention no longer keeps (--prune)."))
    add_listing_options(incidents)
    incidents.set_defaults(handler=_cmd_incidents)
    show = add_command(sub, "show", description=_("Print one incident in full."))
    show.set_defaults(handler=_cmd_show)
    run = sub.add_parser(
        "run", help=_("run a script with blocking launches, the op tracer and the prechecks"),
        description=_("Run SCRIPT the way `CUDA_LAUNCH_BLOCKING=1 python SCRIPT` does, plus "
                    "cudadiag's op tracer, index prechecks and watch(): its output and its "
                    "traceback print as Python prints them, then the diagnosis, and the "
                    "incident is stored. The exit status is the script's (130 after Ctrl-C). "
                    "Processes it leaves behind are killed and named. A leading "
                    "interpreter is accepted: `cudadiag run -- python train.py --epochs 1`, "
                    "`cudadiag run -- python -m package.module`. With --nproc-per-node N the "
                    "script runs as N ranks under torchrun (torch.distributed.run), each with "
                    "the tracer and prechecks; torchrun's own options go before `--`: "
                    "`cudadiag run --nproc-per-node 2 -- train.py`; without rendezvous options "
                    "it adds --standalone (a free port, where torchrun's default 29500 would "
                    "collide with another job on the machine). The incident "
                    "names the rank that failed first; the other ranks' errors are marked "
                    "consequences. The exit status is then torchrun's. With --nnodes N "
                    "--node-rank K --rdzv-backend c10d --rdzv-endpoint HOST:PORT, one such "
                    "command per node, the nodes' agents agree on the job's first failure "
                    "through the rendezvous store (or --record-dir) and each prints the same "
                    "summary; under srun, SLURM's variables give what is left out."),
    )
    _add_run_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="[--] SCRIPT [ARGS...]")
    run.set_defaults(handler=_cmd_run, parser=run, torchrun=[])
    report = add_command(sub, "report", description=_("Print a Markdown report ready for an issue "
                                           "tracker, with personal data and needless paths "
                                           "removed."))
    add_report_options(report)
    report.set_defaults(handler=_cmd_report)
    export = add_command(
        sub, "export",
        description=_("Minimize the cells of an isolated incident, or the top-level statements "
                    "of a `cudadiag run` script (each candidate in a fresh process, in the "
                    "program's working directory), write a repro notebook (.ipynb) or script "
                    "(.py) and check it reproduces in a fresh kernel or process. Ctrl-C stops "
                    "the minimization early and keeps the best candidate so far."))
    export.add_argument("id", help=_("incident id or unique prefix"))
    export.add_argument("path", help=_("the repro to write (PATH.ipynb or PATH.py), in an "
                                       "existing directory"))
    add_export_options(export)
    export.add_argument("--no-verify", action="store_true",
                        help=_("write the repro without executing it"))
    export.set_defaults(handler=_cmd_export, parser=export)
    explain = add_command(
        sub, "explain",
        description=_("Read a log as you would paste it (a SLURM output, a notebook traceback, "
                    "an issue body, several ranks interleaved), find the first relevant "
                    "error of the cascade and the rank that failed first, and print the "
                    "diagnosis. Exit status: 0 when an error was found, 1 when none, 2 for "
                    "bad arguments."))
    explain.add_argument("file", nargs="?", default="-",
                         help=_("the log (a .gz file is decompressed); - or nothing: standard "
                                "input"))
    explain.add_argument("--json", action="store_true",
                         help=_("print the diagnosis as JSON (family, sticky, rank, evidence...)"))
    explain.set_defaults(handler=_cmd_explain)
    checkpoints = add_command(
        sub, "checkpoints",
        description=_("List the checkpoints of DIRECTORY, newest first, each trusted or rejected "
                    "with its reason (no manifest, hash mismatch, non-finite tensor, written "
                    "after the error). Exit status: 0 when one is trusted, 1 when none is, 2 "
                    "for bad arguments."))
    checkpoints.add_argument("directory", nargs="?", default=".",
                             help=_("the checkpoint directory (default: the current directory)"))
    checkpoints.add_argument("--json", action="store_true",
                             help=_("print the verdicts as JSON"))
    checkpoints.set_defaults(handler=_cmd_checkpoints)
    demo = sub.add_parser(
        "demo", help=_("run a simulated device-side assert in an IPython shell on the CPU"),
        description=_("Run the method's worked example (4 classes, targets [0, 2, 4]) on a "
                      "simulated CUDA device in an IPython shell, and print what cudadiag "
                      "captured."),
    )
    demo.add_argument("--keep", action="store_true",
                      help=_("record the demo's incident in your incident log"))
    demo.set_defaults(handler=_cmd_demo)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    add_options(run, NO_BLOCKING, TIMEOUT)
    run.add_argument("--json", metavar="PATH", help=_("also write the incident as JSON here"))
    add_options(run, NO_PRECHECK, NPROC_PER_NODE, NODE_RANK, RECORD_DIR)


NNODES = ("--nnodes",)
"""torchrun's option that makes a run a node's part of a job across nodes."""


def _multi_rank_run(words: list[str]) -> argparse.Namespace | None:
    """For `run --nproc-per-node N [torchrun options] -- SCRIPT ...` (or `--nnodes N`):
    the arguments, with the options cudadiag does not know (torchrun's) kept apart; None for
    anything else."""
    if words[:1] != ["run"] or "--" not in words:
        return None
    head = words[1:words.index("--")]
    if not any(w.split("=")[0] in (*NPROC_PER_NODE.flags, *NNODES) for w in head):
        return None
    run = LocalizedParser(prog="cudadiag run", allow_abbrev=False)
    _add_run_options(run)
    args, torchrun = run.parse_known_args(head)
    args.command = words[words.index("--"):]
    args.torchrun = torchrun
    args.handler, args.parser = _cmd_run, run
    return args


def _cmd_run(args: argparse.Namespace) -> int:
    from cudadiag.isolate.runner import run_script

    python, target, argv, module = _split_command(args.command)
    if target is None:
        parser: argparse.ArgumentParser = args.parser
        parser.error(_("name the script to run: cudadiag run [--] [python] SCRIPT [ARGS...]"
                       " or cudadiag run -- python -m MODULE [ARGS...]"))
    if not module and not os.path.exists(target):
        print(_("cudadiag run: {target}: no such script").format(target=target), file=sys.stderr)
        return 2
    if not module and os.path.isdir(target) and not os.path.isfile(
            os.path.join(target, "__main__.py")):
        print(_("cudadiag run: {target} is a folder, not a script: name the script in it "
                "(cudadiag run -- python {script}) or run a package with -m (cudadiag run "
                "-- python -m PACKAGE)").format(target=target,
                                                script=os.path.join(target, "train.py")),
              file=sys.stderr)
        return 2
    json_refused = unwritable(Path(args.json)) if args.json else None
    if json_refused:
        print(f"cudadiag run: --json {args.json}: {json_refused}", file=sys.stderr)
        return 2
    try:
        ranks = _torchrun_job(args, python)
        result = run_script(target, argv, module=module, python=python,
                            blocking=not args.no_blocking, timeout=args.timeout,
                            precheck=not args.no_precheck, ranks=ranks)
    except BrokenPipeError:
        raise  # the reader of our output left: main() ends as any tool in a pipe does
    except (OSError, ValueError) as exc:
        print(f"cudadiag run: {exc}", file=sys.stderr)
        return 2
    if "No module named 'cudadiag" in result.stderr and python:
        print(_("cudadiag run: {python} cannot import cudadiag; install it there or leave "
                "the interpreter out").format(python=python), file=sys.stderr)
    if result.incident is not None:
        _print_incident(result.incident, args.json)
    elif result.message:
        print(result.message, file=sys.stderr)
    return _exit_status(result)


def _print_incident(incident: Incident, json_path: str | None) -> None:
    """Print the run's incident in short (and write its JSON to `json_path`); the renderer
    and the log are imported only here, where a run failed."""
    from cudadiag.commands import incident_json
    from cudadiag.log.store import IncidentStore
    from cudadiag.ui.render import SHOW_IN_TERMINAL, render_short

    saved = IncidentStore().is_saved(incident.id)
    print(render_short(incident, show=SHOW_IN_TERMINAL if saved else None, width=0),
          file=sys.stderr)
    if json_path:
        _write_json(Path(json_path), incident_json(incident))


def _write_json(path: Path, text: str) -> None:
    """Write the incident's JSON; a failure is one line (the incident is in the log)."""
    try:
        path.write_text(text)
    except OSError as exc:
        print(_("cudadiag run: {failure} (the incident is in the log: `cudadiag show "
                "--json`)").format(failure=write_failure(path.name, path.parent, exc)),
              file=sys.stderr)


def _torchrun_job(args: argparse.Namespace, python: str | None) -> TorchrunJob | None:
    """The torchrun job for `--nproc-per-node N` (a node's part of a job across nodes with
    `--nnodes N`), None without either. Raises TorchrunOptionsError (a ValueError) for
    options torchrun would refuse or a job across nodes that cannot meet."""
    if args.nproc_per_node is None and not args.torchrun and args.node_rank is None and \
            args.record_dir is None:
        return None
    from cudadiag.isolate.nodeplan import plan_nodes
    from cudadiag.isolate.nodes import NodesJob
    from cudadiag.isolate.ranks import TorchrunJob, check_torchrun_options, with_own_rendezvous

    options = [*(["--nproc-per-node", args.nproc_per_node] if args.nproc_per_node else []),
               *args.torchrun]
    check_torchrun_options(options)
    options, plan = plan_nodes(options, args.node_rank, args.record_dir, os.environ)
    if plan is None:
        return TorchrunJob(with_own_rendezvous(options), python or sys.executable)
    return NodesJob(options, python or sys.executable, plan=plan)


def _exit_status(result: IsolatedResult) -> int:
    """The status a shell would report for the script run plainly: its own, 128 + N for a
    death by signal N, 130 when the user interrupted it (Ctrl-C)."""
    if result.interrupted:
        return 128 + signal.SIGINT
    if result.returncode is None:
        return 1
    return 128 - result.returncode if result.returncode < 0 else result.returncode


def _split_command(command: list[str]) -> tuple[str | None, str | None, list[str], bool]:
    """(interpreter or None, script or module, its arguments, is_module) from the words
    after `cudadiag run`."""
    words = command[1:] if command[:1] == ["--"] else list(command)
    python = None
    if words and re.fullmatch(r"python[\d.]*", os.path.basename(words[0])):
        python = shutil.which(words[0]) or words[0]
        words = words[1:]
    if words[:1] == ["-m"]:
        return python, (words[1] if len(words) > 1 else None), words[2:], True
    return python, (words[0] if words else None), words[1:], False


def _cmd_report(args: argparse.Namespace) -> int:
    from cudadiag import commands

    try:
        with i18n.using(args.lang or i18n.current_code()):
            print(commands.report(_store(), args.id))
    except CudadiagError as exc:
        print(f"cudadiag report: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from cudadiag import commands
    from cudadiag.repro.export import stored_inputs
    from cudadiag.repro.rankjob import is_multi_rank
    from cudadiag.repro.view import render_export

    options = commands.ExportOptions(
        incident=args.id, path=Path(args.path), max_trials=args.max_trials,
        timeout=args.timeout, bundle=args.bundle, verify=not args.no_verify)
    store = _store()
    try:
        incident, path = commands.export_target(store, options)
    except ExportError as exc:  # the path: a usage error
        print(f"cudadiag export: {exc}", file=sys.stderr)
        return 2
    except CudadiagError as exc:
        print(f"cudadiag export: {exc}", file=sys.stderr)
        return 1
    if is_multi_rank(incident):
        return _export_rank_job(incident, path, options)
    try:
        inputs = stored_inputs(incident, store)
        print(commands.export_intro(incident, inputs, options.timeout), flush=True)
        minimized, exported = commands.export(
            store, incident, path, inputs, options,
            commands.progress_line(options.max_trials, options.timeout))
    except MinimizeInterrupted:
        print(f"\ncudadiag export: {_(commands.STOPPED_EARLY)}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\n" + _("cudadiag export: stopped early: interrupted while writing the repro; "
                       "nothing was written"), file=sys.stderr)
        return 130
    except CudadiagError as exc:
        print(f"\ncudadiag export: {exc}", file=sys.stderr)
        return 1
    print(render_export(minimized, exported))
    return 0 if exported.reproduces is not False else 1


RANK_JOB_VERIFY_S = 300.0
"""The least time a multi-rank repro's check gets: every rank imports torch."""


def _export_rank_job(incident: Incident, path: Path, options: ExportOptions) -> int:
    """`cudadiag export` of a multi-rank job: the job as a repro, or why it cannot be."""
    from cudadiag.repro.rankjob import export_rank_job, refusal
    from cudadiag.repro.view import render_rank_export

    if path.suffix != ".py":
        print(_("cudadiag export: {path}: a multi-rank job is exported as a script that runs "
                "it under torchrun: give PATH.py").format(path=path), file=sys.stderr)
        return 2
    reason = refusal(incident)
    if reason is not None:
        print(_("cudadiag export: incident {id} cannot be exported as a repro: {reason}").format(
            id=incident.id, reason=reason), file=sys.stderr)
        return 1
    print(_("exporting incident {id} as a job of its ranks under torchrun (not minimized: "
            "the ranks need each other)...").format(id=incident.id), flush=True)
    try:
        export = export_rank_job(incident, path, verify=options.verify,
                                 timeout=max(options.timeout, RANK_JOB_VERIFY_S))
    except KeyboardInterrupt:
        print("\n" + _("cudadiag export: stopped: nothing was written"), file=sys.stderr)
        return 130
    except CudadiagError as exc:
        print(f"cudadiag export: {exc}", file=sys.stderr)
        return 1
    print(render_rank_export(export))
    return 0 if export.reproduces is not False else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    from cudadiag import commands

    if args.file == "-" and sys.stdin.isatty():
        print(_("cudadiag explain: give a log file, or pipe or paste the text into standard "
                "input (end with Ctrl-D)"), file=sys.stderr)
    try:
        explained = (commands.explain_standard_input() if args.file == "-"
                     else commands.explain_file(args.file))
    except CudadiagError as exc:
        print(f"cudadiag explain: {exc}", file=sys.stderr)
        return 2
    print(explained.text(as_json=args.json))
    return 0 if explained.found else 1


def _cmd_env(args: argparse.Namespace) -> int:
    import torch

    from cudadiag.env import collect_env
    from cudadiag.ui.render import environment_table

    if args.capability is not None and not args.check:
        args.parser.error(_("--capability goes with --check: cudadiag env --check --capability "
                            "X.Y"))
    _initialise_cuda_if_present(torch)
    if args.check:
        return _check_env(collect_env(), args)
    env = collect_env()
    if args.json:
        info = dataclasses.asdict(env)
        info.pop("compat")  # `cudadiag env --check` reports it
        print(json.dumps(info, indent=2))
    else:
        print(environment_table(env))
    return 0


def _check_env(env: EnvInfo, args: argparse.Namespace) -> int:
    """`cudadiag env --check`: print each check; 1 when one fails, 2 for a bad capability."""
    from cudadiag import compat
    from cudadiag.ui.render import compat_lines

    try:
        checks = compat.run_checks(compat.gather_facts(env), capability=args.capability)
    except ValueError as exc:
        print(f"cudadiag env: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
    else:
        print("\n".join(compat_lines(checks)))
    return 1 if compat.failed(checks) else 0


def _initialise_cuda_if_present(torch: ModuleType) -> None:
    """This command is its own process: initialising CUDA here touches nobody's state, and
    lets the device name and capability be reported."""
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        return
    try:
        if torch.cuda.is_available():
            torch.cuda.init()
    except Exception as exc:  # a broken driver is part of what this command reports
        print(_("cudadiag: CUDA could not be initialised: {error}").format(error=exc),
              file=sys.stderr)


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    from cudadiag import checkpoint
    from cudadiag.checkpoint.view import render_checkpoints
    from cudadiag.errors import IncidentNotFound

    try:
        verdicts = checkpoint.review(args.directory, before=args.before)
    except (NotADirectoryError, IncidentNotFound, ValueError) as exc:
        print(f"cudadiag checkpoints: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"path": str(v.path), "trusted": v.trusted, "reason": v.reason,
                           "step": v.step, "written_at": v.written_at} for v in verdicts],
                         indent=2))
    else:
        print(render_checkpoints(args.directory, verdicts))
    return 0 if any(v.trusted for v in verdicts) else 1


def _cmd_incidents(args: argparse.Namespace) -> int:
    from cudadiag.log.listing import run_listing

    try:
        print(run_listing(args))
    except CudadiagError as exc:
        print(f"cudadiag incidents: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from cudadiag import commands

    try:
        print(commands.show(_store(), commands.ShowOptions(args.id, as_json=args.json)))
    except CudadiagError as exc:
        print(f"cudadiag show: {exc}", file=sys.stderr)
        return 1
    return 0


def _store() -> IncidentStore:
    from cudadiag.log.store import IncidentStore

    return IncidentStore()


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.keep:
        _run_demo()
        return 0
    with tempfile.TemporaryDirectory(prefix="cudadiag-demo-") as home:
        previous = os.environ.get("CUDADIAG_HOME")
        os.environ["CUDADIAG_HOME"] = home
        try:
            _run_demo()
        finally:
            if previous is None:
                del os.environ["CUDADIAG_HOME"]
            else:
                os.environ["CUDADIAG_HOME"] = previous
    print(_("cudadiag demo: the demo's incident went to a temporary log, now removed (its "
            "`show` hint no longer applies); run `cudadiag demo --keep` to record it in your "
            "incident log, then `cudadiag incidents` and `cudadiag show ID` find it."))
    return 0


def _run_demo() -> None:
    """Run DEMO_CELLS in an IPython shell, echoing each cell as a terminal would."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    print(_("cudadiag demo: a simulated CUDA device on the CPU (no GPU needed)") + "\n")
    for source in DEMO_CELLS:
        prompt = f"In [{shell.execution_count}]: "
        # on stderr, like cudadiag's own notes: one pipe keeps them in order
        print(prompt + source.replace("\n", "\n" + " " * (len(prompt) - 5) + "...: "),
              file=sys.stderr)
        sys.stderr.flush()
        shell.run_cell(source, store_history=True)
        sys.stdout.flush()
        sys.stderr.flush()
        print()


if __name__ == "__main__":
    sys.exit(main())
