"""The command-line options of an export, shared by `%cudadiag export` and `cudadiag export`.

Light on purpose (no torch): the CLI builds its parser from it before anything runs.
"""

from __future__ import annotations

import argparse

from cudadiag.i18n import _
from cudadiag.i18n.language import LANGUAGES
from cudadiag.options.types import at_least_one, positive_seconds

DEFAULT_MAX_TRIALS = 200
"""The default number of candidates a minimization tries at most."""
DEFAULT_TIMEOUT_S = 60.0
"""The default time budget of a minimization; the best candidate so far is kept."""
SUFFIXES = (".ipynb", ".py")
"""What a repro can be: a notebook or a plain script."""


def add_export_options(parser: argparse.ArgumentParser) -> None:
    """The options `%cudadiag export` and `cudadiag export` share, validated by argparse
    (a bad value is a usage error, never an exception from deeper down)."""
    parser.add_argument("--max-trials", type=at_least_one, default=DEFAULT_MAX_TRIALS,
                        metavar="N", help=_("candidates tried by the minimizer at most "
                                            "(default {count})").format(
                            count=DEFAULT_MAX_TRIALS))
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                        metavar="S", help=_("stop minimizing after S seconds, keeping the "
                                            "best candidate so far (default {seconds})").format(
                            seconds=f"{DEFAULT_TIMEOUT_S:g}"))
    parser.add_argument("--bundle", action="store_true",
                        help=_("copy the data files the program read (under 20 MB each) "
                               "beside the repro and point its paths at them, so it runs "
                               "anywhere"))


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """The options of `%cudadiag report` and `cudadiag report`: `--lang`, the language the
    report is written in (for a tracker that expects English, whatever the session's)."""
    parser.add_argument("--lang", choices=tuple(LANGUAGES), metavar="LANG",
                        help=_("write the report in LANG ({languages}; default: the "
                               "session's language)").format(languages=", ".join(LANGUAGES)))
