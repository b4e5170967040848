"""The side files of a repro, written so that loading them runs no code.

Each is `torch.save`d and loaded back with `torch.load(..., weights_only=True)` (torch 1.13
and later): tensors and plain values (dicts, lists, tuples, numbers, strings) only, so a file
swapped beside a shared repro cannot run anything when the repro opens it. The RNG states
are put in that form (numpy's key becomes a list of ints). A batch that holds other types
(numpy arrays, a named tuple, a library's batch class) names each type it needs in the
repro's own code (`torch.serialization.add_safe_globals`, torch 2.4 and later), where a
reader sees them; the file cannot add to that list, and no function that could run code
(`eval`, `os.system`, `getattr`) is ever on it. A batch whose types cannot be named that
way (a class the program itself defines, or an export under torch older than 2.5, which
cannot list what a file needs) is left out, and the header says so.
"""

from __future__ import annotations

import fnmatch
import importlib
import io
import re
from dataclasses import dataclass
from typing import Any

from cudadiag.i18n import _

REPRO_DIR = "_repro_dir"
"""The repro's variable that holds its own folder, where its side files are (document.py
sets it first)."""
MAX_SAFE_GLOBALS = 16
"""The most types a batch may need besides tensors and plain values."""
CLOSED_MODULES = frozenset({
    "os", "posix", "nt", "sys", "subprocess", "importlib", "pickle", "_pickle", "shutil",
    "socket", "runpy", "code", "codeop", "types", "operator", "functools", "ctypes", "io",
    "_io", "marshal", "signal", "multiprocessing", "threading", "asyncio", "pathlib",
    "tempfile", "webbrowser", "pty",
})
"""Packages nothing is allowed from: what they hold reaches the system or runs code."""
SAFE_BUILTINS = frozenset({"set", "frozenset", "list", "dict", "tuple", "bytes", "bytearray",
                           "complex", "slice", "range"})
"""The builtins a file may name: containers and values."""
SAFE_REBUILDERS = ("numpy.*._reconstruct", "numpy.*.scalar", "torch._utils._rebuild_*",
                   "torch._tensor._rebuild_from_type_v2", "copyreg._reconstructor")
"""Functions (not types) a file may name: those that rebuild an array, a scalar or a tensor
from its data (shell patterns)."""
_UNSUPPORTED = re.compile(r"GLOBAL (\S+) was not an allowed global|allowlisted via "
                          r"`add_safe_globals`, but got <class '([^']+)'>")
"""The unpickler's two ways of naming a type it refused."""


@dataclass
class SafeFile:
    """What a side file needs to load with weights_only=True: its bytes and the types (by
    dotted name) to allow; `refused` says why it cannot be loaded safely (then no bytes)."""

    data: bytes = b""
    safe_globals: tuple[str, ...] = ()
    refused: str | None = None


def safe_file(value: Any) -> SafeFile:
    """`value` saved for a weights_only load, with the types it needs besides tensors and
    plain values, or why it cannot be loaded safely."""
    data = torch_bytes(value)
    import torch

    if _loads(data, []):
        return SafeFile(data)
    listing = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if listing is None:
        return SafeFile(refused=_("it holds types other than tensors, and torch {version} "
                                  "cannot list them (torch 2.5 does)").format(
            version=torch.__version__))
    names = sorted(listing(io.BytesIO(data)))  # a set inside torch: its order varies
    while len(names) <= MAX_SAFE_GLOBALS:
        local = [n for n in names if n.split(".")[0] == "__main__"]
        if local:
            return SafeFile(refused=_("it holds {names}, defined by the program itself (not "
                                      "importable before it runs)").format(
                names=", ".join(n[9:] for n in local)))
        found = [_resolved(n) for n in names]
        if any(f is None for f in found):
            missing = [n for n, f in zip(names, found, strict=True) if f is None]
            return SafeFile(refused=_("it holds {names}, which cannot be imported").format(
                names=", ".join(missing)))
        closed = sorted(n for n, f in zip(names, found, strict=True) if not _may_allow(n, f))
        if closed:
            return SafeFile(refused=(
                _("it needs {names}: allowing that could run code") if len(closed) == 1
                else _("it needs {names}: allowing those could run code")).format(
                names=", ".join(closed)))
        failure = _load_failure(data, found)
        if failure is None:
            return SafeFile(data, tuple(names))
        more = _UNSUPPORTED.search(failure)
        needed = (more.group(1) or more.group(2)) if more else None
        if needed is None or needed in names:
            return SafeFile(refused=_("it does not load with weights_only=True: {failure}"
                                      ).format(failure=failure[-300:]))
        names.append(needed)
    return SafeFile(refused=_("it needs more than {count} types besides tensors").format(
        count=MAX_SAFE_GLOBALS))


def side_path(name: str) -> str:
    """The repro's expression for the path of its side file `name`."""
    return f"os.path.join({REPRO_DIR}, {name!r})"


def load_lines(name: str, target: str, safe_globals: tuple[str, ...]) -> list[str]:
    """The repro's code that loads side file `name` into `target` with weights_only=True,
    allowing `safe_globals` (dotted names) first."""
    load = f"{target} = torch.load({side_path(name)}, weights_only=True)  # saved beside it"
    if not safe_globals:
        return [load]
    modules = sorted({_module_of(g) for g in safe_globals})
    shown = ", ".join(g.rsplit(".", 1)[1] for g in safe_globals)
    return [
        *(f"import {m}" for m in modules), "",
        f"# {name} holds {shown} besides tensors: allowed by name here (nothing the file",
        "# itself names can load); torch 2.4 and later",
        'if not hasattr(torch.serialization, "add_safe_globals"):',
        f"    raise RuntimeError({name + ' needs torch 2.4 or later to load safely'!r})",
        f"torch.serialization.add_safe_globals([{', '.join(safe_globals)}])",
        load,
    ]


def plain_rng_states(states: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """The RNG states as tensors and plain values (numpy's key array as a list of ints), the
    CUDA states left out (a repro may run on another machine)."""
    plain: dict[Any, dict[str, Any]] = {}
    for key, streams in states.items():
        plain[key] = {}
        for stream, state in streams.items():
            if stream == "numpy":
                kind, keys, *rest = state
                plain[key][stream] = (kind, [int(k) for k in keys], *rest)
            elif stream != "cuda":
                plain[key][stream] = state
    return plain


def torch_bytes(value: Any) -> bytes:
    """torch.save into memory: the write to disk is ours, so a full disk is an OSError
    (torch's own writer reports it as a RuntimeError from its C++ internals)."""
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _resolved(dotted: str) -> Any:
    """The object a dotted name (module path, then attributes) names, or None."""
    module = _module_of(dotted)
    if not module:
        return None
    found: Any = importlib.import_module(module)
    for attribute in dotted[len(module) + 1:].split("."):
        found = getattr(found, attribute, None)
    return found


def _may_allow(dotted: str, found: Any) -> bool:
    """True when a repro may allow `dotted` (the object `found`) for a weights_only load: a
    type from outside CLOSED_MODULES (a builtin only from SAFE_BUILTINS), or a function of
    SAFE_REBUILDERS."""
    package = dotted.split(".")[0]
    if package in CLOSED_MODULES:
        return False
    if package == "builtins":
        return dotted.split(".", 1)[1] in SAFE_BUILTINS
    return isinstance(found, type) or any(fnmatch.fnmatchcase(dotted, pattern)
                                          for pattern in SAFE_REBUILDERS)


def _module_of(dotted: str) -> str:
    """The longest importable module path that `dotted` starts with ("" for none)."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        return ".".join(parts[:split])
    return ""


def _loads(data: bytes, safe: list[Any]) -> bool:
    return _load_failure(data, safe) is None


def _load_failure(data: bytes, safe: list[Any]) -> str | None:
    """None when `data` loads with weights_only=True allowing `safe` (only in this call),
    else the unpickler's complaint."""
    import pickle

    import torch

    try:
        if safe:
            with torch.serialization.safe_globals(safe):
                torch.load(io.BytesIO(data), weights_only=True)
        else:
            torch.load(io.BytesIO(data), weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as exc:
        return " ".join(str(exc).split())
    return None
