"""The `%cudadiag` magic: browse the incident log, explain, export, validate, checkpoints."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from cudadiag import commands, i18n
from cudadiag.capture.shell_state import capture_for, cell_history, plan_in_shell, recorded_batch
from cudadiag.errors import (
    CudadiagError,
    ExportError,
    IncidentNotFound,
    MinimizeError,
)
from cudadiag.i18n import N_, _
from cudadiag.log.options import add_listing_options
from cudadiag.log.store import IncidentStore
from cudadiag.options.commands import AS_JSON, HELP, INCIDENT_ID, add_command
from cudadiag.options.magic_help import localized_help
from cudadiag.options.parsing import MagicParser, split_line
from cudadiag.repro.options import add_export_options, add_report_options


def _parser() -> argparse.ArgumentParser:
    parser = MagicParser(prog="%cudadiag", description=_("Browse cudadiag's incident log."))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=MagicParser)
    add_listing_options(add_command(sub, "incidents"))
    add_command(sub, "show")
    panel = sub.add_parser("panel", help=_("show the incident panel"))
    INCIDENT_ID.add_to(panel)
    add_report_options(add_command(sub, "report"))
    export = add_command(sub, "export")
    export.add_argument("args", nargs="*", metavar="[ID] [PATH.ipynb|PATH.py]",
                        help=_("incident (default: the newest) and repro path (default: "
                               "repro-ID.ipynb)"))
    add_export_options(export)
    export.add_argument("--wait", action="store_true",
                        help=_("minimize in the foreground even in a notebook (for nbconvert "
                               "or papermill runs, which end with the last cell)"))
    checkpoints = add_command(sub, "checkpoints")
    checkpoints.add_argument("directory", nargs="?",
                             help=_("the checkpoint directory (default: where this kernel "
                                    "last saved with cudadiag.checkpoint.save)"))
    # read before this parser (their arguments are free text), listed so usage names them
    explain = sub.add_parser("explain", help=_(HELP["explain"]))
    AS_JSON.add_to(explain)
    explain.add_argument("what", nargs="*", metavar="FILE | TEXT",
                         help=_("a log file, or the text to explain (default: the last error "
                                "of this kernel)"))
    sub.add_parser("validate", help=_("re-run a loop's cell over the steps that matter"))
    attach = sub.add_parser("attach", help=_("add cudadiag's callbacks to every Hugging Face "
                                             "and Lightning Trainer (on), or stop (off)"))
    attach.add_argument("state", nargs="?", choices=("on", "off"),
                        help=_("on or off (default: say which)"))
    lang = sub.add_parser("lang", help=_("the language cudadiag writes in; choose one"))
    lang.add_argument("choice", nargs="?", choices=("ja", "en", "auto"),
                      help=_("ja, en, or auto (default: say which holds and why)"))
    return parser


CUDADIAG_HELP = N_("""Browse the incident log.

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
%cudadiag attach [on|off]          add cudadiag's callbacks to every Hugging Face and
                                   Lightning Trainer (the default), or stop
%cudadiag lang [ja|en|auto]        the language cudadiag writes in and why; choose
                                   one for this session (auto: the order of
                                   docs/languages.md)""")


@magics_class
class CudadiagMagics(Magics):
    """Magics registered by `%load_ext cudadiag`."""

    @localized_help(CUDADIAG_HELP)
    @line_magic
    def cudadiag(self, line: str) -> Any:
        """Browse the incident log (the help `%cudadiag?` shows: CUDADIAG_HELP)."""
        command, _space, rest = line.strip().partition(" ")
        if command == "lang":
            print(_language(rest.strip()))
            return
        if command == "explain":
            print(_explain(self.shell, rest.strip()))
            return
        if command == "validate":
            from cudadiag.validate.magic import validate_in_shell

            return validate_in_shell(self.shell, rest)
        args = _parser().parse_args(split_line(line))
        store = capture_for(self.shell).store
        try:
            if args.command == "incidents":
                from cudadiag.log.listing import run_listing

                print(run_listing(args, store))
            elif args.command == "show":
                print(commands.show(store, commands.ShowOptions(args.id, as_json=args.json)))
            elif args.command == "report":
                with i18n.using(args.lang or i18n.current_code()):
                    print(commands.report(store, args.id))
            elif args.command == "export":
                _export(self.shell, store, args)
            elif args.command == "checkpoints":
                _checkpoints(args)
            elif args.command == "attach":
                _attach(args.state)
            elif args.command == "panel":
                from IPython.display import display

                from cudadiag.panel.widget import Panel

                display(Panel(args.id, store=store, shell=self.shell))
        except CudadiagError as exc:
            raise UsageError(str(exc)) from None


def _language(choice: str) -> str:
    """`%cudadiag lang [ja|en|auto]`: choose the language for this session (and its isolated
    runs), then say which holds and why.

    Raises UsageError for a language cudadiag does not speak."""
    if choice:
        try:
            i18n.choose(None if choice == "auto" else choice)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return i18n.describe(i18n.current())


def _attach(state: str | None) -> None:
    """`%cudadiag attach [on|off]`: switch the trainers' callbacks, then say which holds."""
    from cudadiag.integrations import attach

    if state is not None:
        attach.set_adding(state == "on")
    print(_("cudadiag: Hugging Face and Lightning Trainers get cudadiag's callback "
            "(`%cudadiag attach off` stops it)") if attach.adding() else
          _("cudadiag: Hugging Face and Lightning Trainers get no cudadiag callback "
            "(`%cudadiag attach on` adds it again)"))


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
                                                _("the last error of this kernel"))
    except CudadiagError as exc:
        raise UsageError(str(exc)) from None
    return explained.text(as_json=as_json)


def _last_error_text(shell: Any) -> str:
    """The traceback of the last error of this kernel, the device's own lines first."""
    import traceback

    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if exc is None:
        raise UsageError(_("no error in this kernel yet: give a log file or the text to "
                           "explain, e.g. %cudadiag explain slurm-1234.out"))
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    current = capture_for(shell).current
    if current is not None and current.error.message in text:
        text = current.error.text + "\n" + text
    return text


def _checkpoints(args: Any) -> None:
    """`%cudadiag checkpoints [DIR]`: each checkpoint of DIR (default: where this kernel last
    saved) with its verdict."""
    from cudadiag import checkpoint
    from cudadiag.checkpoint.view import render_checkpoints

    directory = args.directory or checkpoint.last_saved_directory()
    if directory is None:
        raise UsageError(_("this kernel has saved no checkpoint with "
                           "cudadiag.checkpoint.save: name the directory, e.g. %cudadiag "
                           "checkpoints ckpts"))
    try:
        verdicts = checkpoint.review(directory, before=args.before)
    except (NotADirectoryError, IncidentNotFound, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(render_checkpoints(str(directory), verdicts))


def _export(shell: Any, store: IncidentStore, args: Any) -> None:
    """`%cudadiag export [ID] [PATH]`: in the background in a notebook kernel (`--wait`:
    in the foreground). Raises CudadiagError for a bad path, id or program."""
    from pathlib import Path

    from cudadiag.kernel.exporting import run_export

    # incident ids are hex: anything with a dot or a slash is meant as the repro's path
    paths = [a for a in args.args if "." in a or "/" in a]
    ids = [a for a in args.args if a not in paths]
    if len(paths) > 1 or len(ids) > 1:
        raise UsageError(_("usage: ") + "%cudadiag export [ID] [PATH.ipynb|PATH.py]")
    options = commands.ExportOptions(
        incident=ids[0] if ids else None, path=Path(paths[0]) if paths else None,
        max_trials=args.max_trials, timeout=args.timeout, bundle=args.bundle)
    incident, path = commands.export_target(store, options)
    inputs = _repro_inputs(shell, incident, store)
    try:
        run_export(shell, incident, path, inputs, options, store=store,
                   background=not args.wait)
    except MinimizeError as exc:
        raise UsageError(_("cannot minimize incident {id}: {error}").format(
            id=incident.id, error=exc)) from None
    except ExportError as exc:
        raise UsageError(_("cannot export incident {id}: {error}").format(
            id=incident.id, error=exc)) from None


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
        raise ExportError(_("incident {id} did not come from this kernel's history; export "
                            "an isolated incident instead").format(id=incident.id))
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

