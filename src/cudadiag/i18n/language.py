"""Which language cudadiag writes in, and where that choice came from.

The order (first that gives a language wins):

1. an explicit choice in this process: `%cudadiag lang ja|en`, `cudadiag --lang ja|en`;
2. `$CUDADIAG_LANG`;
3. `"language"` in cudadiag's config.json (beside the incident log);
4. in a Jupyter kernel, JupyterLab's own language (Settings → Language), read from the
   user's settings of `@jupyterlab/translation-extension`;
5. the locale variables, as gettext reads them: `LANGUAGE` (a list), `LC_ALL`,
   `LC_MESSAGES`, `LANG`; a `C` or `POSIX` locale (containers set `C.UTF-8`) means English;
6. English.

A source that names a language cudadiag does not speak (`fr_FR`) decides English, as the
locale does for gettext; one that cannot be read (a broken config.json) is skipped and said.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cudadiag.home import default_home

LANGUAGES: dict[str, str] = {"en": "English", "ja": "日本語"}
"""The languages cudadiag speaks: code, name in that language."""

DEFAULT = "en"

LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
"""gettext's order (GNU gettext manual, "Locale Environment Variables")."""

JUPYTERLAB_TRANSLATION_SETTINGS = (
    Path("@jupyterlab") / "translation-extension" / "plugin.jupyterlab-settings")
"""Where JupyterLab keeps Settings → Language (`{"locale": "ja_JP"}`), under its user
settings folder: `$JUPYTERLAB_SETTINGS_DIR`, else `<jupyter config dir>/lab/user-settings`."""


@dataclass(frozen=True)
class Choice:
    """A language and the source that chose it, e.g. `ja` from `CUDADIAG_LANG=ja`."""

    language: str
    kind: str
    """`explicit`, `block`, `variable`, `config`, `jupyterlab`, `locale` or `default`."""
    detail: str = ""
    """The setting itself: `CUDADIAG_LANG=ja`, the config file, `LANG=ja_JP.UTF-8`."""
    skipped: tuple[str, ...] = ()
    """Settings passed over on the way: a language cudadiag does not speak, a file that
    could not be read."""


_explicit: str | None = None


def supported(value: str) -> str | None:
    """Return the language code `value` names (`ja`, `ja_JP.UTF-8`, `JA`, `en-US`), or None
    when cudadiag does not speak it or `value` names no language. `C` and `POSIX` name
    English."""
    code = re.split(r"[_.@-]", value.strip(), maxsplit=1)[0].lower()
    if code in ("c", "posix"):
        return DEFAULT
    return code if code in LANGUAGES else None


def set_explicit(language: str | None) -> None:
    """Choose `language` for this process (None: forget the explicit choice).

    Raises ValueError (holding `language`) when cudadiag does not speak it."""
    global _explicit
    if language is None:
        _explicit = None
        return
    code = supported(language)
    if code is None or language.strip().lower() in ("c", "posix"):
        raise ValueError(language)
    _explicit = code


def explicit() -> str | None:
    """Return the language chosen explicitly in this process, or None."""
    return _explicit


def choose(*, in_kernel: bool = False, environ: dict[str, str] | None = None,
           home: Path | None = None) -> Choice:
    """Return the language to write in and where it came from, in the order of this module's
    docstring. `in_kernel`: read JupyterLab's language setting too."""
    env = dict(os.environ) if environ is None else environ
    if _explicit is not None:
        return Choice(_explicit, "explicit")
    notes: list[str] = []
    for choice in (_from_variable(env, notes), _from_config(env, home, notes),
                   _from_jupyterlab(env) if in_kernel else None, _from_locale(env)):
        if choice is not None:
            return Choice(choice.language, choice.kind, choice.detail, tuple(notes))
    return Choice(DEFAULT, "default", "", tuple(notes))


def _from_variable(env: dict[str, str], notes: list[str]) -> Choice | None:
    value = env.get("CUDADIAG_LANG", "").strip()
    if not value:
        return None
    code = supported(value)
    if code is None:
        notes.append(f"CUDADIAG_LANG={value}")
        return None
    return Choice(code, "variable", f"CUDADIAG_LANG={value}")


def _from_config(env: dict[str, str], home: Path | None, notes: list[str]) -> Choice | None:
    if home is None:
        home = Path(env["CUDADIAG_HOME"]).expanduser() if env.get("CUDADIAG_HOME") else (
            default_home())
    path = home / "config.json"
    try:
        value = json.loads(path.read_text()).get("language")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError) as exc:
        notes.append(f"{path} ({exc.__class__.__name__})")
        return None
    if value is None:
        return None
    code = supported(str(value))
    if code is None:
        notes.append(f'"language": {json.dumps(value)} ({path})')
        return None
    return Choice(code, "config", f'"language": {json.dumps(value)} ({path})')


def jupyterlab_settings_file(env: dict[str, str]) -> Path:
    """Return the file where JupyterLab keeps its language setting for this user."""
    folder = env.get("JUPYTERLAB_SETTINGS_DIR")
    if folder:
        return Path(folder).expanduser() / JUPYTERLAB_TRANSLATION_SETTINGS
    config = env.get("JUPYTER_CONFIG_DIR") or str(Path.home() / ".jupyter")
    return Path(config).expanduser() / "lab" / "user-settings" / JUPYTERLAB_TRANSLATION_SETTINGS


def _from_jupyterlab(env: dict[str, str]) -> Choice | None:
    path = jupyterlab_settings_file(env)
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(r'"locale"\s*:\s*"([^"]*)"', _without_comments(text))
    if match is None or match.group(1) == "default":
        return None
    return Choice(supported(match.group(1)) or DEFAULT, "jupyterlab",
                  f'"locale": "{match.group(1)}" ({path})')


def _without_comments(text: str) -> str:
    """JupyterLab writes its settings as JSON with `//` comments (JSON5)."""
    return re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)


def _from_locale(env: dict[str, str]) -> Choice | None:
    for name in LOCALE_VARIABLES:
        value = env.get(name, "").strip()
        if not value:
            continue
        if name == "LANGUAGE":
            codes = [supported(part) for part in value.split(":") if part]
            code = next((c for c in codes if c is not None), None)
            if code is None:
                continue
        else:
            code = supported(value) or DEFAULT
        return Choice(code, "locale", f"{name}={value}")
    return None
