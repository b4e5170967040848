"""cudadiag: diagnose PyTorch CUDA errors from inside a notebook.

`%load_ext cudadiag` keeps the first CUDA error of the kernel with its context, says what it
means and what to check, and warns on every later cell when the CUDA context is unusable.
"""

from __future__ import annotations

import importlib
from typing import Any

from cudadiag.classify import classify
from cudadiag.env import collect_env
from cudadiag.errors import CudadiagError, GuardError, IncidentSchemaError
from cudadiag.incident import Diagnosis, EnvInfo, Incident

__version__ = "0.1.0"
# Names whose modules import torch: loaded on first use, so `import cudadiag` stays light.
_LAZY = {
    "summarize": "cudadiag.batch",
    "watch": "cudadiag.batch",
    "step_done": "cudadiag.batch",
    "BatchSummary": "cudadiag.batch",
    "check_class_targets": "cudadiag.guards",
    "check_index_range": "cudadiag.guards",
    "check_same_device": "cudadiag.guards",
    "check_label_mapping": "cudadiag.guards",
    "guard": "cudadiag.guards",
    "keep_case": "cudadiag.cases",
    "load_cases": "cudadiag.cases",
    "Panel": "cudadiag.ui.panel",
    "compare": "cudadiag.kernel.compare_magics",
}
__all__ = [
    "CudadiagError",
    "Diagnosis",
    "EnvInfo",
    "GuardError",
    "Incident",
    "IncidentSchemaError",
    "checkpoint",
    "classify",
    "collect_env",
    "incidents",
    "load_ipython_extension",
    "run_isolated",
    "testing",
    "unload_ipython_extension",
    *_LAZY,
]


def incidents() -> list[Incident]:
    """Return every incident of the on-disk log as Incident objects, oldest first."""
    from cudadiag.store import IncidentStore

    return IncidentStore().load()


def run_isolated(code: str, **options: Any) -> Any:
    """Run `code` in a fresh process with blocking launches; see
    cudadiag.isolate.runner.run_isolated for the options. Returns an IsolatedResult."""
    from cudadiag.isolate.runner import run_isolated as run

    return run(code, **options)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext cudadiag`: capture CUDA errors of this kernel."""
    from cudadiag.kernel import magics

    magics.load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext cudadiag`: stop capturing and warning (the magics stay registered)."""
    from cudadiag.kernel import magics

    magics.unload(ipython)


def __getattr__(name: str) -> Any:
    if name in ("testing", "checkpoint"):
        return importlib.import_module(f"cudadiag.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cudadiag' has no attribute {name!r}")
