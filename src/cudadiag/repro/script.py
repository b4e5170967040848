"""A repro as a plain Python script, and the check that it reproduces in a fresh process.

The script carries the notebook's header and first checks as comments; setup and program
follow in the same order. The check runs `python SCRIPT` from its own folder (blocking
variables in its environment) and reads the exception Python printed last.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from cudadiag.i18n import msg
from cudadiag.incident import Observed, Signature
from cudadiag.repro.document import ReproDocument
from cudadiag.repro.notebook import (
    VERIFY_TIMEOUT_S,
    ExportResult,
    check_environment,
    record_verdict,
    verdict,
)
from cudadiag.repro.staging import Staging

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: ?(.*))?$")
_VERIFY_NAME = ".verify.py"


def to_script(doc: ReproDocument, chdir: str | None = None) -> str:
    """The document as a Python script; `chdir` adds a move to that directory before the
    program (verification only)."""
    blocks = [_comment(doc.header()), *doc.setup]
    if chdir:
        blocks.append(f"import os\nos.chdir({chdir!r})")
    if doc.script_setup:
        blocks.append(doc.script_setup)
    blocks += [source for _, source in doc.program]
    blocks.append(_comment(doc.closing))
    return "\n\n\n".join(block.rstrip() for block in blocks) + "\n"


def write_and_verify_script(doc: ReproDocument, path: Path, signature: Any, verify: bool,
                            timeout: float = VERIFY_TIMEOUT_S) -> ExportResult:
    """Stage the script and its side files beside `path`, check it reproduces there (within
    `timeout` seconds), move everything into place. Raises ExportError (nothing left
    behind)."""
    with Staging(path) as staging:
        for side in doc.side_files:
            staging.write(side.name, side.data)
        result = ExportResult(path=path, reproduces=None, observed=Observed(),
                              side_files=[path.parent / s.name for s in doc.side_files])
        if verify:
            check = staging.folder / _VERIFY_NAME
            check.write_text(to_script(doc, chdir=doc.chdir))
            result.reproduces, result.observed = verify_script(
                check, signature, check_environment(doc), timeout)
            check.unlink()
            record_verdict(doc, result)
        staging.write(path.name, to_script(doc).encode())
        staging.commit()
    return result


def verify_script(script: Path, signature: Signature, env: dict[str, str],
                  timeout: float = VERIFY_TIMEOUT_S) -> tuple[bool | None, Observed]:
    """Run `python script` in its folder with the environment `env` (check_environment), at
    most `timeout` seconds; return (reproduces, what was observed). Ctrl-C stops it: (None,
    a note)."""
    try:
        done = subprocess.run([sys.executable, script.name], cwd=script.parent, env=env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except KeyboardInterrupt:
        return None, Observed(note=msg("verification interrupted"))
    except subprocess.TimeoutExpired:
        return False, Observed(note=msg("still running after {seconds} s",
                                        seconds=format(timeout, "g")))
    found = _exception(done.stderr)
    if found is not None:
        return verdict(signature, found[0], found[1], done.stderr)
    return False, Observed(note=msg("exited with status {status} without an exception",
                                    status=done.returncode))


def _exception(stderr: str) -> tuple[str, str] | None:
    """(type name, message) of the last traceback Python printed: the first line after its
    frames, which are indented."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line and not line[0].isspace():
            found = _EXCEPTION_LINE.match(line)
            return (found.group(1).rsplit(".", 1)[-1], found.group(2) or "") if found else None
    return None


def _comment(markdown: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in markdown.splitlines())
