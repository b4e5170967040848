"""What an isolated run used from outside the Python installation: the data files it opened
for reading, and the modules it imported from the program's own folders. A repro needs both
to run anywhere (repro/bundle.py copies them).
"""

from __future__ import annotations

import functools
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
    for name, module in list(sys.modules.items()):
        path = _source_file(name, module)
        if path and not path.startswith(skip) and "/." not in path and os.path.isfile(path):
            found[name] = path
    return found


_sources: dict[str, tuple[Any, str | None]] = {}
"""Module name -> (the module, its resolved source file or None): a fork server's children
inherit the answers for the thousands of modules torch imports (each a getattr that a lazy
module may answer slowly)."""


def _source_file(name: str, module: Any) -> str | None:
    """The resolved `.py` file of `module`, or None (`__main__`, built-in, compiled)."""
    known = _sources.get(name)
    if known is not None and known[0] is module:  # a module shadowed since has another
        return known[1]
    path = getattr(module, "__file__", None)
    source = (_resolved(path) if name != "__main__" and isinstance(path, str)
              and path.endswith(".py") else None)
    _sources[name] = (module, source)
    return source


@functools.cache
def _resolved(path: str) -> str:
    """os.path.realpath, remembered: the thousands of modules torch imports were resolved
    again in every run (a fork server resolves them once; its children inherit them)."""
    return os.path.realpath(path)
