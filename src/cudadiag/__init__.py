"""cudadiag: diagnose PyTorch CUDA errors from inside a notebook.

`%load_ext cudadiag` keeps the first CUDA error of the kernel with its context, says what it
means and what to check, and warns on every later cell when the CUDA context is unusable.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cudadiag.errors import CudadiagError, GuardError, IncidentSchemaError

if TYPE_CHECKING:  # the names below are loaded on first use; their real signatures:
    from cudadiag.batch import BatchSummary, step_done, summarize, watch
    from cudadiag.cases import keep_case, load_cases
    from cudadiag.classification import classify
    from cudadiag.env import collect_env
    from cudadiag.guards import (
        check_class_targets,
        check_index_range,
        check_label_mapping,
        check_same_device,
        guard,
    )
    from cudadiag.incident import Diagnosis, EnvInfo, Incident
    from cudadiag.isolate.runner import run_isolated
    from cudadiag.panel.widget import Panel

__version__ = "0.1.0"
# Loaded on first use, so that `import cudadiag` stays light: a clean `cudadiag run` imports
# the package in both of its processes and needs none of these (torch, processes, the error
# knowledge).
_LAZY = {
    "classify": "cudadiag.classification",
    "collect_env": "cudadiag.env",
    "Diagnosis": "cudadiag.incident",
    "EnvInfo": "cudadiag.incident",
    "Incident": "cudadiag.incident",
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
    "Panel": "cudadiag.panel.widget",
    "run_isolated": "cudadiag.isolate.runner",
    "compare": "cudadiag.comparison.magic",
}
__all__ = [  # the lazy names of _LAZY included, as literals for the linters
    "BatchSummary",
    "CudadiagError",
    "Diagnosis",
    "EnvInfo",
    "GuardError",
    "Incident",
    "IncidentSchemaError",
    "Panel",
    "check_class_targets",
    "check_index_range",
    "check_label_mapping",
    "check_same_device",
    "checkpoint",
    "classify",
    "collect_env",
    "guard",
    "incidents",
    "keep_case",
    "load_cases",
    "load_ipython_extension",
    "run_isolated",
    "step_done",
    "summarize",
    "testing",
    "unload_ipython_extension",
    "watch",
]


def incidents() -> list[Incident]:
    """Return every incident of the on-disk log as Incident objects, oldest first."""
    from cudadiag.log.store import IncidentStore

    return IncidentStore().load()


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext cudadiag`: capture CUDA errors of this kernel."""
    from cudadiag.kernel import extension

    extension.load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext cudadiag`: stop capturing and warning (the magics stay registered)."""
    from cudadiag.kernel import extension

    extension.unload(ipython)


def __getattr__(name: str) -> Any:
    if name in ("testing", "checkpoint"):
        return importlib.import_module(f"cudadiag.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cudadiag' has no attribute {name!r}")
