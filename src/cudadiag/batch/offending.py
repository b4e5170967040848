"""The batch tensor a failing operator read its offending value from: a classifier's batch
holds token ids 0..63 beside labels 0..2 with one 3; a loss failing on target 3 outside
[0, 3) read `batch['labels']`, though `batch['input_ids']` leaves that range too. Each fact
the incident records narrows the batch's integer tensors, the most direct first, and is
passed over where no tensor fits it (the operator may have read a tensor derived from the
batch): values outside the valid range (a tensor inside it cannot have raised), the
operator's own argument (its value range, its number of elements), the offending value as
the tensor's max or min (else within its span), then the tensor's name (the keys the model
reads that kind of index from). Nothing is guessed: where several tensors still fit, none is
named.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudadiag.incident import TensorArg, TensorSummary

_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
"""How the tracer records an integer tensor argument's values (TensorArg.value): `0..3`."""


def value_range(argument: TensorArg) -> tuple[int, int] | None:
    """Return (min, max) of an operator's integer tensor argument as the tracer recorded it,
    or None where it recorded no values (a tensor on a GPU, or above the size budget)."""
    found = _RANGE.match(argument.value or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def offending_candidates(tensors: Sequence[TensorSummary], value: object,
                         valid: Sequence[int] | None = None, argument: TensorArg | None = None,
                         names: Sequence[str] = ()) -> list[TensorSummary]:
    """Return the batch's integer tensors that may hold the operator's offending `value` (an
    int, or None when unknown), narrowed by each fact known: values outside `valid` ([low,
    high), where known: none left means none held it); then, each where some tensor fits it,
    the operator's `argument` (its recorded value range, its number of elements), `value` as
    max or min (else within the span), and a key among `names` (the first that one has; else
    a key containing one of them). A tensor whose values were not read (on a GPU, above the
    size budget) fits every fact about values: none rules it out."""
    found = [t for t in tensors if t.is_integer]
    if valid is not None and len(valid) == 2:
        low, high = int(valid[0]), int(valid[1])
        found = [t for t in found if _fits(t, lambda first, last: first < low or last >= high)]
    if argument is not None:
        seen = value_range(argument)
        found = _narrowed(found, lambda t: seen is not None and _fits(
            t, lambda first, last: (first, last) == seen))
        numel = math.prod(argument.shape) if argument.shape is not None else None
        found = _narrowed(found, lambda t: t.numel == numel)
    if isinstance(value, int):
        found = _narrowed(found, lambda t: _fits(t, lambda first, last: value in (first, last)))
        found = _narrowed(found, lambda t: _fits(t, lambda first, last: first <= value <= last))
    return _by_name(found, names)


def offending_tensor(tensors: Sequence[TensorSummary], value: object,
                     valid: Sequence[int] | None = None, argument: TensorArg | None = None,
                     names: Sequence[str] = ()) -> TensorSummary | None:
    """Return the one tensor offending_candidates() leaves, None where it leaves none or
    several."""
    found = offending_candidates(tensors, value, valid, argument, names)
    return found[0] if len(found) == 1 else None


def _has_key(tensor: TensorSummary, name: str) -> bool:
    """Return True when the batch holds `tensor` under the key or attribute `name`
    (`batch['labels']`, `batch.labels`, `batch[0]['labels']`)."""
    return tensor.path.endswith((f"[{name!r}]", f".{name}"))


def _fits(tensor: TensorSummary, holds: Callable[[int, int], bool]) -> bool:
    """Whether the tensor's (min, max) `holds`; True where its values were not read."""
    if tensor.min is None or tensor.max is None:
        return True
    return holds(int(tensor.min), int(tensor.max))


def _narrowed(tensors: list[TensorSummary], fits: Callable[[TensorSummary], bool]
              ) -> list[TensorSummary]:
    return [t for t in tensors if fits(t)] or tensors


def _by_name(tensors: list[TensorSummary], names: Sequence[str]) -> list[TensorSummary]:
    if len(tensors) < 2:
        return tensors
    for name in names:
        named = [t for t in tensors if _has_key(t, name)]
        if named:
            return named
    return _narrowed(tensors, lambda t: any(name in _key(t) for name in names))


def _key(tensor: TensorSummary) -> str:
    """The last key or attribute of the tensor's path: `labels` of `batch['labels']`."""
    return re.split(r"[\[\].'\"]+", tensor.path.rstrip("]'\""))[-1]
