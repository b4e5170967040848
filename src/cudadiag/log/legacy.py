"""The one-time import of the logs earlier versions wrote: JSON lines (`incidents.jsonl`,
rotated to `incidents.jsonl.1`, `.2`... the highest number oldest; records of schema 1 and
2, the last record of an id winning; a last line torn by a writer that died skipped). Run
once, when the database is set up; the old files are left in place."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from cudadiag.i18n import _
from cudadiag.incident import Incident
from cudadiag.log.database import put
from cudadiag.log.entry import entry_for_incident
from cudadiag.log.records import read_record, record_json

LOG_NAME = "incidents.jsonl"


def legacy_files(home: Path) -> list[Path]:
    """The JSON-lines log files of `home`, oldest first (the current file last)."""
    numbered = []
    try:
        names = os.listdir(home)
    except OSError:
        return []
    for name in names:
        number = name[len(LOG_NAME) + 1:]
        if name.startswith(LOG_NAME + ".") and number.isdigit():
            numbered.append((int(number), name))
    files = [home / name for _, name in sorted(numbered, reverse=True)]
    if LOG_NAME in names:
        files.append(home / LOG_NAME)
    return files


def import_legacy_logs(conn: sqlite3.Connection, home: Path) -> int:
    """Write every record of the earlier log files of `home` into the database (inside the
    caller's transaction) and say so in one line on stderr; return how many incidents.
    Raises OSError when a file exists but cannot be read."""
    files = legacy_files(home)
    if not files:
        return 0
    ids: set[str] = set()
    skipped = 0
    for path in files:
        for line in path.read_bytes().splitlines():
            found = read_record(line)
            if found is None:
                skipped += line.strip() != b""
                continue
            if isinstance(found, Incident):
                put(conn, entry_for_incident(found), record_json(found))
            else:
                put(conn, found.entry(), line.decode("utf-8", "replace"))
            ids.add(found.id)
    said = (_("cudadiag: imported {count:,} incident(s) from the earlier log files in {home} "
              "({files}, left in place); {skipped} unreadable line(s) skipped") if skipped else
            _("cudadiag: imported {count:,} incident(s) from the earlier log files in {home} "
              "({files}, left in place)"))
    print(said.format(count=len(ids), home=home, files=", ".join(p.name for p in files),
                      skipped=skipped), file=sys.stderr)
    return len(ids)
