"""Is the catalogue complete? The messages cudadiag's source uses, against each language's
`.po` parts and its glossary: what `scripts/messages.py` prints and the tests assert.

- a message the source uses and a language lacks (or leaves empty) is *missing*;
- a translation whose `{fields}` differ from its message's is *misfilled* (it would raise
  or drop a value when formatted);
- a message the source no longer uses is *unused*;
- a message that holds a glossary term whose translation lacks the term's Japanese is
  *off the glossary* (`locale/<language>/glossary.tsv`: English, the language's term, and
  where the term comes from).
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass, field

from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from cudadiag.i18n.catalog import LOCALE_ROOT
from cudadiag.i18n.compile_catalogue import parts

PACKAGE = LOCALE_ROOT.parent
KEYWORDS = {"_": None, "N_": None, "msg": None, "ngettext": (1, 2)}
"""The calls that mark a message: `_` (shown now), `N_` (kept in a table), `msg` (kept in a
record, i18n/texts.py), `ngettext` (with a count)."""


@dataclass(frozen=True)
class Term:
    """One line of a glossary: an English term and the word a translation uses for it."""

    english: str
    translated: str
    source: str


@dataclass
class Audit:
    """What one language's catalogue lacks or gets wrong, each with where it is used."""

    language: str
    missing: dict[str, list[str]] = field(default_factory=dict)
    misfilled: dict[str, str] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    off_glossary: dict[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Return one line per problem, empty when the catalogue is whole."""
        lines = [f"missing: {m!r} ({', '.join(where[:3])})" for m, where in self.missing.items()]
        lines += [f"misfilled: {m!r}: {why}" for m, why in self.misfilled.items()]
        lines += [f"unused: {m!r}" for m in self.unused]
        lines += [f"off the glossary: {m!r}: {why}" for m, why in self.off_glossary.items()]
        return lines


def used_messages() -> dict[str, list[str]]:
    """Return every message cudadiag's source marks (plural forms by their singular), with
    the places (`path:line`) that use it."""
    found: dict[str, list[str]] = {}
    for path, line, message, _comments, _context in extract_from_dir(
            PACKAGE, keywords=KEYWORDS, method_map=[("**.py", "python")]):
        key = message if isinstance(message, str) else message[0]
        if key:
            found.setdefault(key, []).append(f"{path}:{line}")
    return found


def translations(language: str) -> dict[str, str | tuple[str, ...]]:
    """Return each message of `language`'s parts and its translation (a tuple of forms for
    a message with a plural)."""
    found: dict[str, str | tuple[str, ...]] = {}
    for part in parts(LOCALE_ROOT / language):
        with part.open("rb") as handle:
            for message in read_po(handle, locale=language):
                if message.id:
                    key = message.id if isinstance(message.id, str) else message.id[0]
                    string = message.string
                    found[key] = string if isinstance(string, str) else tuple(string or ())
    return found


def glossary(language: str) -> list[Term]:
    """Return `language`'s glossary terms (none when it has no glossary)."""
    path = LOCALE_ROOT / language / "glossary.tsv"
    if not path.exists():
        return []
    terms = []
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            english, translated, source = ([*line.split("\t"), "", ""])[:3]
            terms.append(Term(english.strip(), translated.strip(), source.strip()))
    return terms


def audit(language: str) -> Audit:
    """Return what `language`'s catalogue lacks or gets wrong."""
    used = used_messages()
    have = translations(language)
    result = Audit(language)
    for message, where in used.items():
        translated = have.get(message)
        forms = (translated,) if isinstance(translated, str) else (translated or ())
        if not forms or not all(forms):
            result.missing[message] = where
            continue
        for form in forms:
            if _fields(form) != _fields(message):
                result.misfilled[message] = (f"fields {sorted(_fields(form))} where the "
                                             f"message has {sorted(_fields(message))}")
    result.unused = sorted(set(have) - set(used))
    for term in glossary(language):
        for message, translated in have.items():
            if message in used and term.english.lower() in message.lower():
                text = translated if isinstance(translated, str) else " ".join(translated)
                if text and term.translated not in text:
                    result.off_glossary[message] = f"{term.english!r} is {term.translated!r}"
    return result


def _fields(text: str) -> frozenset[str]:
    try:
        return frozenset(name for _, name, _, _ in string.Formatter().parse(text)
                         if name is not None)
    except ValueError:
        return frozenset({"<not a format string>"})


def languages() -> Iterator[str]:
    """The languages that have a catalogue, besides English (the messages themselves)."""
    return (p.name for p in sorted(LOCALE_ROOT.iterdir()) if p.is_dir() and parts(p))
