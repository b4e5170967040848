"""Choosing incidents from the log's entries: the filters of `incidents` (`--family`,
`--since`, `--mode`, `--cell`). Nothing here reads a record."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from cudadiag.errors import CudadiagError
from cudadiag.i18n import N_, _
from cudadiag.knowledge import FAMILY_NAMES
from cudadiag.log.entry import LogEntry
from cudadiag.log.options import MODES
from cudadiag.log.retention import is_older

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(m|min|h|d|w)", re.IGNORECASE)
_SPAN_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SINCE_HELP = N_("a date (2026-11-30), a time (2026-11-30T14:00) or a span back from now "
                 "(90m, 12h, 3d, 2w)")


class ListingError(CudadiagError, ValueError):
    """A filter of `incidents` that cannot be understood; the message says what it takes."""


@dataclass(frozen=True)
class Filters:
    """What `incidents` lists: every field left None lets every incident through."""

    family: str | None = None
    since: datetime | None = None
    mode: str | None = None
    cell: int | None = None
    script: str | None = None

    def admits(self, entry: LogEntry) -> bool:
        """True when `entry` passes every filter set."""
        if self.family is not None and entry.family != self.family:
            return False
        if self.mode is not None and entry.mode != self.mode:
            return False
        if self.cell is not None and entry.cell != self.cell:
            return False
        if self.script is not None and not _same_script(entry.script, self.script):
            return False
        return self.since is None or not is_older(entry.created_at, self.since)

    def describe(self) -> str:
        """Return the filters as a user wrote them (`--family oom --since ...`)."""
        parts = [f"--family {self.family}"] if self.family else []
        parts += [f"--since {self.since.isoformat(timespec='minutes')}"] if self.since else []
        parts += [f"--mode {self.mode}"] if self.mode else []
        parts += [f"--cell {self.cell}"] if self.cell is not None else []
        parts += [f"--cell {self.script}"] if self.script else []
        return " ".join(parts)


def make_filters(family: str | None = None, since: str | None = None,
                 mode: str | None = None, cell: str | None = None,
                 now: datetime | None = None) -> Filters:
    """Return the Filters the options of `incidents` ask for.

    Raises ListingError for a family, time, mode or cell it cannot understand."""
    if family is not None and family not in FAMILY_NAMES:
        raise ListingError(_("--family {family}: no such family; one of: {names}").format(
            family=family, names=", ".join(FAMILY_NAMES)))
    if mode is not None and mode not in MODES:
        raise ListingError(_("--mode {mode}: one of {modes}").format(mode=mode,
                                                                     modes=", ".join(MODES)))
    number, script = _cell_or_script(cell)
    return Filters(family=family, since=parse_since(since, now) if since else None,
                   mode=mode, cell=number, script=script)


def select(entries: Sequence[LogEntry], filters: Filters) -> list[LogEntry]:
    """Return the entries that pass `filters`, in their order."""
    if filters == Filters():
        return list(entries)
    return [e for e in entries if filters.admits(e)]


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """Return the time `text` names: an ISO date or time (local time unless it says
    otherwise), or a span back from `now` such as 90m, 12h, 3d, 2w.

    Raises ListingError when it is neither."""
    now = now or datetime.now(timezone.utc)
    span = _SPAN.fullmatch(text.strip())
    if span:
        amount, unit = float(span.group(1)), span.group(2).lower()
        try:
            return now - timedelta(**{_SPAN_UNITS[unit]: amount})
        except OverflowError:
            raise ListingError(_("--since {text}: reaches back before the calendar starts; "
                                 "give {examples}").format(text=text,
                                                           examples=_(_SINCE_HELP))) from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ListingError(_("--since {text}: give {examples}").format(
            text=text, examples=_(_SINCE_HELP))) from None
    return when if when.tzinfo else when.astimezone()


def _cell_or_script(cell: str | None) -> tuple[int | None, str | None]:
    if cell is None:
        return None, None
    text = cell.strip()
    if re.fullmatch(r"(In\[)?\d+\]?", text):
        return int(text.strip("In[]")), None
    if not text or text.startswith("-"):
        raise ListingError(_("--cell {cell}: give a cell number (3 or In[3]) or a script "
                             "(train.py)").format(cell=cell))
    return None, text


def _same_script(listed: str | None, asked: str) -> bool:
    if not listed:
        return False
    return listed == asked or os.path.basename(listed) == asked \
        or os.path.normpath(listed) == os.path.normpath(asked)
