"""Reading a magic's line: argparse that reports bad input as IPython's UsageError, and a
line split as a shell splits it."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring


class MagicParser(argparse.ArgumentParser):
    """argparse that reports bad input as an IPython UsageError instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(message or self.format_help())


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
