"""The op tracer's per-op work in C++: trace_native.cpp, built once per user, torch and Python
(torch.utils.cpp_extension, a C++ compiler and ninja), loaded from that build afterwards.

A boxed fallback on one dispatch key records every aten call of the threads that include
the key (and of the autograd threads their backward runs on) into a fixed-size ring, with no
Python per call; Python runs only for the operators it is asked to watch (before the
kernel) and for a call that raises (with its live arguments). `NativeOps` is that
interception as a context manager; trace.py builds the tracer on it.

It sees the calls a dispatch mode sees (the key sits above autograd, but a composite
operator is passed through, so the calls it decomposes into are the ones recorded, and a
recorded call runs with the key excluded, so the calls its kernel makes are not), but for
bookkeeping: torch.tensor()'s own empty and detach_ (made with dispatch modes off) are
recorded, autograd's detaches of saved tensors (below autograd) are not, and a tensor
subclass's call is recorded as the plain calls its __torch_dispatch__ makes. The calls
torch.compile makes as it traces (fake and meta tensors) are not recorded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

KEY = "TESTING_ONLY_GenericMode"
"""The dispatch key the fallback sits on: one of torch's spare keys, above autograd."""
SOURCE = Path(__file__).with_name("trace_native.cpp")
CFLAGS = ["-O2"]

Failure = Callable[[str, str, tuple[Any, ...], dict[str, Any]], object]
"""Called with an operator's name (`aten::embedding`), its overload name, its args and its
kwargs as a dispatch mode receives them."""
Watch = Callable[[str, str, tuple[Any, ...], dict[str, Any], "tuple[int, int] | None"], object]
"""As Failure, and the (min, max) of the argument named for the operator (None where none
is, or where it was not read: a tensor subclass, a dispatch mode, no integer values)."""
RecentCall = tuple[str, str, tuple[Any, ...], "dict[str, Any] | None"]

STALE_LOCK_S = 600
"""A build's lock older than this was left by a build that was killed: it is removed (torch's
builder would wait for it forever)."""
FAILED = "failed.txt"
"""In the build folder: why the last build failed (no build is tried again for the same
source, torch and Python)."""

_loaded: list[ModuleType] = []
_started: list[subprocess.Popen[bytes]] = []


def build_folder() -> Path:
    """Return the folder the extension is built in, one per source, torch and Python, under
    TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions (made 0700)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    return Path(root) / module_name()


def module_name() -> str:
    """Return the extension's module name: it changes with its source, its flags, torch's
    version and the Python ABI, so a build made for another of them is never loaded."""
    tag = sysconfig.get_config_var("SOABI") or sys.version
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{CFLAGS}{torch.__version__}{tag}".encode())
    return f"cudadiag_trace_native_{digest.hexdigest()[:16]}"


def load() -> ModuleType | None:
    """Return the extension when it is built (imported once), else None; never builds."""
    if not _loaded:
        library = build_folder() / f"{module_name()}.so"
        if not library.is_file():
            return None
        spec = importlib.util.spec_from_file_location(module_name(), library)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError:
            return None  # a build cut short, or one under way: the next load may find it
        _loaded.append(module)
    return _loaded[0]


def build() -> ModuleType:
    """Build the extension (about a minute of one core) and return it; a failure's reason is
    kept in the build folder (build_failure) and the error raised (what torch's builder
    raises: RuntimeError, OSError, subprocess.CalledProcessError)."""
    import torch.utils.cpp_extension as cpp

    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _remove_stale_lock(folder / "lock")
    try:
        module: ModuleType = cpp.load_inline(
            name=module_name(), cpp_sources=[SOURCE.read_text()], extra_cflags=CFLAGS,
            build_directory=str(folder), verbose=False)
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        (folder / FAILED).write_text(f"{type(exc).__name__}: {lines[-1] if lines else ''}")
        raise
    (folder / FAILED).unlink(missing_ok=True)
    return module


def _remove_stale_lock(lock: Path) -> None:
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink()
    except FileNotFoundError:
        pass


def build_failure() -> str | None:
    """Return why the last build failed, or None when none did."""
    try:
        return (build_folder() / FAILED).read_text()
    except OSError:
        return None


def build_in_background() -> None:
    """Start the build in a process of its own (once per process; none while another holds
    the build folder's lock), which outlives this one: the next runs load it."""
    lock = build_folder() / "lock"
    _remove_stale_lock(lock)
    if _started or lock.exists():
        return
    _started.append(subprocess.Popen(
        [sys.executable, "-m", "cudadiag.trace_native"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))


class NativeOps:
    """The C++ interception, on the entering thread (and its backward), while entered.

    One at a time in a process: the ring is the extension's. `recent()` reads the last `keep`
    calls that returned, oldest first."""

    def __init__(self, module: ModuleType, keep: int, watched: Mapping[str, int], on_call: Watch,
                 on_failure: Failure, tensor_mark: object) -> None:
        """watched: the operators on_call runs for, before their kernel, each with the
        position of the argument whose range it is given (-1: none)."""
        self._module = module
        self._keep = keep
        self._hooks = (dict(watched), on_call, on_failure, tensor_mark)
        self._was_included = False

    def __enter__(self) -> NativeOps:
        self._module.install(KEY)
        self._module.reset(self._keep)
        self._module.set_hooks(*self._hooks)
        self._was_included = torch._C._dispatch_tls_is_dispatch_key_included(KEY)
        torch._C._dispatch_tls_set_dispatch_key_included(KEY, True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        torch._C._dispatch_tls_set_dispatch_key_included(KEY, self._was_included)

    def recent(self) -> list[RecentCall]:
        """Return the ring's calls, oldest first: (name, overload name, args, kwargs or
        None), each tensor as (tensor_mark, dtype, shape, device)."""
        calls: list[RecentCall] = self._module.recent()
        return calls


if __name__ == "__main__":
    build()
