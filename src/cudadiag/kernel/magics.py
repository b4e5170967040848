"""The `%cudadiag` magic and the extension's load/unload entry points."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from cudadiag.kernel.hooks import KernelCapture
from cudadiag.kernel.store import IncidentNotFound, IncidentStore
from cudadiag.ui import render

_captures: dict[int, KernelCapture] = {}


class _MagicParser(argparse.ArgumentParser):
    """argparse that reports bad input as an IPython UsageError instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(message or self.format_help())


def _parser() -> argparse.ArgumentParser:
    parser = _MagicParser(prog="%cudadiag", description="Browse cudadiag's incident log.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_MagicParser)
    listing = sub.add_parser("incidents", help="list recorded incidents, oldest first")
    listing.add_argument("--family", help="only incidents of this family (e.g. device_assert)")
    show = sub.add_parser("show", help="print one incident in full (default: the newest)")
    show.add_argument("id", nargs="?", help="incident id or a unique prefix of it")
    return parser


@magics_class
class CudadiagMagics(Magics):
    """Magics registered by `%load_ext cudadiag`."""

    @line_magic
    def cudadiag(self, line: str) -> None:
        """Browse the incident log.

        %cudadiag incidents [--family F]   list incidents (id, time, family, cell, summary)
        %cudadiag show [ID]                print one incident in full (default: the newest)
        """
        args = _parser().parse_args(shlex.split(line))
        store = capture_for(self.shell).store
        if args.command == "incidents":
            incidents = store.load()
            if args.family:
                incidents = [i for i in incidents if i.diagnosis.family == args.family]
            print(render.render_table(incidents))
        elif args.command == "show":
            try:
                print(render.render_text(store.get(args.id)))
            except IncidentNotFound as exc:
                raise UsageError(str(exc)) from None


def capture_for(shell: Any) -> KernelCapture:
    """Return the capture state of `shell`, creating it (unregistered) if needed."""
    capture = _captures.get(id(shell))
    if capture is None:
        capture = _captures[id(shell)] = KernelCapture(shell, IncidentStore())
    return capture


def load(shell: Any) -> None:
    """Register the callbacks and magics on `shell`; ingest the error that just happened."""
    capture = capture_for(shell)
    capture.register()
    shell.register_magics(CudadiagMagics)
    capture.ingest_last_error()


def unload(shell: Any) -> None:
    """Remove the callbacks and the sticky warnings from `shell`."""
    capture = _captures.pop(id(shell), None)
    if capture is not None:
        capture.unregister()
