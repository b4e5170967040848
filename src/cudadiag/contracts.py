"""Index contracts of aten operators: which argument holds indices and which range is valid.

On CUDA a broken contract is a kernel assertion (`device-side assert triggered`), reported
later and without the values. Three parts read this table: the simulator (testing.py) decides
when a simulated kernel would assert and what it would print, the tracer's prechecks
(trace.py) name the operator, argument, values and positions before a real kernel runs, and
scripts/gpu_check.py runs every row's `example` on real hardware to confirm the assertion.

Where the assertions come from: file, kernel and condition are PyTorch's CUDA sources; the
comments beside the line numbers say where each was seen. Lines move between PyTorch
releases. `line=None` marks a line not known from public sources, and `kernel_assert=None` a
kernel whose reaction is not known: scripts/gpu_check.py prints what the hardware does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cudadiag.i18n import Text, msg

MAX_REPORTED = 10


@dataclass(frozen=True)
class KernelAssert:
    """What the CUDA kernel behind an operator prints when its assertion fails."""

    file: str
    line: int | None
    """None: not known from public sources (the simulator then prints line 0)."""
    kernel: str
    assertion: str


@dataclass(frozen=True)
class IndexContract:
    """The index argument of one aten operator and the range its values must lie in."""

    op: str
    argument: str
    """The schema name of the index argument (`target`, `indices`, `index`)."""
    index_arg: int
    bounds: Callable[[tuple[Any, ...]], tuple[int, int]]
    """(low, high): values must satisfy low <= v < high."""
    kernel_assert: KernelAssert | None
    """None: how the CUDA kernel reacts is not known from public sources; the simulator
    raises the device-side assert without printing an assertion line."""
    example: str
    """A call that breaks the contract with one offending value, tensors on device `dev`
    (differentiable inputs where the operator has a backward): run by the tests on the
    simulated device and under the tracer, and by scripts/gpu_check.py on real hardware."""
    ignore_arg: int | None = None
    """Position of an `ignore_index` argument whose value is always allowed."""
    index_is_list: bool = False
    """For aten::index / index_put: the argument is a list of index tensors, one per dim."""
    dim_arg: int | None = None
    """Position of the `dim` argument, for messages."""
    cpu_error: str | None = "index {value} is out of bounds for dimension {dim} with size {high}"
    """What the CPU kernel raises for the same input (formatted with the Violation's value,
    position, dim, high and shape); None when the CPU kernel does not check the range."""


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
    cpu_error: str | None = ""
    shape: list[int] = field(default_factory=list)
    """Shape of the operator's first tensor argument (the one indexed, or the input)."""

    def cpu_message(self) -> str | None:
        """Return what the CPU kernel would raise for these values, or None when it does not
        check them."""
        if self.cpu_error is None:
            return None
        position = self.positions[0][0] if len(self.positions[0]) == 1 else self.positions[0]
        return self.cpu_error.format(value=self.values[0], dim=self.dim or 0, high=self.high,
                                     position=position, shape=self.shape)

    def message(self) -> Text:
        """Return e.g. `aten::nll_loss_forward: target 4 at position 2 outside [0, 4)
        (ignore_index=-100)`, a sentence to keep (the incident's summary holds it)."""
        positions = [p[0] if len(p) == 1 else p for p in self.positions]
        where: dict[str, str | int] = {"op": f"aten::{self.op}", "argument": self.argument,
                                       "low": self.low, "high": self.high}
        if len(self.values) == 1:
            text = msg("{op}: {argument} {value} at position {position} outside [{low}, "
                       "{high})", value=self.values[0], position=str(positions[0]), **where)
        else:
            text = msg("{op}: {argument} values {values} at positions {positions} outside "
                       "[{low}, {high})", values=str(self.values), positions=str(positions),
                       **where)
        if self.ignore_index is not None:
            text = msg("{violation} (ignore_index={ignore_index})", violation=text,
                       ignore_index=self.ignore_index)
        if self.count > len(self.values):
            text = msg("{violation}; {count} offending elements in all", violation=text,
                       count=self.count)
        return text


def _class_bounds(input_pos: int) -> Callable[[tuple[Any, ...]], tuple[int, int]]:
    def bounds(args: tuple[Any, ...]) -> tuple[int, int]:
        x = args[input_pos]
        return 0, int(x.shape[1] if x.dim() >= 2 else x.shape[0])

    return bounds


def _dim_bounds(self_pos: int, dim_pos: int,
                negative: bool = False) -> Callable[[tuple[Any, ...]], tuple[int, int]]:
    """[0, size) along `dim`, or [-size, size) for kernels that wrap negative indices."""

    def bounds(args: tuple[Any, ...]) -> tuple[int, int]:
        size = int(args[self_pos].shape[args[dim_pos]])
        return (-size if negative else 0), size

    return bounds


def _rows(args: tuple[Any, ...]) -> tuple[int, int]:
    return 0, int(args[0].shape[0])


def _count_arg(pos: int) -> Callable[[tuple[Any, ...]], tuple[int, int]]:
    """[0, n) where n is an integer argument (`num_weights` of a backward)."""

    def bounds(args: tuple[Any, ...]) -> tuple[int, int]:
        return 0, int(args[pos])

    return bounds


def _flat(args: tuple[Any, ...]) -> tuple[int, int]:
    """take / put index the flattened tensor and wrap negative indices."""
    numel = int(args[0].numel())
    return -numel, numel


_LOSS = "/pytorch/aten/src/ATen/native/cuda/Loss.cu"
_NLL2D = "/pytorch/aten/src/ATen/native/cuda/NLLLoss2d.cu"
_INDEXING = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu"
_SCATTER = "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu"
_INDEX_KERNEL = "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu"
_TARGET_ASSERT = "t >= 0 && t < n_classes"
_TARGET_CPU = "Target {value} is out of bounds."
_RANGE_CPU = "index out of range in self"
_FLAT_CPU = "out of range: tried to access index {value} on a tensor of {high} elements."
# Loss.cu 250 / 372, NLLLoss2d.cu 106 / 179, Indexing.cu 1422, ScatterGatherKernel.cu 367 and
# IndexKernel.cu 92 are kept from the first version of this table; public logs of some
# releases print Loss.cu:240, NLLLoss2d.cu:106, Indexing.cu:1292 and IndexKernel.cu:92.
_SELECT = KernelAssert(_INDEXING, 1422, "indexSelectLargeIndex", "srcIndex < srcSelectDimSize")
_GATHER = KernelAssert(_SCATTER, 367, "operator()",
                       'idx_dim >= 0 && idx_dim < index_size && "index out of bounds"')
_ADVANCED = KernelAssert(_INDEX_KERNEL, 92, "operator()",
                         '-sizes[i] <= index && index < sizes[i] && "index out of bounds"')
# Lines 154 / 193 / 339: a public line-numbered copy of a recent IndexKernel.cu (where the
# advanced-indexing assertion above sits at line 111).
_FILL = KernelAssert(_INDEX_KERNEL, 154, "operator()",
                     'idx >= -self_dim_size && idx < self_dim_size && "index out of bounds"')
_COPY = KernelAssert(_INDEX_KERNEL, 193, "operator()",
                     'idx >= 0 && idx < self_dim_size && "index_copy_(): index out of bounds"')
_TAKE_PUT = KernelAssert(_INDEX_KERNEL, 339, "operator()",
                         'idx < numel && idx >= -numel && '
                         '"cuda_take_put_kernel() index out of bounds"')
# The condition is in every public copy of Indexing.cu; its line is not known.
_INDEX_ADD = KernelAssert(_INDEXING, None, "indexFuncSmallIndex", "dstIndex < dstAddDimSize")


def _t(values: str) -> str:
    return f"torch.tensor({values}, device=dev)"


def _leaf(shape: str, make: str = "randn") -> str:
    return f"torch.{make}({shape}, device=dev, requires_grad=True)"


_ROWS = _t("[1, 7]")  # row 7 of a 5-row weight
_COLUMN_5 = _t("[[5]]")  # column 5 of a 2x3 tensor
_LOGITS = _leaf("3, 4")
_TARGETS = _t("[0, 2, 4]")  # class 4 of 4
_TARGETS_2D = _t("[[[0, 1], [2, 3]], [[1, 1], [0, 2]]]")  # class 3 of 3 at (0, 1, 1)
_NLL_BACKWARD = ("torch.ops.aten.{op}(torch.tensor(1.0, device=dev), torch.randn({shape}, "
                 "device=dev), {target}, None, 1, -100, torch.tensor({weight}, device=dev))")

CONTRACTS: dict[str, IndexContract] = {
    c.op: c
    for c in (
        IndexContract("nll_loss_forward", "target", 1, _class_bounds(0),
                      KernelAssert(_LOSS, 250, "nll_loss_forward_reduce_cuda_kernel_2d",
                                   _TARGET_ASSERT),
                      f"F.cross_entropy({_LOGITS}, {_TARGETS})",
                      ignore_arg=4, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss_backward", "target", 2, _class_bounds(1),
                      KernelAssert(_LOSS, 372, "nll_loss_backward_reduce_cuda_kernel_2d",
                                   _TARGET_ASSERT),
                      _NLL_BACKWARD.format(op="nll_loss_backward", shape="3, 4",
                                           target=_TARGETS, weight="3.0"),
                      ignore_arg=5, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss2d_forward", "target", 1, _class_bounds(0),
                      KernelAssert(_NLL2D, 106, "nll_loss2d_forward_kernel", _TARGET_ASSERT),
                      f"F.cross_entropy({_leaf('2, 3, 2, 2')}, {_TARGETS_2D})",
                      ignore_arg=4, cpu_error=_TARGET_CPU),
        IndexContract("nll_loss2d_backward", "target", 2, _class_bounds(1),
                      KernelAssert(_NLL2D, 179, "nll_loss2d_backward_kernel", _TARGET_ASSERT),
                      _NLL_BACKWARD.format(op="nll_loss2d_backward", shape="2, 3, 2, 2",
                                           target=_TARGETS_2D,
                                           weight="8.0"),
                      ignore_arg=5, cpu_error=_TARGET_CPU),
        IndexContract("multi_margin_loss", "target", 1, _class_bounds(0), None,
                      f"F.multi_margin_loss({_LOGITS}, {_TARGETS})",
                      cpu_error="target out of range"),
        IndexContract("multi_margin_loss_backward", "target", 2, _class_bounds(1), None,
                      "torch.ops.aten.multi_margin_loss_backward(torch.tensor(1.0, device=dev), "
                      f"torch.randn(3, 4, device=dev), {_TARGETS}, 1, 1.0, None, 1)",
                      cpu_error="target out of range"),
        IndexContract("embedding", "indices", 1, _rows, _SELECT,
                      f"F.embedding({_t('[[1, 2], [7, 0]]')}, {_leaf('5, 3')})",
                      cpu_error=_RANGE_CPU),
        # The embedding backward kernels check no range on the CPU (they write outside the
        # gradient: memory corruption or a crash); none is known from CUDA's sources either.
        IndexContract("embedding_dense_backward", "indices", 1, _count_arg(2), None,
                      "torch.ops.aten.embedding_dense_backward(torch.ones(2, 3, device=dev), "
                      f"{_ROWS}, 5, -1, False)",
                      cpu_error=None),
        IndexContract("embedding_renorm_", "indices", 1, _rows, None,
                      f"F.embedding({_ROWS}, {_leaf('5, 3')}, max_norm=1.0)",
                      cpu_error="select(): index {value} out of range for tensor of size "
                                "{shape} at dimension 0"),
        IndexContract("_embedding_bag", "indices", 1, _rows, None,
                      f"F.embedding_bag({_ROWS}, {_leaf('5, 3')}, {_t('[0]')})",
                      cpu_error="Index {position} of input takes value {value} which is not "
                                "in the valid range [0, {high})"),
        IndexContract("_embedding_bag_forward_only", "indices", 1, _rows, None,
                      f"F.embedding_bag({_ROWS}, torch.randn(5, 3, device=dev), {_t('[0]')})",
                      cpu_error="Index {position} of input takes value {value} which is not "
                                "in the valid range [0, {high})"),
        IndexContract("_embedding_bag_backward", "indices", 1, _count_arg(6), None,
                      "torch.ops.aten._embedding_bag_backward(torch.ones(1, 3, device=dev), "
                      f"{_ROWS}, {_t('[0]')}, {_t('[0, 0]')}, {_t('[2]')}, {_t('[0]')}, 5, "
                      "False, 1, False, None, -1)",
                      cpu_error=None),
        IndexContract("_embedding_bag_dense_backward", "indices", 1, _count_arg(5), None,
                      "torch.ops.aten._embedding_bag_dense_backward(torch.ones(1, 3, "
                      f"device=dev), {_ROWS}, {_t('[0, 0]')}, {_t('[2]')}, {_t('[0]')}, 5, "
                      "False, 1, None, -1)",
                      cpu_error=None),
        IndexContract("index_select", "index", 2, _dim_bounds(0, 1), _SELECT,
                      f"{_leaf('5, 3')}.index_select(0, {_t('[0, 5]')})",
                      cpu_error=_RANGE_CPU),
        IndexContract("index_add", "index", 2, _dim_bounds(0, 1), _INDEX_ADD,
                      f"{_leaf('4, 2', 'zeros')}.index_add(0, {_t('[9]')}, {_leaf('1, 2')})",
                      dim_arg=1),
        IndexContract("index_add_", "index", 2, _dim_bounds(0, 1), _INDEX_ADD,
                      f"torch.zeros(4, 2, device=dev).index_add_(0, {_t('[9]')}, "
                      "torch.ones(1, 2, device=dev))",
                      dim_arg=1),
        IndexContract("index_reduce", "index", 2, _dim_bounds(0, 1), None,
                      f"{_leaf('4, 2', 'ones')}.index_reduce(0, {_t('[9]')}, {_leaf('1, 2')}, "
                      "'prod')",
                      dim_arg=1, cpu_error=_RANGE_CPU),
        IndexContract("index_reduce_", "index", 2, _dim_bounds(0, 1), None,
                      f"torch.ones(4, 2, device=dev).index_reduce_(0, {_t('[9]')}, "
                      "torch.ones(1, 2, device=dev), 'amax')",
                      dim_arg=1, cpu_error=_RANGE_CPU),
        IndexContract("index_copy", "index", 2, _dim_bounds(0, 1), _COPY,
                      f"{_leaf('4, 2', 'zeros')}.index_copy(0, {_t('[9]')}, {_leaf('1, 2')})",
                      dim_arg=1, cpu_error="index_copy_(): index {value} is out of bounds for "
                                           "dimension {dim} with size {high}"),
        IndexContract("index_copy_", "index", 2, _dim_bounds(0, 1), _COPY,
                      f"torch.zeros(4, 2, device=dev).index_copy_(0, {_t('[9]')}, "
                      "torch.ones(1, 2, device=dev))",
                      dim_arg=1, cpu_error="index_copy_(): index {value} is out of bounds for "
                                           "dimension {dim} with size {high}"),
        IndexContract("index_fill", "index", 2, _dim_bounds(0, 1, negative=True), _FILL,
                      f"{_leaf('4, 2', 'zeros')}.index_fill(0, {_t('[9]')}, 1.0)", dim_arg=1),
        IndexContract("index_fill_", "index", 2, _dim_bounds(0, 1, negative=True), _FILL,
                      f"torch.zeros(4, 2, device=dev).index_fill_(0, {_t('[9]')}, 1.0)",
                      dim_arg=1),
        IndexContract("take", "index", 1, _flat, _TAKE_PUT,
                      f"{_leaf('4')}.take({_t('[1, 9]')})", cpu_error=_FLAT_CPU),
        IndexContract("put", "index", 1, _flat, _TAKE_PUT,
                      f"{_leaf('4', 'zeros')}.put({_t('[9]')}, {_leaf('1')})",
                      cpu_error=_FLAT_CPU),
        IndexContract("put_", "index", 1, _flat, _TAKE_PUT,
                      f"torch.zeros(4, device=dev).put_({_t('[9]')}, torch.ones(1, device=dev))",
                      cpu_error=_FLAT_CPU),
        IndexContract("gather", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"{_leaf('2, 3')}.gather(1, {_t('[[0], [3]]')})", dim_arg=1),
        IndexContract("scatter", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"{_leaf('2, 3', 'zeros')}.scatter(1, {_COLUMN_5}, {_leaf('1, 1')})",
                      dim_arg=1),
        IndexContract("scatter_", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"torch.zeros(2, 3, device=dev).scatter_(1, {_COLUMN_5}, 1.0)", dim_arg=1),
        IndexContract("scatter_add", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"{_leaf('2, 3', 'zeros')}.scatter_add(1, {_COLUMN_5}, {_leaf('1, 1')})",
                      dim_arg=1),
        IndexContract("scatter_add_", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"torch.zeros(2, 3, device=dev).scatter_add_(1, {_COLUMN_5}, "
                      "torch.ones(1, 1, device=dev))",
                      dim_arg=1),
        IndexContract("scatter_reduce", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"{_leaf('2, 3', 'zeros')}.scatter_reduce(1, {_COLUMN_5}, "
                      f"{_leaf('1, 1')}, 'sum')",
                      dim_arg=1),
        IndexContract("scatter_reduce_", "index", 2, _dim_bounds(0, 1), _GATHER,
                      f"torch.zeros(2, 3, device=dev).scatter_reduce_(1, {_COLUMN_5}, "
                      "torch.ones(1, 1, device=dev), 'amax')",
                      dim_arg=1),
        IndexContract("index", "indices", 1, _rows, _ADVANCED,
                      f"{_leaf('4')}[{_t('[1, 9]')}]", index_is_list=True),
        # accumulate=False: the advanced-indexing kernel. With accumulate=True CUDA sorts the
        # indices and checks them with `_assert_async` (recent releases) or on the host with
        # an IndexError (older ones); scripts/gpu_check.py records which.
        IndexContract("index_put", "indices", 1, _rows, _ADVANCED,
                      f"{_leaf('4', 'zeros')}.index_put(({_t('[9]')},), {_leaf('1')})",
                      index_is_list=True),
        IndexContract("index_put_", "indices", 1, _rows, _ADVANCED,
                      f"torch.zeros(4, device=dev).index_put_(({_t('[4]')},), "
                      "torch.tensor(1.0, device=dev))",
                      index_is_list=True),
        IndexContract("_index_put_impl_", "indices", 1, _rows, _ADVANCED,
                      f"torch.ops.aten._index_put_impl_(torch.zeros(4, device=dev), "
                      f"[{_t('[9]')}], torch.ones(1, device=dev), False, False)",
                      index_is_list=True),
    )
}


def contract_for(op_name: str) -> IndexContract | None:
    """Return the index contract of an aten operator (`nll_loss_forward`,
    `aten::gather`, `aten.index.Tensor`) or None when it has none."""
    name = op_name.replace("aten::", "").replace("aten.", "").split(".")[0]
    return CONTRACTS.get(name)


def check(contract: IndexContract, args: tuple[Any, ...],
          index_range: tuple[int, int] | None = None) -> Violation | None:
    """Return the violation of `contract` by an operator call's positional args, or None.

    Reads the index tensor's values (a device synchronisation on a GPU: diagnostic runs only)
    unless the caller read its (min, max) already (`index_range`, for a single index tensor):
    then only a violation reads them. Never modifies the arguments.
    """
    if len(args) <= contract.index_arg:
        return None
    if contract.index_is_list:
        found = _check_index_list(contract, args)
    else:
        found = _check_index(contract, args, index_range)
    if found is not None:
        found.shape = list(getattr(args[0], "shape", []))
    return found


def _check_index(contract: IndexContract, args: tuple[Any, ...],
                 index_range: tuple[int, int] | None) -> Violation | None:
    index = args[contract.index_arg]
    if not _is_integer_tensor(index) or index.numel() == 0:
        return None
    low, high = contract.bounds(args)
    ignore = args[contract.ignore_arg] if contract.ignore_arg is not None and len(
        args) > contract.ignore_arg else (-100 if contract.ignore_arg is not None else None)
    found = _violation(contract, index, low, high, ignore, index_range)
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
               ignore: int | None, index_range: tuple[int, int] | None = None
               ) -> Violation | None:
    if (low <= index_range[0] and index_range[1] < high) if index_range is not None else (
            _within(index, low, high)):
        return None  # the common case in one reduction; positions only for a violation
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


def _within(index: Any, low: int, high: int) -> bool:
    """True when every value lies in [low, high): one min/max reduction, read with a single
    device synchronisation."""
    smallest, largest = index.aminmax()
    if index.is_cpu:
        return bool(low <= int(smallest) and int(largest) < high)
    import torch  # only where device tensors are checked: the table is read without torch

    least, most = torch.stack((smallest, largest)).tolist()
    return bool(low <= least and most < high)


_INTEGER_DTYPES: dict[Any, bool] = {}
"""dtype -> whether it holds integers (bool does not), learnt on first sight."""


def _is_integer_tensor(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    known = _INTEGER_DTYPES.get(dtype)
    if known is None:
        known = _INTEGER_DTYPES[dtype] = not dtype.is_floating_point and (
            not dtype.is_complex) and str(dtype) != "torch.bool"
    return known
