"""The bad-case set: problematic batches kept with the project, for a validation test
(method point 7: keep the bad case in a small validation set that lives with the project).

Each case is `NAME.pt` (the CPU batch, torch.save) and `NAME.json` (summary, reason, the guard
verdict or incident id, creation time).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from cudadiag.batch import map_tensors, summarize
from cudadiag.durable import SHARED_FILE, replace_atomically, write_failure
from cudadiag.i18n import _

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass
class Case:
    """One kept case: its name, the batch and what was recorded about it."""

    name: str
    batch: Any
    reason: str
    created: str
    summary: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None
    incident_id: str | None = None

    def __repr__(self) -> str:
        return f"Case({self.name!r})"


def keep_case(batch: Any, name: str, *, reason: str, directory: str | Path = "tests/cases",
              verdict: str | None = None, incident_id: str | None = None,
              overwrite: bool = False) -> Path:
    """Store `batch` (copied to the CPU) as case `name` in `directory`; return the .pt path.

    Each file is replaced atomically: a failed or interrupted write leaves the case as it
    was. Raises ValueError for a name that is not a plain file name, FileExistsError when the
    case exists and `overwrite` is False, RuntimeError when a GPU batch cannot be copied (a
    poisoned CUDA context: restart and rebuild the batch), OSError (saying what to do) when
    the files cannot be written.
    """
    if not _NAME.match(name):
        raise ValueError(_("case name {name!r}: use letters, digits, '_', '-', '.' (no "
                           "path)").format(name=name))
    if not reason.strip():
        raise ValueError(_("reason: say why this case is kept (e.g. 'label 4 in a 4-class "
                           "task')"))
    folder = Path(directory)
    data_path, meta_path = folder / f"{name}.pt", folder / f"{name}.json"
    if not overwrite and (data_path.exists() or meta_path.exists()):
        raise FileExistsError(_("case {name!r} already exists in {folder}; pass "
                                "overwrite=True to replace it").format(name=name, folder=folder))
    try:
        on_cpu = map_tensors(batch, lambda t: t.detach().cpu())
    except RuntimeError as exc:
        raise RuntimeError(_("cannot copy the batch to the CPU ({error}); restart the kernel "
                             "and rebuild the batch").format(error=str(exc).splitlines()[0])
                           ) from exc
    meta = {
        "name": name, "reason": reason, "verdict": verdict, "incident_id": incident_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "summary": summarize(on_cpu).to_dict(),
    }
    data = io.BytesIO()
    torch.save(on_cpu, data)
    # the data first: load_cases reads a case from its .json, so a case shows up whole or
    # not at all, and a failed overwrite leaves the old case as it was
    _write_project_file(data_path, data.getvalue())
    _write_project_file(meta_path, json.dumps(meta, indent=2, default=str).encode())
    return data_path


def _write_project_file(path: Path, data: bytes) -> None:
    """Replace `path` atomically with `data`, readable as the umask allows (the cases are
    the project's files, kept with its tests); raises OSError saying what to do."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, data, mode=SHARED_FILE)
    except OSError as exc:
        raise OSError(exc.errno, write_failure(path.name, path.parent, exc)) from exc


def load_cases(directory: str | Path = "tests/cases") -> list[Case]:
    """Return the cases of `directory`, sorted by name, ready for pytest.mark.parametrize.
    A missing directory gives an empty list; a case without its data file raises
    FileNotFoundError naming it."""
    folder = Path(directory)
    cases = []
    for meta_path in sorted(folder.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        data_path = meta_path.with_suffix(".pt")
        if not data_path.exists():
            raise FileNotFoundError(_("case {name!r}: {path} is missing").format(
                name=meta_path.stem, path=data_path))
        cases.append(Case(
            name=meta.get("name", meta_path.stem),
            batch=torch.load(data_path, weights_only=False),
            reason=meta.get("reason", ""),
            created=meta.get("created", ""),
            summary=meta.get("summary", {}),
            verdict=meta.get("verdict"),
            incident_id=meta.get("incident_id"),
        ))
    return cases
