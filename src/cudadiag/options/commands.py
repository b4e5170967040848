"""The subcommands `%cudadiag` and `cudadiag` share, each with its help and its arguments
defined once; each surface adds what only it has (the CLI's handlers and descriptions, the
magic's defaults taken from the kernel)."""

from __future__ import annotations

import argparse
from typing import Any

from cudadiag.options.option import option

INCIDENT_ID = option("id", nargs="?",
                     help="incident id or a unique prefix of it (default: the newest)")
AS_JSON = option("--json", action="store_true", help="print JSON instead of text")
BEFORE = option("--before", metavar="ID",
                help="trust only checkpoints written before incident ID (in a notebook, "
                     "default: the first sticky incident of the kernel)")

HELP = {
    "incidents": "list recorded incidents, oldest first; --stats, --prune",
    "show": "print one incident in full",
    "report": "print a scrubbed Markdown report of an incident, for an issue tracker",
    "export": "minimize an incident into a verified repro notebook or script",
    "checkpoints": "list the checkpoints of a directory with their verdicts (trusted or "
                   "why not)",
    "explain": "diagnose the first CUDA/PyTorch error of a log file or pasted text (in a "
               "notebook, with no argument: the last error)",
}
"""One line per shared subcommand, as both usages list it."""


def add_command(sub: Any, name: str, **settings: Any) -> argparse.ArgumentParser:
    """Add the shared subcommand `name` to the subparsers `sub`, with its help line and the
    arguments both surfaces take (`settings` go to add_parser: a description). Returns its
    parser, for what one surface adds."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=HELP[name], **settings)
    for each in _ARGUMENTS.get(name, ()):
        each.add_to(parser)
    return parser


_ARGUMENTS = {
    "show": (INCIDENT_ID, AS_JSON),
    "report": (INCIDENT_ID,),
    "checkpoints": (BEFORE,),
}
