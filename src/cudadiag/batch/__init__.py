"""The batch in flight: its summary (summary.py) and watch() over a training loop
(watcher.py: a module named `watch` would be shadowed by the function of that name).

The names below are the ones notebooks and exported repros import (`from cudadiag.batch
import replay_batch`): they stay here.
"""

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

__all__ = ["BatchSummary", "TensorSummary", "WatchRecord", "active_watch", "latest_watch",
           "map_tensors", "new_cell", "replay_batch", "step_done", "summarize", "tensors_of",
           "watch"]
