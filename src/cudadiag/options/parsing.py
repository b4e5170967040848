"""Reading a magic's line: argparse that reports bad input as IPython's UsageError, and a
line split as a shell splits it."""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from cudadiag.i18n import N_, _


class MagicParser(argparse.ArgumentParser):
    """argparse that reports bad input as an IPython UsageError instead of exiting, in the
    language of the moment (argparse's own words through ARGPARSE_MESSAGES)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{argparse_message(message)}\n{self._usage_line()}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(argparse_message(message) if message else self.format_help())

    def format_help(self) -> str:
        """argparse's help, its headings and the -h line in the language of the moment."""
        text = super().format_help()
        for english in _HELP_WORDS:
            text = text.replace(english, _(english))
        return self._localized_usage(text)

    def _usage_line(self) -> str:
        return self._localized_usage(self.format_usage())

    @staticmethod
    def _localized_usage(text: str) -> str:
        return _("usage: ") + text[len("usage: "):] if text.startswith("usage: ") else text


ARGPARSE_MESSAGES = (
    (r"argument (?P<name>\S+): (?P<message>.*)", N_("argument {name}: {message}")),
    (r"the following arguments are required: (?P<names>.*)",
     N_("the following arguments are required: {names}")),
    (r"unrecognized arguments: (?P<words>.*)", N_("unrecognized arguments: {words}")),
    (r"invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)",
     N_("invalid choice: {value} (choose from {choices})")),
    (r"invalid (?P<type>\S+) value: (?P<value>.*)", N_("invalid {type} value: {value}")),
    (r"expected one argument", N_("expected one argument")),
    (r"not allowed with argument (?P<other>.*)", N_("not allowed with argument {other}")),
)
"""argparse's own error messages (Python's argparse, its English wording) and the same in
the catalogue: argparse writes in English whatever the language, so a magic's usage error
is written again from these."""
_HELP_WORDS = (N_("positional arguments:"), N_("options:"),
               N_("show this help message and exit"))
"""argparse's words in a magic's help."""


def argparse_message(message: str) -> str:
    """Return argparse's error `message` in the language of the moment: each message of
    ARGPARSE_MESSAGES is written again from its parts (an `argument X:` prefix holds one of
    cudadiag's own messages, already translated); any other message as it is."""
    for pattern, template in ARGPARSE_MESSAGES:
        found = re.fullmatch(pattern, message, flags=re.DOTALL)
        if found:
            parts = found.groupdict()
            if "message" in parts:
                parts["message"] = argparse_message(parts["message"])
            return _(template).format(**parts)
    return message


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
