"""An incident filed in English, read back from its record in another process whose language
is Japanese: what the tests of kept sentences (i18n/texts.py) ask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cudadiag.incident import Incident

_PROGRAM = (
    "import json, sys\n"
    "from cudadiag import i18n, knowledge\n"
    "from cudadiag.classification import STICKY_TAIL\n"
    "from cudadiag.incident import Incident\n"
    "incident = Incident.from_dict(json.load(open(sys.argv[1])))\n"
    "d = incident.diagnosis\n"
    "print(json.dumps([eval(e) for e in sys.argv[2:]]))\n"
)


def read_back_in_japanese(incident: Incident, folder: Path, *expressions: str) -> list:
    """Write `incident`'s record in `folder`, read it back in a new process with
    CUDADIAG_LANG=ja, and return the value of each of `expressions` there (Python, with
    `incident`, `d` its diagnosis, `i18n`, `knowledge` and STICKY_TAIL at hand)."""
    record = folder / "record.json"
    record.write_text(json.dumps(incident.to_dict()))
    shown = subprocess.run([sys.executable, "-c", _PROGRAM, str(record), *expressions],
                           text=True, capture_output=True, check=True, timeout=300,
                           env={**os.environ, "CUDADIAG_LANG": "ja"}).stdout
    return json.loads(shown)
