"""Reading a magic's line: argparse that reports bad input as IPython's UsageError, and a
line split as a shell splits it."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from cudadiag.options.localized import LocalizedParser, argparse_message

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


class MagicParser(LocalizedParser):
    """argparse that reports bad input as an IPython UsageError instead of exiting, in the
    language of the moment (argparse's own words through options/localized.py)."""

    def error(self, message: str) -> NoReturn:
        """Raise UsageError: the error and the usage line, in the language of the moment."""
        raise UsageError(f"{argparse_message(message)}\n{self.format_usage()}")

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """Print nothing: after -h, exit() raises the help as the UsageError IPython shows
        (printed here too, it showed twice)."""

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        """Raise UsageError with `message` (or the help, after -h) instead of exiting."""
        raise UsageError(argparse_message(message) if message else self.format_help())


def split_line(line: str) -> list[str]:
    """The words of a magic's line as a shell splits them; UsageError for bad quoting."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{exc} in: {line}") from None


def parse_magic_line(magic: Any, line: str) -> Any:
    """parse_argstring, with bad quoting reported as a UsageError like any bad option, and
    argparse's error in the language of the moment."""
    try:
        return parse_argstring(magic, line)
    except UsageError as exc:
        raise UsageError(argparse_message(str(exc))) from None
    except ValueError as exc:
        raise UsageError(f"{exc} in: {line}") from None
