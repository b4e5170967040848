"""Index contracts of aten operators: which argument holds indices and which range is valid.

On CUDA a broken contract is a kernel assertion (`device-side assert triggered`), reported
later and without the values. Two parts read this table: the simulator (testing.py) decides
when a simulated kernel would assert and what it would print, and the tracer's prechecks
(trace.py) name the operator, argument, values and positions before a real kernel runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_REPORTED = 10


@dataclass(frozen=True)
class KernelAssert:
    """What the CUDA kernel behind an operator prints when its assertion fails."""

    file: str
    line: int
    kernel: str
    assertion: str


@dataclass(frozen=True)
class IndexContract:
    """The index argument of one aten operator and the range its values must lie in."""

    op: str
    argument: str
    index_arg: int
    bounds: Callable[[tuple[Any, ...]], tuple[int, int]]
    """(low, high): values must satisfy low <= v < high."""
    kernel_assert: KernelAssert
    ignore_arg: int | None = None
    """Position of an `ignore_index` argument whose value is always allowed."""
    index_is_list: bool = False
    """For aten::index / index_put: the argument is a list of index tensors, one per dim."""
    dim_arg: int | None = None
    """Position of the `dim` argument, for messages."""
    cpu_error: str = "index {value} is out of bounds for dimension {dim} with size {high}"
    """What the CPU kernel raises for the same input (formatted with the Violation)."""


@dataclass
class Violation:
    """Index values outside an operator's valid range."""

    op: str
    argument: str
    low: int
    high: int
    values: list[int]
    positions: list[tuple[int, ...]]
    count: int
    ignore_index: int | None = None
    kernel_assert: KernelAssert | None = None
    dim: int | None = field(default=None)
    cpu_error: str = ""

    def cpu_message(self) -> str:
        """Return what the CPU kernel would raise for these values."""
        return self.cpu_error.format(value=self.values[0], dim=self.dim or 0, high=self.high)

    def message(self) -> str:
        """Return e.g. `aten::nll_loss_forward: target 4 at position 2 outside [0, 4)
        (ignore_index=-100)`."""
        positions = [p[0] if len(p) == 1 else p for p in self.positions]
        if len(self.values) == 1:
            what = f"{self.argument} {self.values[0]} at position {positions[0]}"
        else:
            what = f"{self.argument} values {self.values} at positions {positions}"
        text = f"aten::{self.op}: {what} outside [{self.low}, {self.high})"
        if self.ignore_index is not None:
            text += f" (ignore_index={self.ignore_index})"
        if self.count > len(self.values):
            text += f"; {self.count} offending elements in all"
        return text


def _class_bounds(input_pos: int) -> Callable[[tuple[Any, ...]], tuple[int, int]]:
    def bounds(args: tuple[Any, ...]) -> tuple[int, int]:
        x = args[input_pos]
        return 0, int(x.shape[1] if x.dim() >= 2 else x.shape[0])

    return bounds


def _dim_bounds(self_pos: int, dim_pos: int) -> Callable[[tuple[Any, ...]], tuple[int, int]]:
    def bounds(args: tuple[Any, ...]) -> tuple[int, int]:
        return 0, int(args[self_pos].shape[args[dim_pos]])

    return bounds


def _rows(args: tuple[Any, ...]) -> tuple[int, int]:
    return 0, int(args[0].shape[0])


_LOSS = "/pytorch/aten/src/ATen/native/cuda/Loss.cu"
_NLL2D = "/pytorch/aten/src/ATen/native/cuda/NLLLoss2d.cu"
_INDEXING = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu"
_SCATTER = "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu"
_INDEX_KERNEL = "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu"
_TARGET_ASSERT = "t >= 0 && t < n_classes"
_TARGET_CPU = "Target {value} is out of bounds."
_RANGE_CPU = "index out of range in self"
_SELECT = KernelAssert(_INDEXING, 1422, "indexSelectLargeIndex", "srcIndex < srcSelectDimSize")
_GATHER = KernelAssert(_SCATTER, 367, "operator()",
                       'idx_dim >= 0 && idx_dim < index_size && "index out of bounds"')
_ADVANCED = KernelAssert(_INDEX_KERNEL, 92, "operator()",
                         '-sizes[i] <= index && index < sizes[i] && "index out of bounds"')

CONTRACTS: dict[str, IndexContract] = {
    c.op: c
    for c in (
        IndexContract("nll_loss_forward", "target", 1, _class_bounds(0),
                      KernelAssert(_LOSS, 250, "nll_loss_forward_reduce_cuda_kernel_2d",
                                   _TARGET_ASSERT), ignore_arg=4, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss_backward", "target", 2, _class_bounds(1),
                      KernelAssert(_LOSS, 372, "nll_loss_backward_reduce_cuda_kernel_2d",
                                   _TARGET_ASSERT), ignore_arg=5, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss2d_forward", "target", 1, _class_bounds(0),
                      KernelAssert(_NLL2D, 106, "nll_loss2d_forward_kernel", _TARGET_ASSERT),
                      ignore_arg=4, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss2d_backward", "target", 2, _class_bounds(1),
                      KernelAssert(_NLL2D, 179, "nll_loss2d_backward_kernel", _TARGET_ASSERT),
                      ignore_arg=5, cpu_error=_TARGET_CPU),
        IndexContract("embedding", "indices", 1, lambda a: (0, int(a[0].shape[0])), _SELECT,
                      cpu_error=_RANGE_CPU),
        IndexContract("embedding_dense_backward", "indices", 1, lambda a: (0, int(a[2])),
                      _SELECT, cpu_error=_RANGE_CPU),
        IndexContract("index_select", "index", 2, _dim_bounds(0, 1), _SELECT,
                      cpu_error=_RANGE_CPU),
        IndexContract("gather", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter_", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter_add", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter_add_", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter_reduce", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("scatter_reduce_", "index", 2, _dim_bounds(0, 1), _GATHER, dim_arg=1),
        IndexContract("index", "indices", 1, _rows, _ADVANCED, index_is_list=True),
        IndexContract("index_put", "indices", 1, _rows, _ADVANCED, index_is_list=True),
        IndexContract("index_put_", "indices", 1, _rows, _ADVANCED, index_is_list=True),
        IndexContract("_index_put_impl_", "indices", 1, _rows, _ADVANCED, index_is_list=True),
    )
}


def contract_for(op_name: str) -> IndexContract | None:
    """Return the index contract of an aten operator (`nll_loss_forward`,
    `aten::gather`, `aten.index.Tensor`) or None when it has none."""
    name = op_name.replace("aten::", "").replace("aten.", "").split(".")[0]
    return CONTRACTS.get(name)


def check(contract: IndexContract, args: tuple[Any, ...]) -> Violation | None:
    """Return the violation of `contract` by an operator call's positional args, or None.

    Reads the index tensor's values (a device synchronisation on a GPU: diagnostic runs only).
    Never modifies the arguments.
    """
    if len(args) <= contract.index_arg:
        return None
    if contract.index_is_list:
        return _check_index_list(contract, args)
    index = args[contract.index_arg]
    if not _is_integer_tensor(index) or index.numel() == 0:
        return None
    low, high = contract.bounds(args)
    ignore = args[contract.ignore_arg] if contract.ignore_arg is not None and len(
        args) > contract.ignore_arg else (-100 if contract.ignore_arg is not None else None)
    found = _violation(contract, index, low, high, ignore)
    if found is not None and contract.dim_arg is not None:
        found.dim = int(args[contract.dim_arg])
    return found


def sanitized_args(contract: IndexContract, args: tuple[Any, ...],
                   violation: Violation) -> tuple[Any, ...]:
    """Return a copy of `args` whose index values are forced into range, so that the CPU
    kernel can compute the garbage result a faulting CUDA kernel would leave behind."""
    fixed = list(args)
    if contract.index_is_list:
        sizes = args[0].shape
        fixed[contract.index_arg] = [
            t if not _is_integer_tensor(t) else t.clamp(-int(sizes[d]), int(sizes[d]) - 1)
            for d, t in enumerate(args[contract.index_arg])
        ]
        return tuple(fixed)
    index = args[contract.index_arg]
    bad = (index < violation.low) | (index >= violation.high)
    if violation.ignore_index is not None:
        fixed[contract.index_arg] = index.masked_fill(bad, violation.ignore_index)
    else:
        fixed[contract.index_arg] = index.clamp(violation.low, max(violation.high - 1, 0))
    return tuple(fixed)


def _check_index_list(contract: IndexContract, args: tuple[Any, ...]) -> Violation | None:
    source = args[0]
    dim = 0
    for index in args[contract.index_arg]:
        if index is not None and _is_integer_tensor(index) and index.numel():
            size = int(source.shape[dim])
            found = _violation(contract, index, -size, size, None)
            if found is not None:
                found.dim = dim
                return found
        dim += 1 if index is None or _is_integer_tensor(index) else max(index.dim(), 1)
    return None


def _violation(contract: IndexContract, index: Any, low: int, high: int,
               ignore: int | None) -> Violation | None:
    bad = (index < low) | (index >= high)
    if ignore is not None:
        bad &= index != ignore
    if not bool(bad.any()):
        return None
    where = bad.nonzero()[:MAX_REPORTED].cpu()
    flat = index.detach().cpu()
    positions = [tuple(int(i) for i in row) for row in where.tolist()]
    return Violation(
        op=contract.op,
        argument=contract.argument,
        low=low,
        high=high,
        values=[int(flat[p]) for p in positions],
        positions=positions,
        count=int(bad.sum()),
        ignore_index=ignore,
        kernel_assert=contract.kernel_assert,
        cpu_error=contract.cpu_error,
    )


def _is_integer_tensor(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex and (
        str(dtype) != "torch.bool")
