"""Writing cudadiag's own files so that nothing is half-written or readable by others:
whole writes, synced files and folders, atomic replacement, private modes (0700 / 0600)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from cudadiag.i18n import N_, _

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
SHARED_FILE = 0o666  # less the umask: a project's own files

FREE_SPACE = N_("; free some space or choose another directory")
WRITABLE = N_("; choose a writable directory")
YOURS = N_("; choose a directory you can write to")
_WRITE_HINTS = {errno.ENOSPC: FREE_SPACE, errno.EDQUOT: FREE_SPACE, errno.EROFS: WRITABLE,
                errno.EACCES: YOURS}
"""What to do after a failed write, by its errno (in English: shown with `_`)."""


def write_failure(name: str, folder: Path, exc: OSError) -> str:
    """Return `could not write NAME in FOLDER: REASON; WHAT TO DO` for a failed write (the
    what-to-do part for a full disk, a read-only or forbidden directory)."""
    reason = exc.strerror or str(exc)
    return (_("could not write {name} in {folder}: {reason}").format(
        name=name, folder=folder, reason=reason) + _(_WRITE_HINTS.get(exc.errno or 0, "")))


def unwritable(path: Path) -> str | None:
    """Why `path` cannot be written as a new or replaced file (a directory, a folder that is
    missing or not writable), checked before any work; None when it can."""
    folder = path.parent
    if path.is_dir():
        return _("is a directory; name the file to write")
    if not folder.is_dir():
        return _("the directory {folder} does not exist; create it first or choose another "
                 "path").format(folder=folder)
    if not os.access(folder, os.W_OK | os.X_OK):
        return _("the directory {folder} is not writable").format(folder=folder)
    return None


def replace_atomically(target: Path, data: bytes, mode: int = PRIVATE_FILE) -> int:
    """Write `data` to a temporary file beside `target` (created with `mode`, less the
    umask), sync it, rename it over `target` and sync the folder: readers see the old file or
    the new one, never a mix. Returns the new file's inode. Raises OSError (the temporary
    file removed) when it cannot be done."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
        inode = os.fstat(fd).st_ino
    except BaseException:
        os.close(fd)
        partial.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    sync_folder(target.parent)
    return inode


def sync_folder(folder: Path) -> None:
    """Make a new or renamed file's name durable (no-op where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may be short on a nearly full disk).

    Raises OSError when a write fails or writes nothing."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"write returned {written} with {len(view)} bytes left")
        view = view[written:]
