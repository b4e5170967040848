"""A batch described by ids and dimensions rather than content (method point 2), and the one
walk over a batch's nested containers that every part of cudadiag uses.

`summarize()` never launches work on, or synchronises with, a GPU: tensors there get
metadata only. The walk is torch's own (`torch.utils._pytree`: tuples, lists, dicts,
namedtuples); the two containers it does not open, dataclasses and mappings that are no
dict (a Hugging Face BatchEncoding), are opened here without registering anything with torch
(registering would change how the user's own code is traced or compiled).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import keystr, tree_leaves, tree_leaves_with_path, tree_map

from cudadiag.i18n import msg
from cudadiag.own_work import outside_user_modes
from cudadiag.shortlist import cut_join

if TYPE_CHECKING:
    from cudadiag.incident import BatchSummary, TensorSummary

SUMMARY_MAX_NUMEL = 10_000_000
DISTINCT_MAX_NUMEL = 1_000_000
COUNTS_MAX_DISTINCT = 64
LENGTHS_SHOWN = 64
MAX_DEPTH = 8
"""Containers opened below one another at most (a batch is not a deep structure)."""


def summarize(obj: Any, *, max_numel: int = SUMMARY_MAX_NUMEL, root: str = "batch") -> BatchSummary:
    """Return a BatchSummary of `obj`: tensors inside tuples, lists, dicts (a BatchEncoding is
    a dict), dataclasses and namedtuples, each recorded with its path (`batch["input_ids"]`).

    Never touches GPU data and never modifies the batch. Does not raise on odd objects: they
    are listed by type under `others`.
    """
    with outside_user_modes():  # cudadiag's own reads stay out of user modes and traces
        return _summarize(obj, max_numel, root)


def _summarize(obj: Any, max_numel: int, root: str) -> BatchSummary:
    from cudadiag.incident import BatchSummary  # on a failure, or when asked: not at start-up

    summary = BatchSummary(structure=_structure(obj))
    for path, leaf in leaves_with_paths(obj, root):
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
    from cudadiag.incident import TensorSummary

    summary = TensorSummary(
        path=path, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
        device=str(t.device), stride=list(t.stride()), contiguous=t.is_contiguous(),
        numel=t.numel(),
    )
    if t.device.type != "cpu":
        summary.values_skipped = msg("on {device}: metadata only (reading would synchronise)",
                                     device=str(t.device))
    elif t.numel() > max_numel:
        count, budget = f"{t.numel():,}", f"{max_numel:,}"
        summary.values_skipped = msg("{count} elements: above the {budget} budget",
                                     count=count, budget=budget)
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


def leaves_with_paths(obj: Any, root: str = "batch") -> Iterator[tuple[str, Any]]:
    """Yield (path, leaf) for every leaf of `obj`, in order: tensors and other values inside
    tuples, lists, dicts, namedtuples, dataclasses and other mappings, each with the path
    Python would reach it by (`batch['input_ids']`, `batch[0]`, `batch.labels`)."""
    yield from _leaves(obj, root, 0)


def tensors_of(item: Any) -> list[torch.Tensor]:
    """Return the tensors of a batch, in order, without building paths (watch() calls this
    every step)."""
    return _tensors(item, 0)


def map_tensors(item: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Return `item` with `fn` applied to every tensor inside tuples, lists, dicts,
    namedtuples, dataclasses and other mappings (which become dicts unless they are dicts);
    other leaves are kept as they are."""
    return _map(item, fn, 0)


def _is_none(value: Any) -> bool:
    return value is None  # pytree reads None as an empty node; a summary lists it


def _leaves(obj: Any, root: str, depth: int) -> Iterator[tuple[str, Any]]:
    for keypath, leaf in tree_leaves_with_path(obj, is_leaf=_is_none):
        path = root + keystr(keypath)
        opened = _opened(leaf) if depth < MAX_DEPTH else None
        if opened is None:
            yield path, leaf
        else:
            for suffix, child in opened:
                yield from _leaves(child, path + suffix, depth + 1)


def _tensors(obj: Any, depth: int) -> list[torch.Tensor]:
    found = []
    for leaf in tree_leaves(obj):
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
        elif depth < MAX_DEPTH and (opened := _opened(leaf)) is not None:
            found += [t for _, child in opened for t in _tensors(child, depth + 1)]
    return found


def _opened(leaf: Any) -> list[tuple[str, Any]] | None:
    """The children of a container pytree does not open, with their path suffixes; None for
    a true leaf."""
    if isinstance(leaf, Mapping):
        return [(f"[{key!r}]", value) for key, value in leaf.items()]
    if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        return [(f".{f.name}", getattr(leaf, f.name)) for f in dataclasses.fields(leaf)]
    return None


def _map(item: Any, fn: Callable[[torch.Tensor], torch.Tensor], depth: int) -> Any:
    def leaf(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return fn(value)
        if depth >= MAX_DEPTH:
            return value
        if isinstance(value, Mapping):
            mapped = {k: _map(v, fn, depth + 1) for k, v in value.items()}
            return type(value)(mapped) if isinstance(value, dict) else mapped
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.replace(value, **{
                f.name: _map(getattr(value, f.name), fn, depth + 1)
                for f in dataclasses.fields(value) if f.init})
        return value

    return tree_map(leaf, item)  # None stays None (an empty node to pytree)
