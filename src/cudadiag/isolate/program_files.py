"""What an isolated run used from outside the Python installation: the data files it opened
for reading, and the modules it imported from the program's own folders. A repro needs both
to run anywhere (repro/bundle.py copies them).
"""

from __future__ import annotations

import os
import site
import sys
from typing import Any

CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")
"""Files that are code, not data: imports, not reads."""
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev", "/etc", "/usr", "/lib", "/run", "/var")


def installation_folders(exclude: list[str]) -> tuple[str, ...]:
    """The folders (each ending in a separator) whose files are not the program's: the
    Python installation and its site folders, cudadiag's own, system folders, and
    `exclude`."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package
    return tuple(os.path.join(os.path.realpath(p), "") for p in {
        sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(),
        site.getusersitepackages(), own, *exclude, *SYSTEM_FOLDERS})


def record_files_read(exclude: list[str]) -> dict[str, None]:
    """Start recording the data files this process opens for reading (an audit hook on
    `open`, which `open`, `torch.load`, `np.load` and `pd.read_*` all go through); return the
    ordered set that fills up. Modules, the Python installation, system folders, hidden
    folders (caches, settings) and the folders in `exclude` are left out."""
    skip = installation_folders(exclude)
    read: dict[str, None] = {}

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        try:
            if (args[2] or 0) & os.O_ACCMODE == os.O_WRONLY or (args[1] or "r")[0] in "wax":
                return
            name = os.fsdecode(args[0])
            if name.endswith(CODE_SUFFIXES):  # before resolving it: most opens are imports'
                return
            path = os.path.realpath(name)
            if (path in read or path.startswith(skip) or path.endswith(CODE_SUFFIXES)
                    or "/." in path or not os.path.isfile(path)):
                return
            read[path] = None
        except Exception:  # an audit hook must never break the program's open()
            return

    sys.addaudithook(hook)
    return read


def local_modules(exclude: list[str]) -> dict[str, str]:
    """The Python source modules this process imported from outside the installation (the
    program's own modules and packages: `mingpt.model` -> /work/mingpt/model.py), by module
    name, in the order imported; the folders in `exclude` and hidden folders left out."""
    skip = installation_folders(exclude)
    found: dict[str, str] = {}
    for name, module in _imported_here():
        path = getattr(module, "__file__", None)
        if name == "__main__" or not isinstance(path, str) or not path.endswith(".py"):
            continue
        path = os.path.realpath(path)
        if not path.startswith(skip) and "/." not in path and os.path.isfile(path):
            found[name] = path
    return found


_inherited_last: list[tuple[str, Any]] = []
"""In a child forked from the warm interpreter: the last entry of sys.modules it inherited."""


def mark_inherited() -> None:
    """Call in a child forked from the warm interpreter before it runs anything: the modules
    it inherited are the server's (torch, cudadiag, installed libraries: never the
    program's own), so local_modules need read only those imported after this."""
    name = next(reversed(sys.modules))
    _inherited_last[:] = [(name, sys.modules[name])]


def _imported_here() -> list[tuple[str, Any]]:
    """sys.modules' entries this process imported itself, in order: in a forked child, those
    after its inherited ones, found from the end (walking every entry would copy the page of
    each module object it passed); elsewhere, or once that entry is gone, all of them."""
    if _inherited_last:
        last, module = _inherited_last[0]
        if sys.modules.get(last) is module:
            newer: list[tuple[str, Any]] = []
            for entry in reversed(sys.modules.items()):
                if entry[0] == last:
                    return newer[::-1]
                newer.append(entry)
    return list(sys.modules.items())
