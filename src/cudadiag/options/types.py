"""Argument types shared by the magics and the `cudadiag` command, so a bad value gets the
same clear message in both (argparse turns ArgumentTypeError into a usage error)."""

from __future__ import annotations

import argparse
import math

from cudadiag.i18n import N_, _


def positive_seconds(text: str) -> float:
    """Return `text` as a number of seconds; raises argparse.ArgumentTypeError unless it is a
    finite number greater than zero (`nan`, `inf`, `0`, `-5` and words are refused)."""
    return _positive_number(text, _SECONDS, "30 or 2.5")


MAX_DAYS = 36_525
"""The longest span of days cudadiag takes (100 years): a date further back than a
computer's calendar is a typo, not a retention."""


def positive_days(text: str) -> float:
    """Return `text` as a number of days; raises argparse.ArgumentTypeError unless it is a
    number greater than zero and at most MAX_DAYS."""
    return _positive_number(text, _DAYS, "180 or 1.5", most=MAX_DAYS)


_SECONDS = N_("expected a number of seconds greater than 0, like {example}; got {text!r}")
_DAYS = N_("expected a number of days greater than 0 and at most {most:,g}, like {example}; "
           "got {text!r}")


def _positive_number(text: str, message: str, example: str, most: float = math.inf) -> float:
    """`text` as a number in (0, most]; raises argparse.ArgumentTypeError with `message`
    (its fields: example, text, most) otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= most):
        raise argparse.ArgumentTypeError(_(message).format(example=example, text=text,
                                                           most=most))
    return value


def at_least_one(text: str) -> int:
    """Return `text` as a whole number; raises argparse.ArgumentTypeError unless it is one
    of at least 1 (a count: trials, incidents to keep)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("expected a whole number, not {text!r}").format(
            text=text)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(_("must be at least 1, not {value}").format(
            value=value))
    return value


PROCESS_COUNT_WORDS = ("auto", "cpu", "gpu", "xpu")
"""What torchrun accepts for --nproc-per-node besides a number: one rank per device or core."""


def processes_per_node(text: str) -> str:
    """Return `text` as torchrun's `--nproc-per-node` value; raises
    argparse.ArgumentTypeError unless it is a whole number of at least 1 or one of
    PROCESS_COUNT_WORDS."""
    if text in PROCESS_COUNT_WORDS or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(
        _("expected a number of processes (1 or more) or one of {words}, like torchrun; got "
          "{text!r}").format(words=", ".join(PROCESS_COUNT_WORDS), text=text))


def node_index(text: str) -> int:
    """Return `text` as a node's rank; raises argparse.ArgumentTypeError unless it is a
    whole number of at least 0."""
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(_("expected a node rank (0, 1, ...), got {text!r}").format(
        text=text))
