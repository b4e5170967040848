"""The data files and the program's own modules a repro needs, copied beside it so it runs
from any directory.

The isolated worker records the files the program opened for reading and the modules it
imported from outside the installation (absolute paths). A bundle copies the data files
under BUNDLE_MAX_BYTES into `<stem>.files/`, keeping their layout relative to the program's
working directory (files outside it go to `<stem>.files/external/`), and rewrites the string
literals of the code that name one of them, or a folder holding them, to the copy. Modules
keep their layout below the folder they were imported from (`mingpt/model.py` below the
working directory goes to `<stem>.files/mingpt/model.py`), so a package finds its own data
files beside its copy; the repro puts each such folder's copy on sys.path.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

BUNDLE_MAX_BYTES = 20 * 2**20


@dataclass
class Bundle:
    """Which files a repro reads and which of them travel with it."""

    cwd: str
    folder: str
    """Where the copies go, relative to the repro's folder: `<stem>.files`."""
    copied: dict[str, str] = field(default_factory=dict)
    """Absolute path -> its copy, relative to the repro's folder."""
    too_large: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Files read by the original run that no longer exist."""
    import_folders: list[str] = field(default_factory=list)
    """Where the copied modules import from, relative to the repro's folder (each goes on
    sys.path)."""


def plan_bundle(files_read: list[str], cwd: str, stem: str,
                modules: dict[str, str] | None = None) -> Bundle:
    """Decide where each file read goes: `<stem>.files/<path relative to cwd>` (or
    `external/N-name` for files outside it); larger files than BUNDLE_MAX_BYTES stay out.
    `modules` (name -> file) go below the copy of the folder they were imported from."""
    bundle = Bundle(cwd=cwd, folder=f"{stem}.files")
    root = os.path.realpath(cwd)
    for number, path in enumerate(files_read, start=1):
        try:
            size = os.path.getsize(path)
        except OSError:
            bundle.missing.append(path)
            continue
        if size > BUNDLE_MAX_BYTES:
            bundle.too_large.append(path)
            continue
        inside = os.path.commonpath([root, path]) == root
        relative = os.path.relpath(path, root) if inside else \
            f"external/{number}-{os.path.basename(path)}"
        bundle.copied[path] = f"{bundle.folder}/{relative}"
    for name, path in (modules or {}).items():
        folder = import_folder(name, path)
        if folder is None or not os.path.isfile(path):
            continue
        inside = os.path.commonpath([root, folder]) == root
        number = len(bundle.import_folders) + 1
        copy = os.path.normpath(f"{bundle.folder}/{os.path.relpath(folder, root)}") if inside \
            else f"{bundle.folder}/external/lib{number}-{os.path.basename(folder)}"
        if copy not in bundle.import_folders:
            bundle.import_folders.append(copy)
        bundle.copied[path] = f"{copy}/{os.path.relpath(path, folder)}"
    return bundle


def import_folder(name: str, path: str) -> str | None:
    """The folder module `name` was imported from (on sys.path), given its file `path`:
    `/w` for `mingpt.model` at `/w/mingpt/model.py` or `mingpt` at `/w/mingpt/__init__.py`;
    None when the path does not end as the name says."""
    parts = name.split(".")
    package = os.path.basename(path) == "__init__.py"
    tail = os.path.join(*parts, "__init__.py") if package else \
        os.path.join(*parts[:-1], parts[-1] + ".py")
    if not path.endswith(os.sep + tail):
        return None
    return path[:-len(tail) - 1]


def rewrite_paths(source: str, bundle: Bundle) -> str:
    """`source` with each string literal that names a bundled file, or a folder inside the
    working directory that holds one, pointing at the copy instead. Literals inside
    f-strings and code that does not parse are left as they are."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    in_fstrings = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr)
                   for n in ast.walk(f)}
    edits = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in in_fstrings and node.lineno == node.end_lineno):
            replacement = _bundled(node.value, bundle)
            if replacement is not None:
                edits.append((node.lineno, node.col_offset, node.end_col_offset, replacement))
    lines = source.splitlines(keepends=True)
    for row, start, end, text in sorted(edits, reverse=True):
        raw = lines[row - 1].encode()
        lines[row - 1] = (raw[:start] + repr(text).encode() + raw[end:]).decode()
    return "".join(lines)


def _bundled(literal: str, bundle: Bundle) -> str | None:
    if not literal.strip() or "\n" in literal or literal in (".", "./"):
        return None
    expanded = os.path.expanduser(literal)
    path = os.path.realpath(expanded if os.path.isabs(expanded)
                            else os.path.join(bundle.cwd, expanded))
    if path in bundle.copied:
        return bundle.copied[path]
    root = os.path.realpath(bundle.cwd)
    if path == root or os.path.commonpath([root, path]) != root:
        return None
    if not any(os.path.commonpath([path, f]) == path for f in bundle.copied):
        return None
    return f"{bundle.folder}/{os.path.relpath(path, root)}"
