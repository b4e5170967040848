"""watch(): the training loop's iterable, wrapped to record the step and the batch in flight.

While a watch is active the kernel hook and the isolated worker attach the step and the
batch to every incident (watch() registers itself with cudadiag.probes when imported). The
per-step cost is a reference to the batch and its tensors' version counters (a CPU copy only
once the loop is seen changing batches in place); summaries are computed only when an
incident asks for them. For a DataLoader the dataset indices of each batch are recorded by
watching its batch sampler, without drawing anything extra from it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from cudadiag import probes
from cudadiag.batch.fetched import FetchedBatches, follow, iterate_recording_indices
from cudadiag.batch.summary import leaves_with_paths, map_tensors, summarize, tensors_of
from cudadiag.i18n import _, msg
from cudadiag.own_work import outside_user_modes
from cudadiag.step_hooks import SKIP, STOP, step_hooks

if TYPE_CHECKING:  # built on a failure only: a run that does not fail never imports them
    from cudadiag.incident import BatchInfo, BatchSummary, ModelFacts, StepInfo

DEFAULT_MAX_BYTES = 64 * 2**20


@dataclass
class KeptBatch:
    """One recorded step: its number, the batch as the step received it (or None), its size.

    A CPU batch is kept by reference, with its tensors and their version counters, as long
    as the loop does not change batches in place; else `item` is a copy."""

    step: int
    item: Any
    nbytes: int
    batch_size: int | None
    indices: list[int] | None
    note: str | None = None
    tensors: list[torch.Tensor] | None = None
    """For a batch kept by reference: its tensors as received..."""
    versions: list[int] | None = None
    """...and their version counters then."""

    @property
    def batch(self) -> Any:
        """Return the batch as the step received it, or None when only its summary was kept.
        A reference whose tensors were changed in place since is returned as the loop left
        it, and `note` says so; one whose containers got other tensors (`batch[k] =
        batch[k].cuda()`) is rebuilt with the tensors it had."""
        if self.tensors is None or self.versions is None:
            return self.item
        if self.changed_in_place():
            self.note = msg("the loop changed this batch in place after receiving it (tensor "
                            "version counters): kept as the loop left it")
        now = tensors_of(self.item)
        if len(now) == len(self.tensors) and any(
                a is not b for a, b in zip(now, self.tensors, strict=True)):
            received = iter(self.tensors)
            return map_tensors(self.item, lambda _: next(received))
        return self.item

    def changed_in_place(self) -> bool:
        """True when a batch kept by reference had a tensor changed in place since."""
        return self.tensors is not None and [t._version for t in self.tensors] != self.versions


class WatchRecord:
    """What one watch() has seen. Outlives the loop, so a batch can be replayed after the
    failure."""

    def __init__(self, name: str, length: int | None, keep: int, max_bytes: int) -> None:
        self.name = name
        self.length = length
        self.keep = keep
        self.max_bytes = max_bytes
        self.step = -1
        self.last_completed: int | None = None
        self.first_batch_size: int | None = None
        self.current: Any = None
        self.current_size: int | None = None
        self.current_indices: list[int] | None = None
        self.current_tensors: list[torch.Tensor] = []
        """The tensors of the item in flight (found once per step, for every reader)."""
        self.kept: deque[KeptBatch] = deque()
        self.kept_bytes = 0
        self.active = True
        self.exhausted = False
        self.closed_in_cell: int | None = None
        self.replayed_step: int | None = None
        self.by_reference = True
        """Batches are kept by reference until one is seen changed in place."""
        self.framework: str | None = None
        """Set for a record a library's callback keeps (cudadiag.integrations): it counts
        in the cell where it last recorded a step, since a failing loop calls it no more."""
        self.epoch: int | None = None
        self.global_step: int | None = None
        self.micro_step: int | None = None
        self.accumulation: int | None = None
        self.model: ModelFacts | None = None

    def record(self, item: Any, indices: list[int] | None) -> None:
        """Note the next item (called once per step, before it is yielded)."""
        if self.step >= 0:
            self.last_completed = self.step
        self.step += 1
        self.current = item
        self.current_indices = indices
        tensors = self.current_tensors = tensors_of(item)
        size = next((int(t.shape[0]) for t in tensors if t.dim() > 0), None)
        self.current_size = size
        if self.framework is not None:
            self.closed_in_cell = _cell
        if self.first_batch_size is None:
            self.first_batch_size = size
        self._keep(item, tensors, size, indices)

    def step_info(self) -> StepInfo:
        """The step in flight as the incident's `step`."""
        from cudadiag.incident import StepInfo

        size = self.current_size
        smaller = (size is not None and self.first_batch_size is not None
                   and size < self.first_batch_size)
        return StepInfo(
            iteration=self.step, last_completed=self.last_completed, batch_index=self.step,
            last_incomplete=smaller, is_last=self.length is not None
            and self.step == self.length - 1, loader=self.name, framework=self.framework,
            epoch=self.epoch, global_step=self.global_step, micro_step=self.micro_step,
            accumulation=self.accumulation,
        )

    def batch_info(self) -> BatchInfo:
        """The batch in flight as the incident's `batch`: its summary (from the CPU copy when
        one was kept), dataset indices, and what was kept."""
        from cudadiag.incident import BatchInfo

        entry = self.kept[-1] if self.kept and self.kept[-1].step == self.step else None
        source = entry.batch if entry is not None and entry.batch is not None else self.current
        summary = summarize(source)
        if self.current_indices is not None:
            with outside_user_modes():
                _rows_at_extremes(summary, source, self.current_indices)
        return BatchInfo(
            **vars(summary), step=self.step, indices=self.current_indices,
            kept_copy=bool(entry and entry.batch is not None),
            note=entry.note if entry else None,
            replayed=(msg("only step {step} was replayed", step=self.replayed_step)
                      if self.replayed_step is not None else None))

    def batch_at(self, step: int | str) -> KeptBatch:
        """Return the kept batch of `step` ("last" for the newest); raises LookupError."""
        usable = [k for k in self.kept if k.batch is not None]
        if not usable:
            raise LookupError(_("watch {name!r} kept no batch copy (keep={keep}, "
                                "max_bytes={max_bytes})").format(
                name=self.name, keep=self.keep, max_bytes=self.max_bytes))
        if step == "last":
            return usable[-1]
        for kept in usable:
            if kept.step == step:
                return kept
        raise LookupError(_("step {step} is not kept by watch {name!r}; kept steps: "
                            "{kept}").format(step=step, name=self.name,
                                             kept=[k.step for k in usable]))

    def _keep(self, item: Any, tensors: list[torch.Tensor], size: int | None,
              indices: list[int] | None) -> None:
        if self.keep == 0:
            return
        if self.by_reference and self.kept and self.kept[-1].changed_in_place():
            self.by_reference = False  # the loop changes its batches in place: copy them
        nbytes, on_cpu = 0, True
        for t in tensors:  # one pass: this runs every step
            nbytes += t.nbytes
            on_cpu = on_cpu and t.is_cpu
        if nbytes > self.max_bytes:
            grouped = f"{nbytes:,}"
            kept = KeptBatch(self.step, None, 0, size, indices,
                             note=msg("batch of {size} bytes is above max_bytes: summary only",
                                      size=grouped))
        elif not on_cpu:
            kept = KeptBatch(self.step, None, 0, size, indices,
                             note=msg("batch on a GPU: no CPU copy (copying would "
                                      "synchronise)"))
        else:
            versions = _versions(tensors) if self.by_reference else None
            if versions is not None:
                kept = KeptBatch(self.step, item, nbytes, size, indices, tensors=tensors,
                                 versions=versions)
            elif torch._C._len_torch_dispatch_stack():
                with outside_user_modes():  # the copy is cudadiag's, not the user's work
                    kept = KeptBatch(self.step, _cpu_copy(item), nbytes, size, indices)
            else:
                kept = KeptBatch(self.step, _cpu_copy(item), nbytes, size, indices)
        self.kept.append(kept)
        self.kept_bytes += kept.nbytes
        while len(self.kept) > self.keep or self.kept_bytes > self.max_bytes:
            self.kept_bytes -= self.kept.popleft().nbytes


ROWS_NAMED = 8
"""Dataset indices named per extreme of a tensor, at most."""


def _rows_at_extremes(summary: BatchSummary, batch: Any, indices: list[int]) -> None:
    """Set `max_at` and `min_at` of the summary's integer tensors whose rows are the
    batch's samples: the dataset indices of the rows holding the max and the min."""
    by_path = {t.path: t for t in summary.tensors}
    for path, leaf in leaves_with_paths(batch):
        found = by_path.get(path)
        if (found is None or found.max is None or found.min is None or not found.is_integer
                or not isinstance(leaf, torch.Tensor) or not leaf.is_cpu or leaf.dim() == 0
                or leaf.shape[0] != len(indices)):
            continue
        rows = leaf.detach().reshape(len(indices), -1)
        found.max_at = _rows_holding(rows, int(found.max), indices)
        found.min_at = _rows_holding(rows, int(found.min), indices)


def _rows_holding(rows: torch.Tensor, value: int, indices: list[int]) -> list[int]:
    hit = (rows == value).any(dim=1).nonzero().flatten()[:ROWS_NAMED].tolist()
    return [indices[i] for i in hit]


def _versions(tensors: list[torch.Tensor]) -> list[int] | None:
    """The tensors' version counters, or None when one has none (an inference tensor)."""
    try:
        return [t._version for t in tensors]
    except RuntimeError:
        return None


_lock = threading.Lock()
_records: list[WatchRecord] = []
_cell = 0
"""Counts cells (the kernel hook and the isolated worker call new_cell())."""
_replay: dict[str, Any] = {}
"""Set in an isolated child for single-batch replay: {"step": n, "batch": data}."""


def watch(iterable: Iterable[Any], *, name: str | None = None, keep: int = 2,
          max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[Any]:
    """Yield the items of `iterable` unchanged, recording the step, the batch in flight, the
    last completed step, dataset indices (for a DataLoader) and CPU copies of the last `keep`
    batches within `max_bytes`.

    While the returned iterator is active, incidents get `step` and `batch`. Raises ValueError
    for a negative `keep` or `max_bytes`.
    """
    if keep < 0 or max_bytes < 0:
        raise ValueError(_("keep and max_bytes must be zero or positive"))
    length = _length(iterable)
    record = WatchRecord(name or _default_name(iterable), length, keep, max_bytes)
    with _lock:
        _records.append(record)
        del _records[:-16]
    return _watching(iterable, record)


def open_record(name: str, framework: str, *, length: int | None = None, keep: int = 2,
                max_bytes: int = DEFAULT_MAX_BYTES) -> WatchRecord:
    """Return a new record that a library's training loop fills step by step
    (`record.record(batch, indices)`), as watch() would: it attaches to incidents raised in
    the cell where it last recorded a step, and `--batch` replays its kept batches."""
    record = WatchRecord(name, length, keep, max_bytes)
    record.framework, record.active = framework, False
    with _lock:
        _records.append(record)
        del _records[:-16]
    return record


def step_done() -> None:
    """Mark the step in flight of the innermost active watch as completed."""
    record = active_watch()
    if record is not None:
        record.last_completed = record.step


def active_watch() -> WatchRecord | None:
    """Return the most recent watch that is still iterating: started, not exhausted, and not
    abandoned before the current cell. (An exception that leaves the loop closes the
    iterator while it unwinds, before any hook runs: a watch closed during the current cell
    still counts.)"""
    with _lock:
        for record in reversed(_records):
            if record.step < 0 or record.exhausted:
                continue
            if record.active or record.closed_in_cell == _cell:
                return record
    return None


def new_cell() -> None:
    """Note that a new cell starts: watches abandoned earlier are no longer attached."""
    global _cell
    _cell += 1


def step_in_flight() -> tuple[StepInfo, BatchInfo] | None:
    """Return the step and the batch of the active watch (see active_watch), or None."""
    record = active_watch()
    return (record.step_info(), record.batch_info()) if record is not None else None


def latest_watch() -> WatchRecord | None:
    """Return the most recent watch, active or not (for replaying one of its batches)."""
    with _lock:
        return _records[-1] if _records else None


def replay_batch(step: int, batch: Any, indices: list[int] | None = None,
                 full_size: int | None = None) -> None:
    """Make the next watch() in this process yield only `batch`, as step `step` (used by the
    isolated worker for `--batch`), with the dataset `indices` it had and the size of the
    loader's first batch (`full_size`: a smaller batch is the last incomplete one)."""
    _replay.update(step=step, batch=batch, indices=indices, full_size=full_size)


def replay_facts(step: int) -> tuple[list[int] | None, int | None]:
    """Return what the latest watch() knew of its recorded step `step` besides the batch
    (the batch a `--batch` replays comes from it): its dataset indices and the size of the
    loader's first batch; (None, None) for what it does not know."""
    record = latest_watch()
    if record is None:
        return None, None
    kept = next((k for k in record.kept if k.step == step), None)
    return (kept.indices if kept is not None else None), record.first_batch_size


def model_in_flight() -> ModelFacts | None:
    """Return the model facts recorded with the step of the active watch, or None."""
    record = active_watch()
    return record.model if record is not None else None


def take_replay() -> tuple[int, Any] | None:
    """Return the (step, batch) replay_batch() set and forget it; None when none is set (a
    library's trainer replays it in place of its training, cudadiag.integrations)."""
    if not _replay:
        return None
    step, batch = _replay.pop("step"), _replay.pop("batch")
    _replay.clear()
    return step, batch


probes.register_watches(step_in_flight, new_cell, model_in_flight)


def _watching(iterable: Iterable[Any], record: WatchRecord) -> Iterator[Any]:
    try:
        if _replay:
            step, batch = _replay.pop("step"), _replay.pop("batch")
            indices, full_size = _replay.pop("indices", None), _replay.pop("full_size", None)
            record.step, record.replayed_step = step - 1, step
            record.first_batch_size = full_size
            record.record(batch, indices)
            yield batch
            return
        iterator, pending, fetched = _iterate(iterable)
        for item in iterator:
            if fetched is not None:
                entry = fetched.next_run()
                record.record(item, entry[1] if entry else None)
            else:
                record.record(item, pending.popleft() if pending else None)
            hooks = step_hooks()
            answers = [hook(record, item, False) for hook in hooks]
            if STOP in answers:
                break
            if SKIP in answers:
                continue
            yield item
            for hook in hooks:
                hook(record, item, True)
        record.exhausted = True
    finally:
        record.active = False
        record.closed_in_cell = _cell


def _iterate(iterable: Any) -> tuple[Iterator[Any], deque[list[int]] | None,
                                     FetchedBatches | None]:
    """iter(iterable) with the index lists of its batches: from the batch sampler while
    iter() builds a DataLoader's iterator, or, for Accelerate's prepared loader (which builds
    its DataLoader's iterator only once asked for a batch), from the batches its DataLoader
    hands out (fetched.py)."""
    if getattr(iterable, "base_dataloader", None) is not None:
        fetched = FetchedBatches()
        if follow(iterable, fetched):
            return iter(iterable), None, fetched
    iterator, pending = iterate_recording_indices(iterable, iter)
    return iterator, pending, None


def _length(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except TypeError:
        return None


def _default_name(iterable: Any) -> str:
    return type(iterable).__name__


def _cpu_copy(item: Any) -> Any:
    """A copy that keeps dtype, shape and strides (clone preserves the memory format), so
    in-place changes by the loop do not alter what was recorded."""
    return map_tensors(item, lambda t: (t.detach() if t.requires_grad else t).clone())
