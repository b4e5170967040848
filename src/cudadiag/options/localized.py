"""argparse in the language of the moment: its own words (`usage:`, `error:`, the headings
and the -h line of a help, its error messages) through cudadiag's catalogue, for the
`cudadiag` command and the `%cudadiag` magic alike. English is argparse's own text, unchanged.

argparse writes its words in English whatever the language (Python's gettext domain, which no
catalogue of ours feeds), so they are written again where they leave a parser: the usage
prefix, a section's heading and the -h line in the formatter, an error in `error`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from cudadiag.i18n import N_, _, current_code
from cudadiag.i18n.language import DEFAULT

ARGPARSE_MESSAGES = (
    (r"argument (?P<name>\S+): (?P<message>.*)", N_("argument {name}: {message}")),
    (r"the following arguments are required: (?P<names>.*)",
     N_("the following arguments are required: {names}")),
    (r"unrecognized arguments: (?P<words>.*)", N_("unrecognized arguments: {words}")),
    (r"invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)",
     N_("invalid choice: {value} (choose from {choices})")),
    (r"invalid (?P<type>\S+) value: (?P<value>.*)", N_("invalid {type} value: {value}")),
    (r"expected one argument", N_("expected one argument")),
    (r"expected at most one argument", N_("expected at most one argument")),
    (r"expected at least one argument", N_("expected at least one argument")),
    (r"expected (?P<count>\d+) arguments?", N_("expected {count} argument(s)")),
    (r"not allowed with argument (?P<other>.*)", N_("not allowed with argument {other}")),
    (r"ignored explicit argument (?P<value>.*)", N_("ignored explicit argument {value}")),
    (r"one of the arguments (?P<names>.*) is required",
     N_("one of the arguments {names} is required")),
    (r"ambiguous option: (?P<option>\S+) could match (?P<matches>.*)",
     N_("ambiguous option: {option} could match {matches}")),
)
"""argparse's own error messages (Python's argparse, its English wording) and the same in
the catalogue: a message is written again from its parts."""
HEADINGS = {"positional arguments": N_("positional arguments:"), "options": N_("options:")}
"""argparse's headings of a help (written with their colon by the formatter)."""
HELP_LINE = N_("show this help message and exit")
"""The -h line of every parser."""


def argparse_message(message: str) -> str:
    """Return argparse's error `message` in the language of the moment: each message of
    ARGPARSE_MESSAGES is written again from its parts (an `argument X:` prefix holds one of
    cudadiag's own messages, already translated); any other message, and any in English,
    as it is."""
    if current_code() == DEFAULT:
        return message
    for pattern, template in ARGPARSE_MESSAGES:
        found = re.fullmatch(pattern, message, flags=re.DOTALL)
        if found:
            parts = found.groupdict()
            if "message" in parts:
                parts["message"] = argparse_message(parts["message"])
            return _(template).format(**parts)
    return message


class LocalizedFormatter(argparse.HelpFormatter):
    """argparse's help and usage, its own words in the language of the moment."""

    def add_usage(self, usage: str | None, actions: Iterable[argparse.Action],
                  groups: Iterable[Any], prefix: str | None = None) -> None:
        """Add the usage, after `usage: ` in the language of the moment."""
        super().add_usage(usage, actions, groups, _("usage: ") if prefix is None else prefix)

    def start_section(self, heading: str | None) -> None:
        """Start a section, argparse's headings in the language of the moment."""
        if heading in HEADINGS:
            heading = _(HEADINGS[heading]).removesuffix(":")
        super().start_section(heading)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        return _(HELP_LINE) if text == HELP_LINE else text


class LocalizedParser(argparse.ArgumentParser):
    """An ArgumentParser (its subcommands' too) whose help, usage and errors are in the
    language of the moment; English is argparse's own text."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", LocalizedFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print the usage and the error in the language of the moment, exit with status 2."""
        self.print_usage(sys.stderr)
        self.exit(2, _("{prog}: error: {message}").format(
            prog=self.prog, message=argparse_message(message)) + "\n")
