"""The message catalogue, for whoever translates: what each language lacks, and new
entries to fill.

    python scripts/messages.py check [LANG]       every problem of LANG's catalogue (all
                                                  languages by default); exit 1 if any
    python scripts/messages.py missing LANG PART.po [PATH ...]
                                                  append LANG's missing messages used in PATHs
                                                  (files or folders of src/cudadiag; default:
                                                  all) to locale/LANG/PART.po, msgstr empty,
                                                  each with where it is used
"""

from __future__ import annotations

import sys
from pathlib import Path

from cudadiag.i18n import audit
from cudadiag.i18n.catalog import LOCALE_ROOT


def check(languages: list[str]) -> int:
    """Print each language's problems; return 1 if there are any."""
    status = 0
    for language in languages or list(audit.languages()):
        problems = audit.audit(language).problems()
        print(f"{language}: {len(problems)} problem(s)")
        for line in problems:
            print("  " + line)
        status |= bool(problems)
    return status


def missing(language: str, part: str, paths: list[str]) -> int:
    """Append `language`'s missing messages used under `paths` to the part `part`."""
    wanted = [str(Path(p).resolve().relative_to(audit.PACKAGE)) for p in paths]
    result = audit.audit(language)
    entries = []
    for message, where in result.missing.items():
        places = [w for w in where if not wanted or any(w.startswith(x) for x in wanted)]
        if places:
            entries.append(_entry(message, places))
    target = LOCALE_ROOT / language / part
    with target.open("a", encoding="utf-8") as handle:
        if target.stat().st_size == 0:
            handle.write('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n')
        handle.write("".join(entries))
    print(f"{len(entries)} message(s) appended to {target}")
    return 0


def _entry(message: str, places: list[str]) -> str:
    refs = "".join(f"#: {p}\n" for p in places[:4])
    return f"{refs}msgid {_quoted(message)}\nmsgstr \"\"\n\n"


def _quoted(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def main(argv: list[str]) -> int:
    """Run the command `argv` names; return its exit status."""
    if argv[:1] == ["check"]:
        return check(argv[1:])
    if argv[:1] == ["missing"] and len(argv) >= 3:
        return missing(argv[1], argv[2], argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
