"""Sentences kept in a record, shown later in whatever language the reader has chosen.

An incident is filed once and read many times (`show`, the panel, a report for a tracker in
English from a Japanese session). So a sentence it keeps is a `Text`: its English form (what
the record holds, what English readers see, what searches match) together with its message
id and arguments. `Incident.to_dict` stores that pair beside the record (`texts`: English
form → id and arguments), `from_dict` reads it back (`remember`), and every reader shows a
kept sentence through `localize`, which writes it again in the current language.

A sentence kept by a version that had no `texts` is shown through the catalogue as it is
(a message with no arguments is found by its English form), else left in English.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from cudadiag.i18n.catalog import _, current_code
from cudadiag.i18n.language import DEFAULT

Argument = str | int | float

_known: dict[str, tuple[str, dict[str, Argument]]] = {}
"""English form → (message id, arguments) of every Text made or read in this process."""
_KNOWN_LIMIT = 50_000


class Text(str):
    """A sentence in English (the str itself) that remembers its message id and arguments,
    so it can be written again in another language (`localize`)."""

    template: str
    args: dict[str, Argument]

    def __new__(cls, template: str, args: Mapping[str, Argument] | None = None) -> Text:
        """Return `template` (an English msgid) filled with `args`."""
        values = dict(args or {})
        self = super().__new__(cls, template.format(**values) if values else template)
        self.template = template
        self.args = values
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Text, (self.template, self.args))

    def __deepcopy__(self, memo: dict[int, Any]) -> Text:
        return self


def msg(template: str, /, **args: Argument) -> Text:
    """Return a sentence to keep in a record: `template` (an English msgid with `{name}`
    fields) filled with `args` in English, remembering both for `localize`."""
    text = Text(template, args)
    _remember_one(str(text), template, text.args)
    return text


def localize(text: str) -> str:
    """Return `text` (a kept sentence, or any string) in the current language: a Text or a
    sentence whose id is known is written again from its id and arguments (each argument
    localized too); any other string is looked up as a message as it is, and shown
    unchanged when the catalogue lacks it (a PyTorch message, a path, a name)."""
    if current_code() == DEFAULT:
        return str(text)
    if isinstance(text, Text):
        template, args = text.template, text.args
    elif text in _known:
        template, args = _known[text]
    else:
        return _(text)
    if not args:
        return _(template)
    return _(template).format(**{k: localize(v) if isinstance(v, str) else v
                                 for k, v in args.items()})


def localize_all(texts: Iterable[str]) -> list[str]:
    """Return each of `texts` localized."""
    return [localize(t) for t in texts]


def table(record: Any) -> dict[str, dict[str, Any]]:
    """Return the id and arguments of every Text in `record` (a dataclass tree, lists and
    dicts), arguments' own Texts included, by English form: what a stored record keeps. A
    sentence read back from a record (a str whose id `remember` learnt) counts as its Text,
    so a record read and written again keeps its ids."""
    found: dict[str, dict[str, Any]] = {}
    _collect(record, found)
    return found


def remember(kept: Mapping[str, Any]) -> None:
    """Read a record's `texts` (as `table` wrote it) so `localize` knows its sentences; an
    entry that is not well formed is skipped (the sentence then shows as it is kept)."""
    for english, entry in kept.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
            continue
        args = entry.get("args") or {}
        if isinstance(args, Mapping) and all(isinstance(v, str | int | float)
                                             for v in args.values()):
            _remember_one(english, entry["id"], dict(args))


def _remember_one(english: str, template: str, args: dict[str, Argument]) -> None:
    if len(_known) >= _KNOWN_LIMIT:
        _known.clear()
    _known[english] = (template, args)


def _collect(value: Any, found: dict[str, dict[str, Any]]) -> None:
    if isinstance(value, str):
        # a Text, or a kept sentence read back from a record (a str whose id is known)
        kept = (value.template, value.args) if isinstance(value, Text) else _known.get(value)
        if kept is None or str(value) in found:
            return
        found[str(value)] = {"id": kept[0], "args": {k: str(v) if isinstance(v, Text) else v
                                                    for k, v in kept[1].items()}}
        for argument in kept[1].values():
            _collect(argument, found)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _collect(getattr(value, f.name), found)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list | tuple | set):
        for item in value:
            _collect(item, found)
