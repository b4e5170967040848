"""Compile the message catalogue: each language's `.po` parts, merged into one `.mo`.

`locale/<language>/*.po` are the parts (one per area of cudadiag, each edited on its own);
`locale/<language>/LC_MESSAGES/cudadiag.mo` is what gettext reads. The build compiles them
(setup.py's build step, which loads this file by its path: it imports only Babel), and
`catalog.py` compiles them in memory when the `.mo` is missing or older than a part (a
checkout whose catalogue was edited since its install).
"""

from __future__ import annotations

import io
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

DOMAIN = "cudadiag"


def parts(folder: Path) -> list[Path]:
    """Return the `.po` parts of one language's folder, in name order."""
    return sorted(folder.glob("*.po"))


def merged(folder: Path) -> Catalog:
    """Return one catalogue holding every message of `folder`'s parts.

    Raises ValueError when two parts translate one message differently (a build
    step must stop there: the catalogue would depend on the parts' order)."""
    whole = Catalog(locale=folder.name, domain=DOMAIN, charset="utf-8")
    seen: dict[str, tuple[str, str]] = {}
    for part in parts(folder):
        with part.open("rb") as handle:
            catalog = read_po(handle, locale=folder.name, domain=DOMAIN)
        for message in catalog:
            if not message.id:
                continue
            key = message.id if isinstance(message.id, str) else message.id[0]
            if key in seen and seen[key][1] != message.string:
                raise ValueError(f"{part.name} and {seen[key][0]} translate {key!r} "
                                        "differently")
            seen[key] = (part.name, message.string)  # type: ignore[assignment]
            whole[message.id] = message
    return whole


def mo_bytes(folder: Path) -> bytes:
    """Return the compiled `.mo` of `folder`'s parts."""
    buffer = io.BytesIO()
    write_mo(buffer, merged(folder))
    return buffer.getvalue()


def compile_all(locale_root: Path) -> list[Path]:
    """Write `<language>/LC_MESSAGES/cudadiag.mo` for every language folder under
    `locale_root`; return the files written."""
    written = []
    for folder in sorted(p for p in locale_root.iterdir() if p.is_dir() and parts(p)):
        target = folder / "LC_MESSAGES" / f"{DOMAIN}.mo"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(mo_bytes(folder))
        written.append(target)
    return written
