"""The dataset indices of a DataLoader's batches, read from its batch sampler without drawing
anything extra from it; and the batches a DataLoader handed out and its consumer (a
library's loop, Accelerate's prepared loader) has not run yet, with their dataset indices,
oldest first.

Libraries fetch ahead of the step they run (Lightning one batch, the Hugging Face Trainer a
whole gradient accumulation, worker processes more): the batch a step runs is the oldest one
fetched and not yet run. The loader is followed by giving this one instance a subclass of its
own class whose `__iter__` notes each batch as it leaves the loader, with the index list its
batch sampler handed out for it (watch()'s sampler recording); nothing else of the loader
changes and nothing extra is drawn from it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

_INDEX_SAMPLER = "_index_sampler"
"""The DataLoader property its iterator reads the batch sampler through."""
_FETCHED = "_cudadiag_fetched"
_classes: dict[type[DataLoader[Any]], type[DataLoader[Any]]] = {}


class FetchedBatches:
    """The batches fetched and not yet run: (batch, dataset indices or None), oldest first."""

    def __init__(self) -> None:
        self.pending: deque[tuple[Any, list[int] | None]] = deque()

    def next_run(self) -> tuple[Any, list[int] | None] | None:
        """Return the oldest batch fetched and not yet run, and forget it; None when none
        is pending (a loader that could not be followed)."""
        return self.pending.popleft() if self.pending else None


def follow(loader: Any, fetched: FetchedBatches) -> bool:
    """Make `loader` (a DataLoader, or Accelerate's prepared loader around one) note every
    batch it hands out in `fetched`. Returns False when it holds no DataLoader."""
    base = getattr(loader, "base_dataloader", loader)  # Accelerate's DataLoaderShard
    if not isinstance(base, DataLoader):
        return False
    cls = type(base)
    if _FETCHED not in vars(cls):
        base.__class__ = _following_class(cls)
    object.__setattr__(base, _FETCHED, fetched)
    return True


def _following_class(cls: type[DataLoader[Any]]) -> type[DataLoader[Any]]:
    if cls not in _classes:
        start = cls.__iter__

        def __iter__(self: Any) -> Iterator[Any]:
            fetched: FetchedBatches = getattr(self, _FETCHED)
            fetched.pending.clear()  # a new epoch: what was fetched before will not run
            iterator, handed_out = iterate_recording_indices(self, start)
            return _noting(iterator, handed_out, fetched)

        _classes[cls] = type(cls.__name__, (cls,), {"__iter__": __iter__, _FETCHED: None,
                                                    "__module__": cls.__module__})
    return _classes[cls]


def _noting(iterator: Iterator[Any], handed_out: deque[list[int]] | None,
            fetched: FetchedBatches) -> Iterator[Any]:
    for item in iterator:
        fetched.pending.append((item, handed_out.popleft() if handed_out else None))
        yield item


class _RecordingSampler:
    """Wraps a DataLoader's batch sampler: hands out the same index lists, noting each."""

    def __init__(self, sampler: Any, handed_out: deque[list[int]]) -> None:
        self.sampler = sampler
        self.handed_out = handed_out

    def __iter__(self) -> Iterator[Any]:
        for index in self.sampler:
            self.handed_out.append(list(index) if isinstance(index, (list, tuple))
                                   else [index])
            yield index

    def __len__(self) -> int:
        return len(self.sampler)


def iterate_recording_indices(iterable: Any, start: Callable[[Any], Iterator[Any]]
                              ) -> tuple[Iterator[Any], deque[list[int]] | None]:
    """start(iterable), its iterator; for a DataLoader, also the index lists its batch
    sampler hands out, in order (batches come back in that order unless `in_order=False`).

    The loader reads its sampler through the `_index_sampler` property when the iterator is
    built (worker processes prefetch index lists right then), so the property is swapped, for
    this loader only, for the duration of iter(): nothing extra is drawn from the sampler and
    the data are unchanged.
    """
    owner = next((c for c in type(iterable).__mro__ if _INDEX_SAMPLER in vars(c)), None)
    prop = vars(owner).get(_INDEX_SAMPLER) if owner else None
    if (owner is None or not isinstance(prop, property) or prop.fget is None
            or getattr(iterable, "in_order", True) is False):
        return start(iterable), None
    read_sampler = prop.fget
    handed_out: deque[list[int]] = deque()

    def index_sampler(loader: Any) -> Any:
        sampler = read_sampler(loader)
        return _RecordingSampler(sampler, handed_out) if loader is iterable else sampler

    setattr(owner, _INDEX_SAMPLER, property(index_sampler))
    try:
        iterator = start(iterable)
    finally:
        setattr(owner, _INDEX_SAMPLER, prop)
    return iterator, handed_out
