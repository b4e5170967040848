"""The subcommands `%cudadiag` and `cudadiag` share, each with its help and its arguments
defined once; each surface adds what only it has (the CLI's handlers and descriptions, the
magic's defaults taken from the kernel)."""

from __future__ import annotations

import argparse
from typing import Any

from cudadiag.i18n import N_, _
from cudadiag.options.option import option

INCIDENT_ID = option("id", nargs="?",
                     help=N_("incident id or a unique prefix of it (default: the newest)"))
AS_JSON = option("--json", action="store_true", help=N_("print JSON instead of text"))
BEFORE = option("--before", metavar="ID",
                help=N_("trust only checkpoints written before incident ID (in a notebook, "
                        "default: the first sticky incident of the kernel)"))

HELP = {
    "incidents": N_("list recorded incidents, oldest first; --stats, --prune"),
    "show": N_("print one incident in full"),
    "report": N_("print a scrubbed Markdown report of an incident, for an issue tracker"),
    "export": N_("minimize an incident into a verified repro notebook or script"),
    "checkpoints": N_("list the checkpoints of a directory with their verdicts (trusted or "
                      "why not)"),
    "explain": N_("diagnose the first CUDA/PyTorch error of a log file or pasted text (in a "
                  "notebook, with no argument: the last error)"),
}
"""One line per shared subcommand, as both usages list it (in English: `_(HELP[name])` in
the reader's language, as add_command adds it)."""


def add_command(sub: Any, name: str, **settings: Any) -> argparse.ArgumentParser:
    """Add the shared subcommand `name` to the subparsers `sub`, with its help line and the
    arguments both surfaces take (`settings` go to add_parser: a description). Returns its
    parser, for what one surface adds."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=_(HELP[name]), **settings)
    for each in _ARGUMENTS.get(name, ()):
        each.add_to(parser)
    return parser


_ARGUMENTS = {
    "show": (INCIDENT_ID, AS_JSON),
    "report": (INCIDENT_ID,),
    "checkpoints": (BEFORE,),
}
