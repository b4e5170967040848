"""The message catalogue: every sentence cudadiag writes for a person, looked up in the
language of the moment.

- `_(message)`: `message` (an English msgid) in the current language;
- `ngettext(singular, plural, n)`: the same, with a count;
- `N_(message)`: marks a message kept in a table, translated where it is shown;
- `current()`: the language of the moment and where it was chosen;
- `using(language)`: a block written in one language (a report for a tracker in English).

Placeholders are `str.format` fields (`{count}`), filled in after the lookup, so each
language orders them as it needs.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gettext
import io
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from cudadiag.i18n.language import (
    DEFAULT,
    LANGUAGES,
    LOCALE_VARIABLES,
    Choice,
    explicit,
    set_explicit,
    supported,
)
from cudadiag.i18n.language import choose as choose_in_order

LOCALE_ROOT = Path(__file__).resolve().parent.parent / "locale"
DOMAIN = "cudadiag"

_block: contextvars.ContextVar[str | None] = contextvars.ContextVar("cudadiag_language",
                                                                   default=None)
_KEYED_VARIABLES = ("CUDADIAG_LANG", "CUDADIAG_HOME", "JUPYTERLAB_SETTINGS_DIR",
                    "JUPYTER_CONFIG_DIR", *LOCALE_VARIABLES)


def N_(message: str) -> str:
    """Return `message` unchanged: it is translated where it is shown (with `_`)."""
    return message


def _(message: str) -> str:
    """Return `message` in the current language (itself in English, or when the catalogue
    has no translation)."""
    code = current_code()
    if code == DEFAULT or not message:
        return message
    return _translations(code).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """Return the form of `singular`/`plural` for `n`, in the current language."""
    code = current_code()
    if code == DEFAULT:
        return singular if n == 1 else plural
    return _translations(code).ngettext(singular, plural, n)


def join_items(items: Iterable[str]) -> str:
    """Return `items` as one phrase, separated as the language of the moment separates the
    items of a list (`, ` in English)."""
    return _(", ").join(items)


def join_clauses(clauses: Iterable[str]) -> str:
    """Return `clauses` as one line, separated as the language of the moment separates
    clauses (`; ` in English)."""
    return _("; ").join(clauses)


def current_code() -> str:
    """Return the code of the language of the moment (`en`, `ja`)."""
    return current().language


def current() -> Choice:
    """Return the language of the moment and where it was chosen."""
    block = _block.get()
    if block is not None:
        return Choice(block, "block")
    chosen = explicit()
    if chosen is not None:
        return Choice(chosen, "explicit")
    return _chosen(tuple(os.environ.get(name, "") for name in _KEYED_VARIABLES), _in_kernel())


@contextlib.contextmanager
def using(language: str) -> Iterator[None]:
    """Write in `language` inside the block.

    Raises ValueError when cudadiag does not speak it."""
    code = supported(language)
    if code is None:
        raise ValueError(unsupported(language))
    token = _block.set(code)
    try:
        yield
    finally:
        _block.reset(token)


def choose(language: str | None) -> Choice:
    """Choose `language` for this process (None: forget the choice, back to the order of
    language.py) and return the choice that now holds.

    Raises ValueError when cudadiag does not speak `language`; its message says which it
    does."""
    try:
        set_explicit(language)
    except ValueError:
        raise ValueError(unsupported(str(language))) from None
    return current()


def unsupported(language: str) -> str:
    """Return the message for a language cudadiag does not speak."""
    return _("{language!r} is not a language cudadiag speaks; choose one of {languages}, or "
             "auto (the order of docs/languages.md).").format(
        language=language, languages=", ".join(LANGUAGES))


@functools.lru_cache(maxsize=8)
def _chosen(_variables: tuple[str, ...], in_kernel: bool) -> Choice:
    """The choice for one set of the variables it reads (the files they name are read once)."""
    return choose_in_order(in_kernel=in_kernel)


def _in_kernel() -> bool:
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    return kernelapp is not None and bool(kernelapp.IPKernelApp.initialized())


@functools.cache
def _translations(code: str) -> gettext.NullTranslations:
    """The catalogue of `code`: the built `.mo`, or the `.po` parts compiled now when the
    `.mo` is missing or older than one of them."""
    folder = LOCALE_ROOT / code
    built = folder / "LC_MESSAGES" / f"{DOMAIN}.mo"
    parts = sorted(folder.glob("*.po"))
    if not parts:
        return gettext.NullTranslations()
    if built.exists() and built.stat().st_mtime >= max(p.stat().st_mtime for p in parts):
        with built.open("rb") as handle:
            return gettext.GNUTranslations(handle)
    from cudadiag.i18n.compile_catalogue import mo_bytes

    return gettext.GNUTranslations(io.BytesIO(mo_bytes(folder)))


def describe(choice: Choice) -> str:
    """Return the line that says which language cudadiag writes in and why (in it)."""
    with using(choice.language):
        line = _(_SOURCES[choice.kind]).format(name=LANGUAGES[choice.language],
                                               code=choice.language, detail=choice.detail)
        if choice.skipped:
            line += " " + _("Passed over (a language cudadiag does not speak, or a file it "
                            "could not read): {settings}.").format(
                settings=", ".join(choice.skipped))
        return line


_SOURCES = {
    "explicit": N_("cudadiag writes in {name} ({code}): chosen in this session."),
    "block": N_("cudadiag writes in {name} ({code}) here."),
    "variable": N_("cudadiag writes in {name} ({code}): {detail}."),
    "config": N_("cudadiag writes in {name} ({code}): {detail} in its config."),
    "jupyterlab": N_("cudadiag writes in {name} ({code}): JupyterLab's language setting, "
                     "{detail}."),
    "locale": N_("cudadiag writes in {name} ({code}): the locale, {detail}."),
    "default": N_("cudadiag writes in {name} ({code}): no language was chosen and no locale "
                  "is set."),
}
"""The line `describe` says, by the kind of source that chose the language."""
