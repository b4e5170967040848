"""An incident's record: the JSON kept in its row of the log, written without the fields
that hold their default and with the writing process's secret values masked; read back as a
typed Incident, or as a NewerRecord when a newer cudadiag wrote it."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudadiag.errors import IncidentSchemaError
from cudadiag.i18n import texts
from cudadiag.incident import Incident
from cudadiag.log.entry import LogEntry, entry_for_incident, entry_for_newer, is_newer_schema
from cudadiag.privacy.secret_values import env_secret_mask, map_strings


@dataclass(frozen=True)
class NewerRecord:
    """A record of the log written by a newer cudadiag: what can be told without reading it."""

    id: str
    created_at: str
    schema: Any
    family: str | None = None

    def entry(self) -> LogEntry:
        """Return its log entry."""
        return entry_for_newer(self.id, self.created_at, self.schema, self.family)


def secrets_mask(incident: Incident) -> Callable[[str], str]:
    """What masks the values of the secret variables this process knows, in its environment
    and in the run's (`run.env_vars`), wherever a record of `incident` holds them (an error
    message that quotes a key): a report printed later, from a shell that does not know
    them, cannot show them."""
    return env_secret_mask({**os.environ, **incident.run.env_vars})


def record_json(incident: Incident, mask: Callable[[str], str] = str) -> str:
    """The record of `incident`: its JSON without the fields that hold their default
    (reading the record gives them back), its schema always named, the message id and
    arguments of each sentence it keeps (`texts`, as Incident.to_dict: a reader in another
    language writes them again), `mask` applied to every string."""
    data = map_strings(_without_defaults(incident), mask)
    data["schema"] = incident.schema
    kept = {mask(english): map_strings(entry, mask)
            for english, entry in texts.table(incident).items() if entry["args"]}
    if kept:  # a sentence without arguments is its own id: looked up as it is
        data["texts"] = kept
    return json.dumps(data, default=str, separators=(",", ":"))


def masked_entry(incident: Incident, mask: Callable[[str], str]) -> LogEntry:
    """The log entry of `incident` with `mask` applied to its summary and script."""
    entry = entry_for_incident(incident)
    return entry._replace(summary=mask(entry.summary),
                          script=mask(entry.script) if entry.script else entry.script)


def read_record(text: str | bytes) -> Incident | NewerRecord | None:
    """The incident a record holds, a NewerRecord for a newer schema, None if unreadable."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and is_newer_schema(data.get("schema")) and "id" in data:
        diagnosis = data.get("diagnosis")
        family = diagnosis.get("family") if isinstance(diagnosis, dict) else None
        return NewerRecord(id=str(data["id"]), created_at=str(data.get("created_at", "")),
                           schema=data.get("schema"),
                           family=family if isinstance(family, str) else None)
    try:
        return Incident.from_dict(data)
    except (ValueError, TypeError, KeyError, IncidentSchemaError):
        return None


def _without_defaults(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _without_defaults(v) for name, default in _defaults(type(value))
                if (v := getattr(value, name)) is not default and (
                    default is _NO_DEFAULT or v != default)}
    if isinstance(value, (list, tuple)):
        return [_without_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_defaults(v) for k, v in value.items()}
    return value


_NO_DEFAULT = object()


@functools.cache
def _defaults(cls: type) -> tuple[tuple[str, Any], ...]:
    """(field name, default) of each field of a dataclass; _NO_DEFAULT for a field that has
    none or one made fresh for each instance (an id, a time), which is always written."""
    found = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            found.append((f.name, f.default))
        elif f.default_factory in (list, dict):
            found.append((f.name, f.default_factory()))
        else:
            found.append((f.name, _NO_DEFAULT))
    return tuple(found)
