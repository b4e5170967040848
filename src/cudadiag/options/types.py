"""Argument types shared by the magics and the `cudadiag` command, so a bad value gets the
same clear message in both (argparse turns ArgumentTypeError into a usage error)."""

from __future__ import annotations

import argparse
import math


def positive_seconds(text: str) -> float:
    """Return `text` as a number of seconds; raises argparse.ArgumentTypeError unless it is a
    finite number greater than zero (`nan`, `inf`, `0`, `-5` and words are refused)."""
    return _positive_number(text, "seconds", "30 or 2.5")


MAX_DAYS = 36_525
"""The longest span of days cudadiag takes (100 years): a date further back than a
computer's calendar is a typo, not a retention."""


def positive_days(text: str) -> float:
    """Return `text` as a number of days; raises argparse.ArgumentTypeError unless it is a
    number greater than zero and at most MAX_DAYS."""
    return _positive_number(text, "days", "180 or 1.5", most=MAX_DAYS)


def _positive_number(text: str, unit: str, example: str, most: float = math.inf) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= most):
        upper = f" and at most {most:,g}" if math.isfinite(most) else ""
        raise argparse.ArgumentTypeError(
            f"expected a number of {unit} greater than 0{upper}, like {example}; got {text!r}")
    return value


def at_least_one(text: str) -> int:
    """Return `text` as a whole number; raises argparse.ArgumentTypeError unless it is one
    of at least 1 (a count: trials, incidents to keep)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
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
        f"expected a number of processes (1 or more) or one of {', '.join(PROCESS_COUNT_WORDS)}"
        f", like torchrun; got {text!r}")


def node_index(text: str) -> int:
    """Return `text` as a node's rank; raises argparse.ArgumentTypeError unless it is a
    whole number of at least 0."""
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a node rank (0, 1, ...), got {text!r}")
