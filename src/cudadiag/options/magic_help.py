"""The help of cudadiag's magics (`%cuda_isolate?`, `%%blocking_launch?`, `%cudadiag?`, the
tooltip of Shift+Tab in a notebook) in the language of the moment.

IPython writes a `@magic_arguments` magic's help once, when the magic is defined, into its
docstring; its `?` asks the magic's `getdoc()` first when there is one (IPython's
oinspect.getdoc, through the bound method, which forwards the attribute to the function).
So each magic keeps its help as an English message (marked with N_) and gets a `getdoc` that
writes the help again, as IPython does, in the language of the moment. English is what
IPython wrote at import, unchanged.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.magic_arguments import MagicArgumentParser, MagicHelpFormatter, real_name

from cudadiag.i18n import _
from cudadiag.i18n.width import wrap
from cudadiag.options.localized import LocalizedFormatter

Magic = TypeVar("Magic", bound=Callable[..., Any])


def localized_help(text: str) -> Callable[[Magic], Magic]:
    """Return a decorator that makes `text` (an English message marked with N_, dedented)
    the magic's docstring and gives the magic a `getdoc()` returning `magic_help` of it.
    Under `@magic_arguments()`, above the arguments: IPython then writes its English help
    from `text`."""
    def decorate(func: Magic) -> Magic:
        func.__doc__ = text
        func.getdoc = lambda: magic_help(func, text)  # type: ignore[attr-defined]
        return func
    return decorate


def magic_help(func: Callable[..., Any], text: str) -> str:
    """Return the help of the magic `func` in the language of the moment: `text`
    translated; for a `@magic_arguments` magic, after its usage and before its arguments,
    each argument's help translated, as IPython writes it (the same text in English)."""
    decorators = getattr(func, "decorators", None)
    if decorators is None:
        return _(text)
    parser = MagicArgumentParser(real_name(func), description=_(text),
                                 formatter_class=LocalizedMagicFormatter)
    group = None
    for decorator in reversed(decorators):  # as IPython's construct_parser adds them
        added = decorator.add_to_parser(parser, group)
        group = added if added is not None else group
    return parser.format_help()


class LocalizedMagicFormatter(MagicHelpFormatter, LocalizedFormatter):
    """IPython's help of a magic (its `::` usage, its placeholders in `<>`), argparse's
    headings and each argument's help (English, marked with N_) in the language of the
    moment, wrapped by display width."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return _(action.help) if action.help else action.help

    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse's own, but by display width: textwrap's rules without wide characters
        return wrap(self._whitespace_matcher.sub(" ", text).strip(), width, hyphens=True)
