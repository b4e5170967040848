"""A failing operator's offending position as an element of the batch: the loss of a token
classification or a language model flattens its targets (`labels.view(-1)`), so the
precheck's "target 3 at position 74" indexes `labels.view(-1)`; in a batch of 8 rows of 32
tokens that is `labels[2, 10]`, row 2 of the batch, whose dataset index the loader gave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cudadiag.batch.offending import offending_tensor
from cudadiag.contracts import Violation
from cudadiag.incident import BatchInfo, BatchPosition

TARGET_ARGUMENTS = frozenset({"target"})
"""The operators' arguments (contracts.CONTRACTS) whose shape is the input's without its
class dimension (dim 1): a loss's class targets."""


def position_in_batch(violation: Violation, batch: BatchInfo,
                      names: Sequence[str]) -> BatchPosition | None:
    """Return the element of the batch that the violation's first offending position names,
    or None when no batch tensor can be told to hold the operator's targets: of the integer
    tensors of as many elements as the targets, the one offending.offending_tensor() finds
    (`names`: the keys the model reads its labels from, in order)."""
    if violation.argument not in TARGET_ARGUMENTS or len(violation.shape) < 2:
        return None
    target_shape = [violation.shape[0], *violation.shape[2:]]
    sized = [t for t in batch.tensors if t.numel == math.prod(target_shape)]
    tensor = offending_tensor(sized, violation.values[0], (violation.low, violation.high),
                              names=names)
    if tensor is None or not tensor.shape:
        return None
    index = _unravel(_ravel(list(violation.positions[0]), target_shape), tensor.shape)
    indices = batch.indices
    dataset_index = (indices[index[0]] if indices is not None
                     and len(indices) == tensor.shape[0] else None)
    if len(index) == 1 and dataset_index is None:
        return None  # the same position in the same one row: nothing more to say
    return BatchPosition(tensor=tensor.path, index=index, dataset_index=dataset_index)


def _ravel(position: list[int], shape: list[int]) -> int:
    flat = 0
    for at, size in zip(position, shape, strict=False):
        flat = flat * size + at
    return flat


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        flat, at = divmod(flat, size)
        index.append(at)
    return list(reversed(index))
