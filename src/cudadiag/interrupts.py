"""Ctrl-C remembered for the whole of a command's run.

Importing torch can swallow a KeyboardInterrupt: a Ctrl-C that lands in one of the imports
torch tries and tolerates the failure of is taken for a missing optional module, and the import
goes on as if the key had not been pressed (seen on torch 2.13: SIGINT 0.7 s into
`import torch`, and the interpreter prints its result and exits 0). A command that imports
torch before it starts the user's program would then start it anyway. The handler installed
here raises KeyboardInterrupt as Python's own does, and also remembers that it did, so that the
program is never started after a Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

_pressed = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _pressed.set()
    raise KeyboardInterrupt


def remember_interrupts() -> Handler:
    """Forget earlier interrupts and install the remembering handler for SIGINT, when Python's
    own handler is in place on the main thread (an ignored SIGINT, as in a background job,
    stays ignored). Returns the handler in place before, for `restore_interrupts`."""
    _pressed.clear()
    previous = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is threading.main_thread()
            and previous is signal.default_int_handler):
        signal.signal(signal.SIGINT, _on_sigint)
    return previous


def restore_interrupts(previous: Handler) -> None:
    """Put back the SIGINT handler `remember_interrupts` replaced; returns None."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is _on_sigint and previous is not None):
        signal.signal(signal.SIGINT, previous)


def interrupt_pressed() -> bool:
    """Return True when Ctrl-C came since `remember_interrupts`, even if whatever it
    interrupted swallowed the KeyboardInterrupt."""
    return _pressed.is_set()
