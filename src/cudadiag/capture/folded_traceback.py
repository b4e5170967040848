"""The traceback under a cell whose error cudadiag diagnosed: after the panel, folded to three
lines (how to unfold it, the last frame of the user's code, the message).

Installed through IPython's own hook for custom tracebacks (`InteractiveShell.set_custom_exc`),
so that the panel comes before the traceback and `%tb`, `%debug` and `sys.last_value` keep
working: the hook stores the error where IPython's own display does, and `%tb` prints it in
full. Frames of cudadiag itself at the end of a traceback (the simulated device raising at a
synchronising op, a guard) are left out of both forms, and of its causes' tracebacks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

from cudadiag.i18n import N_, _
from cudadiag.incident import ErrorInfo, exception_chain, is_user_file

UNFOLD = N_("Traceback folded by cudadiag (%tb shows it in full, %debug opens it):")
"""The first line of a folded traceback (shown with `_`)."""

Diagnose = Callable[[BaseException], bool]
"""Files the error as an incident and shows it; returns True when it did."""

_RED, _GREEN, _CYAN, _RESET = "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[39m"


def without_own_frames(tb: TracebackType | None) -> TracebackType | None:
    """Return `tb` cut after its last frame of user code when it ends in cudadiag's own
    code (or a library it called); `tb` itself otherwise. Raises nothing."""
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries or not _own(entries[-1]):
        return entries[0] if entries else None
    users = [n for n, entry in enumerate(entries) if is_user_file(_file(entry))]
    if not users:
        return entries[0]
    kept: TracebackType | None = None
    for entry in reversed(entries[: users[-1] + 1]):
        kept = TracebackType(kept, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return kept


def folded(shell: Any, value: BaseException) -> list[str]:
    """Return the folded traceback of `value` (its own, `__traceback__`) as IPython's
    structured traceback (one element): three lines, UNFOLD, the last frame of the user's
    code (a cell, the line of a `%%time` cell, a file of theirs; the last frame when there
    is none), its place and line of code, the error's type and first line of message,
    coloured as IPython colours them (not at all under `%colors nocolor`)."""
    colour = str(getattr(shell, "colors", "")).lower() != "nocolor"  # `%colors nocolor`
    cyan, green, red, reset = (_CYAN, _GREEN, _RED, _RESET) if colour else ("", "", "", "")
    lines = [f"{cyan}{_(UNFOLD)}{reset}"]
    last = ErrorInfo.from_exception(value, lambda file: _cell_of(shell, file),
                                    lambda cell: _cell_source(shell, cell)).reported_at
    if last is not None:
        place = f"In[{last.cell}]" if last.cell is not None else last.file
        code = f": {last.source}" if last.source else ""
        place = _("{place}, line {line}").format(place=place, line=last.line)
        lines.append(f"{green}{place}{reset}{code}")
    message = str(value).strip().splitlines()
    lines.append(f"{red}{type(value).__name__}{reset}"
                 + (f": {message[0]}" if message else ""))
    # one element: IPython joins a traceback's elements with "" or "\n" by its mode (%xmode)
    return ["\n".join(lines)]


class TracebackHandler:
    """IPython's custom traceback handler for every Exception of one shell: the error is
    diagnosed first (`diagnose`), then its traceback shown: folded when cudadiag showed an
    incident for it, in full (without cudadiag's own frames) otherwise."""

    def __init__(self, shell: Any, diagnose: Diagnose) -> None:
        self.shell = shell
        self.diagnose = diagnose

    def install(self) -> bool:
        """Set this handler on the shell unless another one is set (a user's or another
        extension's): returns True when it was set."""
        if getattr(self.shell, "custom_exceptions", ()) not in ((), None):
            return False
        self.shell.set_custom_exc((Exception,), self)
        return True

    def uninstall(self) -> None:
        """Give the shell back IPython's own traceback handling, if this handler is set."""
        if getattr(self.shell.CustomTB, "__func__", None) is not None and self.installed:
            self.shell.set_custom_exc((), None)

    @property
    def installed(self) -> bool:
        """True when this handler is the shell's custom traceback handler."""
        closure = getattr(getattr(self.shell.CustomTB, "__func__", None), "__closure__", None)
        return any(cell.cell_contents is self for cell in closure or ())

    def __call__(self, shell: Any, etype: type[BaseException], value: BaseException,
                 tb: TracebackType | None, tb_offset: int | None = None) -> None:
        """Show the error: diagnosed first, then its traceback. IPython discards what a
        custom handler returns: the handler shows the traceback itself. A cell that did not
        compile is shown as IPython shows a syntax error (IPython calls this handler for it
        too)."""
        if not _ran_cell_code(shell, tb):
            shell.showsyntaxerror()
            return
        shown = without_own_frames(tb)
        if shown is not tb:  # %debug opens the error's own traceback: the one shown
            value.__traceback__ = shown
        for cause in exception_chain(value)[:-1]:  # what `raise ... from` shows of them
            cause.__traceback__ = without_own_frames(cause.__traceback__)
        if not self.diagnose(value):
            shell.showtraceback((etype, value, shown), tb_offset=tb_offset,
                                running_compiled_code=True)
            return
        # where IPython's own display keeps the error: %tb, %debug and pdb read it there
        sys.last_type, sys.last_value, sys.last_traceback = etype, value, shown
        if sys.version_info >= (3, 12):
            sys.last_exc = value
        shell._showtraceback(etype, value, folded(shell, value))
        if shell.call_pdb:
            shell.debugger(force=True)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""cudadiag's own folder: its frames end a traceback only where cudadiag raised."""


def _own(entry: TracebackType) -> bool:
    return _file(entry).startswith(_PACKAGE)


def _file(entry: TracebackType) -> str:
    return entry.tb_frame.f_code.co_filename


def _ran_cell_code(shell: Any, tb: TracebackType | None) -> bool:
    """True when `tb` passes through a cell's code: the error was raised while the cell ran,
    not while IPython compiled it."""
    while tb is not None:
        if _cell_of(shell, _file(tb)) is not None:
            return True
        tb = tb.tb_next
    return False


def _cell_source(shell: Any, cell: int) -> str | None:
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
    return history[cell] if 0 <= cell < len(history) else None


def _cell_of(shell: Any, filename: str) -> int | None:
    found = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(filename)
    return found if isinstance(found, int) else None
