"""The batch in flight: its summary (summary.py) and watch() over a training loop
(watcher.py: a module named `watch` would be shadowed by the function of that name).

The names below are the ones notebooks and exported repros import (`from cudadiag.batch
import replay_batch`): they stay here. They are loaded on first use, as the modules that hold
them import torch: a process that only needs the package's other modules
(`cudadiag.batch.positions`, which the incident builder reads) does not import torch for them
(`cudadiag run`'s own process then never imports it: its child does).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are loaded on first use; their real signatures:
    from cudadiag.batch.summary import map_tensors, summarize, tensors_of
    from cudadiag.batch.watcher import (
        WatchRecord,
        active_watch,
        latest_watch,
        new_cell,
        replay_batch,
        step_done,
        watch,
    )
    from cudadiag.incident import BatchSummary, TensorSummary

_LAZY = {
    **dict.fromkeys(("BatchSummary", "TensorSummary"), "cudadiag.incident"),
    **dict.fromkeys(("map_tensors", "summarize", "tensors_of"), "cudadiag.batch.summary"),
    **dict.fromkeys(("WatchRecord", "active_watch", "latest_watch", "new_cell", "replay_batch",
                     "step_done", "watch"), "cudadiag.batch.watcher"),
}
__all__ = ["BatchSummary", "TensorSummary", "WatchRecord", "active_watch", "latest_watch",
           "map_tensors", "new_cell", "replay_batch", "step_done", "summarize", "tensors_of",
           "watch"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cudadiag.batch' has no attribute {name!r}")
