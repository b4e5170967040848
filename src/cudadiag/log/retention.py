"""How long the incident log keeps incidents: the newest N, none older than D days.

Set in one place, `config.json` in cudadiag's home folder (beside the log):

    {"retention": {"incidents": 10000, "days": 180}}

Either key may be left out (its default stands). Incidents beyond the limits are pruned on
purpose, with a line that says so, together with their isolated runs' files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cudadiag.errors import CudadiagError
from cudadiag.i18n import N_, _, msg
from cudadiag.log.entry import LogEntry
from cudadiag.options.types import MAX_DAYS

CONFIG_NAME = "config.json"
DEFAULT_INCIDENTS = 10_000
DEFAULT_DAYS = 180.0
_EXAMPLE = '{"retention": {"incidents": 10000, "days": 180}}'


class RetentionConfigError(CudadiagError, ValueError):
    """The retention settings in config.json cannot be read; the message says what to fix."""


@dataclass(frozen=True)
class Retention:
    """Keep the newest `incidents` incidents, none older than `days` days."""

    incidents: int = DEFAULT_INCIDENTS
    days: float = DEFAULT_DAYS
    source: str = N_("defaults")
    """Where the values come from: `defaults`, `set in PATH` (the config file)... (in
    English; `localize(source)` in the reader's language)"""

    def __post_init__(self) -> None:
        if isinstance(self.incidents, bool) or not isinstance(self.incidents, int) \
                or self.incidents < 1:
            raise RetentionConfigError(
                _("the number of incidents kept must be a whole number of at least 1, not "
                  "{value!r}").format(value=self.incidents))
        if isinstance(self.days, bool) or not isinstance(self.days, (int, float)) \
                or not 0 < self.days <= MAX_DAYS:
            raise RetentionConfigError(
                _("the days an incident is kept must be a number above 0 and at most "
                  "{most:,} (100 years), not {value!r}").format(most=MAX_DAYS, value=self.days))

    def describe(self) -> str:
        """Return `the newest 10,000 incidents, none older than 180 days`."""
        return _("the newest {count:,} incidents, none older than {days:g} days").format(
            count=self.incidents, days=self.days)

    def cutoff(self, now: datetime | None = None) -> datetime:
        """The creation time before which an incident is too old."""
        return (now or datetime.now(timezone.utc)) - timedelta(days=self.days)

    def due(self, count: int) -> bool:
        """True when `count` records exceed the limit by enough to prune now (a margin of
        2 %, so that a full log is not rewritten at every append)."""
        return count > self.incidents + self.incidents // 50

    def fallen_out(self, entries: Sequence[LogEntry],
                   now: datetime | None = None) -> list[LogEntry]:
        """Return the entries (one per incident, oldest first) beyond the limits: older
        than the cutoff, or before the newest `incidents`."""
        cutoff = self.cutoff(now)
        beyond_count = max(0, len(entries) - self.incidents)
        return [e for n, e in enumerate(entries)
                if n < beyond_count or is_older(e.created_at, cutoff)]


def is_older(created_at: str, cutoff: datetime) -> bool:
    """True when the time `created_at` (ISO 8601) is before `cutoff`; False when it cannot
    be read (an incident is never dropped for a time it does not have)."""
    try:
        created = datetime.fromisoformat(created_at)
    except (TypeError, ValueError):
        return False
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return created < cutoff


def config_path(home: Path) -> Path:
    """The config file of the log in `home`."""
    return home / CONFIG_NAME


def load_retention(home: Path) -> Retention:
    """Return the retention set in `home`'s config.json, the defaults when there is none.

    Raises RetentionConfigError when the file exists but its retention cannot be read."""
    path = config_path(home)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Retention()
    except OSError as exc:
        raise RetentionConfigError(_("cannot read {path}: {reason}").format(
            path=path, reason=exc.strerror or exc)) from None
    try:
        settings = json.loads(text).get("retention", {})
    except (ValueError, AttributeError):
        raise RetentionConfigError(
            _("{path} is not a JSON object; write for example {example}").format(
                path=path, example=_EXAMPLE)) from None
    if not isinstance(settings, dict) or set(settings) - {"incidents", "days"}:
        raise RetentionConfigError(
            _('"retention" in {path} takes "incidents" and "days" only, for example '
              '{example}').format(path=path, example=_EXAMPLE))
    try:
        return Retention(incidents=settings.get("incidents", DEFAULT_INCIDENTS),
                         days=settings.get("days", DEFAULT_DAYS),
                         source=msg("set in {path}", path=str(path)))
    except RetentionConfigError as exc:
        raise RetentionConfigError(f"{path}: {exc}") from None
