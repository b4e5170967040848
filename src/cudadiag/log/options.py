"""The options of `incidents`, shared by `%cudadiag incidents` and `cudadiag incidents`.

Light on purpose (argparse only): the CLI builds its parser from it before anything runs.
"""

from __future__ import annotations

import argparse

from cudadiag.i18n import _
from cudadiag.options.types import at_least_one, positive_days

MODES = ("kernel", "isolated", "cli")
LAST = 50
"""How many incidents a listing shows unless told (--last N, --all): a screen's worth."""


def add_listing_options(parser: argparse.ArgumentParser) -> None:
    """Add the filters (--family, --since, --mode, --cell), how many to show (--last N,
    --all), --stats and --prune (with --keep, --keep-days) to the parser of `incidents`."""
    parser.add_argument("--family", metavar="F",
                        help=_("only incidents of this family (device_assert, oom, ...)"))
    parser.add_argument("--since", metavar="WHEN",
                        help=_("only incidents from WHEN on: 2026-11-30, 2026-11-30T14:00, "
                               "or a span back from now: 90m, 12h, 3d, 2w"))
    parser.add_argument("--mode", choices=MODES,
                        help=_("only incidents of the kernel, of isolated runs, or of "
                               "`cudadiag run`"))
    parser.add_argument("--cell", metavar="N|SCRIPT",
                        help=_("only incidents of cell N (In[N]) or of a script (train.py)"))
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--last", type=at_least_one, metavar="N", default=LAST,
                       help=_("show the newest N incidents that match (default {count})"
                              ).format(count=LAST))
    shown.add_argument("--all", action="store_true",
                       help=_("show every incident that matches"))
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--stats", action="store_true",
                      help=_("show the log's size, its incidents by family and mode, and the "
                             "retention (how many and how old incidents are kept)"))
    what.add_argument("--prune", action="store_true",
                      help=_("remove now the incidents the retention does not keep, with "
                             "their isolated runs' files"))
    parser.add_argument("--keep", type=at_least_one, metavar="N",
                        help=_("with --prune: keep only the newest N incidents"))
    parser.add_argument("--keep-days", type=positive_days, metavar="D",
                        help=_("with --prune: keep only the incidents of the last D days"))
