"""The isolated runs' files kept beside the log: a run folder per incident (its RNG states,
recorded batch, a pointer to its shipped values) and the shipped values themselves,
content-addressed and bounded in size. Folders 0700, files 0600."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from cudadiag.durable import PRIVATE_DIR, replace_atomically
from cudadiag.i18n import _

RUNS_DIR = "runs"
SHIPPED_DIR = "shipped"
SHIPPED_POINTER = "shipped.json"
SHIPPED_KEPT_MAX_BYTES = 256 * 2**20
"""Shipped values larger than this are not kept with the incident (export then says so)."""
SHIPPED_TOTAL_MAX_BYTES = 1 * 2**30
"""The kept shipped values of all incidents together; the least recently used go first."""


def run_folder(home: Path, incident_id: str) -> Path:
    """The folder of an incident's isolated-run files."""
    return home / RUNS_DIR / incident_id


def keep_run_file(home: Path, incident_id: str, source: Path) -> Path:
    """Copy `source` into the incident's run folder under the same name; return the copy.
    Raises OSError when it cannot be written."""
    folder = private_dir(home, RUNS_DIR, incident_id)
    return _private_copy(source, folder / source.name)


def keep_shipped(home: Path, incident_id: str, pickled: Path) -> str | None:
    """Keep the pickled values an isolated run was shipped under `shipped/` (identical
    values stored once) with a pointer in the run folder.

    Returns None when kept, else why not (larger than SHIPPED_KEPT_MAX_BYTES). Older value
    files are dropped to keep the folder under SHIPPED_TOTAL_MAX_BYTES. Raises OSError when
    the files cannot be written."""
    size = pickled.stat().st_size
    if size > SHIPPED_KEPT_MAX_BYTES:
        return _("{size} MiB of shipped values, more than the {most} MiB kept per "
                 "incident").format(size=size >> 20, most=SHIPPED_KEPT_MAX_BYTES >> 20)
    digest = _sha256(pickled)
    blobs = private_dir(home, SHIPPED_DIR)
    blob = blobs / f"{digest}.pkl"
    if blob.exists():
        os.utime(blob)  # recently used: dropped last
    else:
        _drop_oldest_values(blobs, room=size)
        _private_copy(pickled, blob)
    pointer = private_dir(home, RUNS_DIR, incident_id) / SHIPPED_POINTER
    replace_atomically(pointer, json.dumps({"sha256": digest, "bytes": size}).encode())
    return None


def shipped_file(home: Path, incident_id: str) -> Path | None:
    """The pickled shipped values kept for an incident, None when none are kept (or they
    were dropped to make room)."""
    try:
        pointer = json.loads((run_folder(home, incident_id) / SHIPPED_POINTER).read_text())
    except (OSError, ValueError):
        return None
    blob = home / SHIPPED_DIR / f"{pointer.get('sha256')}.pkl"
    return blob if blob.is_file() else None


def remove_run_files(home: Path, incident_ids: Iterable[str]) -> int:
    """Remove the run folders of these incidents, and the shipped values no remaining run
    points to; return how many folders were removed."""
    removed = shipped = 0
    for incident_id in incident_ids:
        folder = run_folder(home, incident_id)
        if folder.is_dir():
            shipped += (folder / SHIPPED_POINTER).exists()
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    if shipped:
        _drop_unreferenced_values(home)
    return removed


def private_dir(home: Path, *parts: str) -> Path:
    """The folder home/parts..., each level created 0700 when missing."""
    folder = home
    folder.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    for part in parts:
        folder = folder / part
        folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(folder, PRIVATE_DIR)
    return folder


def _drop_unreferenced_values(home: Path) -> None:
    referenced = set()
    for pointer in (home / RUNS_DIR).glob(f"*/{SHIPPED_POINTER}"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            referenced.add(json.loads(pointer.read_text()).get("sha256"))
    for blob in (home / SHIPPED_DIR).glob("*.pkl"):
        if blob.stem not in referenced:
            blob.unlink(missing_ok=True)


def _drop_oldest_values(blobs: Path, room: int) -> None:
    files = sorted(blobs.glob("*.pkl"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    while files and total + room > SHIPPED_TOTAL_MAX_BYTES:
        oldest = files.pop(0)
        total -= oldest.stat().st_size
        oldest.unlink(missing_ok=True)


def _private_copy(source: Path, target: Path) -> Path:
    replace_atomically(target, source.read_bytes())
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
