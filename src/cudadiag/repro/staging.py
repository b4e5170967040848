"""Write an export all at once or not at all.

The document and its side files (batch, RNG states, shipped values, bundled data) are written
into a hidden folder inside the target directory, checked there, then renamed into place (the
same file system, so each rename is atomic; the document goes last, so a document never
refers to a side file that is missing). On any error the folder is removed: nothing partial is
left behind, and the message says what could not be written. The interpreter's exit removes
the folders of exports still running; a folder left by a killed process (its pid is in the
name) is removed by the next export to the same target.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from cudadiag.durable import unwritable, write_failure
from cudadiag.errors import ExportError
from cudadiag.i18n import _


def check_target(path: Path, suffixes: tuple[str, ...]) -> None:
    """Raise ExportError unless `path` ends in one of `suffixes` and its directory exists
    and is writable (checked before any minimizing, so a bad path costs nothing)."""
    if path.suffix not in suffixes:
        raise ExportError(_suffix_error(path, suffixes))
    reason = unwritable(path)
    if reason is not None:
        raise ExportError(f"{path}: {reason}")


def _suffix_error(path: Path, suffixes: tuple[str, ...]) -> str:
    """The message for a repro's name that ends in none of `suffixes` (one or two)."""
    if len(suffixes) == 2:
        return _("{path}: the repro's name must end in {first} or {second}").format(
            path=path, first=suffixes[0], second=suffixes[1])
    return _("{path}: the repro's name must end in {suffixes}").format(
        path=path, suffixes=", ".join(suffixes))


class Staging:
    """A hidden folder beside `target` that collects the export's files; `commit()` moves
    them into place. Use as a context manager: leaving it without a commit (an error,
    Ctrl-C) removes everything written so far; so does the interpreter's exit (a kernel
    shut down while an export runs in its background)."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.written: list[str] = []
        _remove_left_by_dead_exports(target)
        with _exiting.lock:
            _refuse_when_exiting(target)
            try:
                self.folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.",
                                                    suffix=".partial", dir=target.parent))
            except OSError as exc:
                raise ExportError(_failure(target.name, target.parent, exc)) from None
            _exiting.unfinished.add(self.folder)
        _run_first_at_exit(_remove_unfinished)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.discard()

    def write(self, name: str, data: bytes) -> Path:
        """Write `data` as `name` (a path relative to the target's directory). Raises
        ExportError when it cannot be written."""
        path = self.folder / name
        with _exiting.lock:
            _refuse_when_exiting(self.target)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                raise ExportError(_failure(name, self.target.parent, exc)) from None
        if name.split("/")[0] not in self.written:
            self.written.append(name.split("/")[0])
        return path

    def commit(self) -> None:
        """Rename every written file and folder into the target's directory, the target
        last. Raises ExportError (and removes what was moved) when a rename fails."""
        order = sorted(self.written, key=lambda n: n == self.target.name)
        moved: list[Path] = []
        try:
            for name in order:
                final = self.target.parent / name
                if (self.folder / name).is_dir() and final.is_dir():
                    shutil.rmtree(final)  # an earlier export's bundle: replaced as a whole
                os.replace(self.folder / name, final)
                moved.append(final)
        except OSError as exc:
            for path in moved:
                _remove(path)
            raise ExportError(_failure(name, self.target.parent, exc)) from None
        self.written.clear()

    def discard(self) -> None:
        """Remove the staging folder and whatever is in it."""
        shutil.rmtree(self.folder, ignore_errors=True)
        _exiting.unfinished.discard(self.folder)


class _Exiting:
    """The interpreter's exit, seen by exports still running in a background thread: once
    it has begun, no staging folder is made or written to (the thread would otherwise
    recreate a folder the exit just removed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.begun = False
        self.unfinished: set[Path] = set()


_exiting = _Exiting()


def _run_first_at_exit(hook: Callable[[], None]) -> None:
    """Register `hook` again, so that it runs before the exit hooks registered until now
    (they run last registered first): a launcher's stop waits for its server to end, and a
    kernel shut down by Jupyter gets SIGTERM when its exit takes more than a few seconds."""
    atexit.unregister(hook)
    atexit.register(hook)


@atexit.register
def _remove_unfinished() -> None:
    with _exiting.lock:
        _exiting.begun = True
        for folder in list(_exiting.unfinished):
            shutil.rmtree(folder, ignore_errors=True)


def _refuse_when_exiting(target: Path) -> None:
    if _exiting.begun:
        raise ExportError(_("{target}: the interpreter is exiting; nothing was written").format(
            target=target))


def _remove_left_by_dead_exports(target: Path) -> None:
    """Remove the staging folders of earlier exports to `target` whose process is gone (a
    kernel killed while exporting: nothing in it could clean up)."""
    name = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.[^.]+\.partial")
    for folder in target.parent.glob(f".{glob.escape(target.name)}.*.partial"):
        found = name.fullmatch(folder.name)
        if found and not _alive(int(found.group(1))):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _failure(name: str, folder: Path, exc: OSError) -> str:
    return _("{reason}; nothing was written").format(reason=write_failure(name, folder, exc))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
