"""One command-line option, defined once and added wherever it is taken: to an argparse parser
(the `cudadiag` command, `%cudadiag validate`) or as an IPython magic argument (the
`@magic_arguments` magics)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cudadiag.i18n import _


@dataclass(frozen=True)
class Option:
    """An option's flags (or a positional's name) and argparse's settings for it."""

    flags: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser | Any, **overrides: Any) -> None:
        """Add the option to `parser` (or an argument group), with `overrides` of its
        settings (a default that differs on one surface), its help in the language of the
        moment."""
        parser.add_argument(*self.flags, **self.translated(**overrides))

    def decorate(self, func: Any) -> Any:
        """Return `func` with the option as an IPython magic argument, its help in English
        (the magic's help is written in the language of the moment when it is shown:
        options/magic_help.py)."""
        from IPython.core.magic_arguments import argument  # not for the `cudadiag` command

        return argument(*self.flags, **self.settings)(func)

    def translated(self, **overrides: Any) -> dict[str, Any]:
        """Return the settings with `overrides`, the help (marked with N_ where the option
        is defined) in the language of the moment."""
        settings = {**self.settings, **overrides}
        if isinstance(settings.get("help"), str):
            settings["help"] = _(settings["help"])
        return settings


def option(*flags: str, **settings: Any) -> Option:
    """Return the Option of `flags` with argparse's `settings` (help, type, metavar...); its
    help is an English message marked with N_, translated where the option is added."""
    return Option(flags, settings)


def add_options(parser: argparse.ArgumentParser | Any, *options: Option) -> None:
    """Add each of `options` to `parser`, in order."""
    for each in options:
        each.add_to(parser)


def magic_options(*options: Option) -> Callable[[Any], Any]:
    """Return a decorator that adds `options`, in order, as IPython magic arguments (below
    `@magic_arguments()`)."""
    def decorate(func: Any) -> Any:
        for each in reversed(options):
            func = each.decorate(func)
        return func
    return decorate
