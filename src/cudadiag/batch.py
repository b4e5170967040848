"""The batch in flight: summaries of what a step consumed, and watch() over a training loop.

`summarize()` describes a batch by ids and dimensions rather than content (guide point 2) and
never launches work on, or synchronises with, a GPU: tensors there get metadata only.
`watch()` wraps the loop's iterable; while it is active the kernel hook and the isolated worker
attach the step and the batch to every incident. The per-step cost is a reference to the batch
and its tensors' version counters (a CPU copy only once the loop is seen changing batches in
place); summaries are computed only when an incident asks for them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cudadiag.incident import StepInfo
from cudadiag.own_work import outside_user_modes
from cudadiag.shortlist import cut_join
from cudadiag.step_hooks import SKIP, STOP, step_hooks

SUMMARY_MAX_NUMEL = 10_000_000
DISTINCT_MAX_NUMEL = 1_000_000
COUNTS_MAX_DISTINCT = 64
LENGTHS_SHOWN = 64
DEFAULT_MAX_BYTES = 64 * 2**20


@dataclass
class TensorSummary:
    """One tensor of a batch: metadata always, values only on the CPU and within budget."""

    path: str
    shape: list[int]
    dtype: str
    device: str
    stride: list[int]
    contiguous: bool
    numel: int
    min: float | None = None
    max: float | None = None
    negatives: int | None = None
    distinct: int | None = None
    nan: int | None = None
    inf: int | None = None
    values_skipped: str | None = None
    """Why values were not read (on a GPU, above the size budget)."""
    counts: list[list[int]] | None = None
    """[value, count] pairs of an integer tensor with few distinct values (the picture of
    targets against their valid range)."""


@dataclass
class BatchSummary:
    """A batch's structure and its tensors."""

    structure: str
    tensors: list[TensorSummary] = field(default_factory=list)
    others: dict[str, str] = field(default_factory=dict)
    """Non-tensor leaves by path: their type (and the value for short scalars)."""
    batch_size: int | None = None
    lengths: list[int] | None = None
    """Sequence lengths from an attention mask, when the batch has one (first rows)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the summary as JSON-ready dicts."""
        return dataclasses.asdict(self)

    def tensor(self, path: str) -> TensorSummary:
        """Return the summary of the tensor at `path`; raises KeyError when there is none."""
        for t in self.tensors:
            if t.path == path:
                return t
        raise KeyError(f"no tensor at {path}; paths: {[t.path for t in self.tensors]}")


def summarize(obj: Any, *, max_numel: int = SUMMARY_MAX_NUMEL, root: str = "batch") -> BatchSummary:
    """Return a BatchSummary of `obj`: tensors inside tuples, lists, dicts (a BatchEncoding is
    a dict), dataclasses and namedtuples, each recorded with its path (`batch["input_ids"]`).

    Never touches GPU data and never modifies the batch. Does not raise on odd objects: they
    are listed by type under `others`.
    """
    with outside_user_modes():  # cudadiag's own reads stay out of user modes and traces
        return _summarize(obj, max_numel, root)


def _summarize(obj: Any, max_numel: int, root: str) -> BatchSummary:
    summary = BatchSummary(structure=_structure(obj))
    for path, leaf in _leaves(obj, root):
        if isinstance(leaf, torch.Tensor):
            summary.tensors.append(_tensor_summary(path, leaf, max_numel))
        else:
            summary.others[path] = _describe_other(leaf)
    if summary.tensors and summary.tensors[0].shape:
        summary.batch_size = summary.tensors[0].shape[0]
    mask = _attention_mask(obj)
    if mask is not None:
        summary.lengths = mask.sum(dim=-1)[:LENGTHS_SHOWN].tolist()
    return summary


def _leaves(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if depth > 8:
        yield path, obj
    elif isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from _leaves(value, f"{path}[{key!r}]", depth + 1)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name in obj._fields:
            yield from _leaves(getattr(obj, name), f"{path}.{name}", depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _leaves(getattr(obj, f.name), f"{path}.{f.name}", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _leaves(value, f"{path}[{i}]", depth + 1)
    else:
        yield path, obj


def _structure(obj: Any, depth: int = 0) -> str:
    if isinstance(obj, torch.Tensor):
        return "Tensor"
    if depth > 2:
        return type(obj).__name__
    if isinstance(obj, Mapping):
        return f"{type(obj).__name__}[{', '.join(str(k) for k in obj)}]"
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return f"{type(obj).__name__}({', '.join(obj._fields)})"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return f"{type(obj).__name__}({', '.join(f.name for f in dataclasses.fields(obj))})"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__}[{cut_join(obj, 8, lambda v: _structure(v, depth + 1))}]"
    return type(obj).__name__


def _tensor_summary(path: str, t: torch.Tensor, max_numel: int) -> TensorSummary:
    summary = TensorSummary(
        path=path, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
        device=str(t.device), stride=list(t.stride()), contiguous=t.is_contiguous(),
        numel=t.numel(),
    )
    if t.device.type != "cpu":
        summary.values_skipped = f"on {t.device}: metadata only (reading would synchronise)"
    elif t.numel() > max_numel:
        summary.values_skipped = f"{t.numel():,} elements: above the {max_numel:,} budget"
    elif t.numel():
        _fill_values(summary, t.detach())
    return summary


def _fill_values(summary: TensorSummary, t: torch.Tensor) -> None:
    if t.dtype == torch.bool:
        summary.min, summary.max = int(t.min()), int(t.max())
    elif t.dtype.is_floating_point:
        finite = t[torch.isfinite(t)]
        summary.nan = int(torch.isnan(t).sum())
        summary.inf = int(torch.isinf(t).sum())
        if finite.numel():
            summary.min, summary.max = float(finite.min()), float(finite.max())
    elif not t.dtype.is_complex:
        summary.min, summary.max = int(t.min()), int(t.max())
        summary.negatives = int((t < 0).sum())
        if t.numel() <= DISTINCT_MAX_NUMEL:
            values, counts = torch.unique(t, return_counts=True)
            summary.distinct = int(values.numel())
            if summary.distinct <= COUNTS_MAX_DISTINCT:
                summary.counts = [[v, c] for v, c in zip(values.tolist(), counts.tolist(),
                                                               strict=True)]


def _describe_other(value: Any) -> str:
    if isinstance(value, (int, float, bool, str)) and len(repr(value)) <= 40:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def _attention_mask(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, Mapping):
        mask = obj.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.device.type == "cpu" and mask.dim() >= 1:
            return mask.long()
    return None


# --------------------------------------------------------------------------- watch()


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
            self.note = ("the loop changed this batch in place after receiving it (tensor "
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
        if self.first_batch_size is None:
            self.first_batch_size = size
        self._keep(item, tensors, size, indices)

    def step_info(self) -> StepInfo:
        """The step in flight as the incident's `step`."""
        size = self.current_size
        smaller = (size is not None and self.first_batch_size is not None
                   and size < self.first_batch_size)
        return StepInfo(
            iteration=self.step, last_completed=self.last_completed, batch_index=self.step,
            last_incomplete=smaller, is_last=self.length is not None
            and self.step == self.length - 1, loader=self.name,
        )

    def batch_info(self) -> dict[str, Any]:
        """The batch in flight as the incident's `batch`: its summary (from the CPU copy when
        one was kept), dataset indices, and what was kept."""
        entry = self.kept[-1] if self.kept and self.kept[-1].step == self.step else None
        source = entry.batch if entry is not None and entry.batch is not None else self.current
        info = summarize(source).to_dict()
        info["step"] = self.step
        info["indices"] = self.current_indices
        info["kept_copy"] = bool(entry and entry.batch is not None)
        if entry and entry.note:
            info["note"] = entry.note
        if self.replayed_step is not None:
            info["replayed"] = f"only step {self.replayed_step} was replayed"
        return info

    def batch_at(self, step: int | str) -> KeptBatch:
        """Return the kept batch of `step` ("last" for the newest); raises LookupError."""
        usable = [k for k in self.kept if k.batch is not None]
        if not usable:
            raise LookupError(f"watch {self.name!r} kept no batch copy (keep={self.keep}, "
                              f"max_bytes={self.max_bytes})")
        if step == "last":
            return usable[-1]
        for kept in usable:
            if kept.step == step:
                return kept
        raise LookupError(f"step {step} is not kept by watch {self.name!r}; kept steps: "
                          f"{[k.step for k in usable]}")

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
            kept = KeptBatch(self.step, None, 0, size, indices,
                             note=f"batch of {nbytes:,} bytes is above max_bytes: summary only")
        elif not on_cpu:
            kept = KeptBatch(self.step, None, 0, size, indices,
                             note="batch on a GPU: no CPU copy (copying would synchronise)")
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
        raise ValueError("keep and max_bytes must be zero or positive")
    length = _length(iterable)
    record = WatchRecord(name or _default_name(iterable), length, keep, max_bytes)
    with _lock:
        _records.append(record)
        del _records[:-16]
    return _watching(iterable, record)


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


def latest_watch() -> WatchRecord | None:
    """Return the most recent watch, active or not (for replaying one of its batches)."""
    with _lock:
        return _records[-1] if _records else None


def replay_batch(step: int, batch: Any) -> None:
    """Make the next watch() in this process yield only `batch`, as step `step` (used by the
    isolated worker for `--batch`)."""
    _replay.update(step=step, batch=batch)


def _watching(iterable: Iterable[Any], record: WatchRecord) -> Iterator[Any]:
    try:
        if _replay:
            step, batch = _replay.pop("step"), _replay.pop("batch")
            record.step, record.replayed_step = step - 1, step
            record.record(batch, None)
            yield batch
            return
        iterator, pending = _iterate_recording_indices(iterable)
        for item in iterator:
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


def _iterate_recording_indices(iterable: Any) -> tuple[Iterator[Any], deque[list[int]] | None]:
    """iter(iterable); for a DataLoader, also the index lists its batch sampler hands out, in
    order (batches come back in that order unless `in_order=False`).

    The loader reads its sampler through the `_index_sampler` property when the iterator is
    built (worker processes prefetch index lists right then), so the property is swapped, for
    this loader only, for the duration of iter(): nothing extra is drawn from the sampler and
    the data are unchanged.
    """
    owner = next((c for c in type(iterable).__mro__ if "_index_sampler" in vars(c)), None)
    prop = vars(owner).get("_index_sampler") if owner else None
    if not isinstance(prop, property) or getattr(iterable, "in_order", True) is False:
        return iter(iterable), None
    handed_out: deque[list[int]] = deque()

    def index_sampler(loader: Any) -> Any:
        sampler = prop.fget(loader)
        return _RecordingSampler(sampler, handed_out) if loader is iterable else sampler

    owner._index_sampler = property(index_sampler)
    try:
        iterator = iter(iterable)
    finally:
        owner._index_sampler = prop
    return iterator, handed_out


def _length(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except TypeError:
        return None


def _default_name(iterable: Any) -> str:
    return type(iterable).__name__


def tensors_of(item: Any, depth: int = 0) -> list[torch.Tensor]:
    """Return the tensors of a batch, in order, without building paths (this runs every
    step of watch())."""
    if isinstance(item, torch.Tensor):
        return [item]
    if depth > 8:
        return []
    if isinstance(item, (list, tuple)):
        return [t for v in item for t in tensors_of(v, depth + 1)]
    if isinstance(item, Mapping):
        return [t for v in item.values() for t in tensors_of(v, depth + 1)]
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [t for f in dataclasses.fields(item)
                for t in tensors_of(getattr(item, f.name), depth + 1)]
    return []


def map_tensors(item: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Return `item` with `fn` applied to every tensor inside tuples, lists, dicts (other
    mappings become dicts), namedtuples and dataclasses; other leaves are kept as they are."""
    if isinstance(item, torch.Tensor):
        return fn(item)
    if isinstance(item, Mapping):
        mapped = {k: map_tensors(v, fn) for k, v in item.items()}
        return type(item)(mapped) if isinstance(item, dict) else mapped
    if isinstance(item, tuple) and hasattr(item, "_fields"):
        return type(item)(*(map_tensors(v, fn) for v in item))
    if isinstance(item, (list, tuple)):
        return type(item)(map_tensors(v, fn) for v in item)
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.replace(item, **{f.name: map_tensors(getattr(item, f.name), fn)
                                            for f in dataclasses.fields(item) if f.init})
    return item


def _cpu_copy(item: Any) -> Any:
    """A copy that keeps dtype, shape and strides (clone preserves the memory format), so
    in-place changes by the loop do not alter what was recorded."""
    return map_tensors(item, lambda t: (t.detach() if t.requires_grad else t).clone())
