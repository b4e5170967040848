"""The op tracer: a dispatch mode that records each aten call and names the one that raised.

Used only in diagnostic runs (the isolated worker); outside them nothing here is active and
nothing is paid. With prechecks on, index-taking operators (contracts.py) have their index
argument's range read *before* the kernel runs, and a violation raises PrecheckError naming
the operator, the argument, the offending values and their positions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cudadiag import contracts, probes
from cudadiag.errors import CudadiagError
from cudadiag.incident import OpCall, OpInfo, TensorArg
from cudadiag.shortlist import cut_list

RECENT_OPS = 64
NEAR_FAILURE = 8
"""The recent calls whose scalar arguments (dims, integer values, flags) a record keeps."""
SIMULATED_DEVICE = "the simulated CUDA device"
VALUE_RANGE_MAX_NUMEL = 10_000_000
LIST_ITEMS_SHOWN = 16
EMBEDDING_LOOKUPS = frozenset({"embedding", "_embedding_bag", "_embedding_bag_forward_only"})
"""aten operators whose first argument is an embedding table (rows = the vocabulary)."""

_active: list[OpTracer] = []


class PrecheckError(CudadiagError, IndexError, RuntimeError):
    """An index argument outside its operator's range, found before the kernel ran. A
    RuntimeError as the device's own error is (torch.AcceleratorError), so a program's
    `except RuntimeError` handlers run as they would on the GPU; an IndexError as the CPU's."""

    def __init__(self, violation: contracts.Violation, device: str) -> None:
        self.violation = violation
        self.device = device
        self.simulated = device == SIMULATED_DEVICE
        super().__init__(f"{violation.message()}\n{_consequence(violation, device)}")


def prechecks_active() -> bool:
    """Return True when a tracer with prechecks is active (the simulator then leaves the
    index contracts to it, so the precise error is raised instead of a simulated assert)."""
    return any(t.precheck for t in _active)


class TracedCall(NamedTuple):
    """One aten call as the tracer saw it: its name and each argument described."""

    name: str
    args: list[TensorArg]


class OpTracer(TorchDispatchMode):
    """Records the last `keep` aten calls; `failed` holds the call that raised, if any."""

    def __init__(self, keep: int = RECENT_OPS, precheck: bool = True) -> None:
        super().__init__()
        self.precheck = precheck
        self.recent: deque[TracedCall] = deque(maxlen=keep)
        self.failed: OpInfo | None = None
        self.raised: PrecheckError | None = None
        """The first precheck error raised, even when the program caught it."""
        self.on_first_raise: Callable[[PrecheckError], object] | None = None
        """Called with that error as it is raised, the failing frames still as they are."""
        self.calls = 0
        self.vocabularies: dict[int, None] = {}
        """The row counts of the embedding tables looked up so far, in the order first
        looked up."""

    def __enter__(self) -> OpTracer:
        _active.append(self)
        super().__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        _active.remove(self)
        super().__exit__(*exc_info)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        self.calls += 1
        if func.overloadpacket.__name__ in EMBEDDING_LOOKUPS and args:
            self.vocabularies.setdefault(int(args[0].shape[0]))
        if self.precheck:
            self._precheck(func, args)
        try:
            out = func(*args, **kwargs)
        except Exception:
            self._record_failure(func, args, kwargs, None)
            raise
        self.recent.append(TracedCall(op_name(func), describe_args(func, args, kwargs)))
        return out

    def _precheck(self, func: Any, args: tuple[Any, ...]) -> None:
        contract = contracts.contract_for(func.overloadpacket.__name__)
        if contract is None:
            return
        violation = contracts.check(contract, args)
        if violation is None:
            return
        index = args[contract.index_arg]
        if contract.index_is_list:
            index = next(t for t in index if t is not None)
        device = SIMULATED_DEVICE if probes.simulator_active() else str(index.device)
        self._record_failure(func, args, {}, violation.message())
        error = PrecheckError(violation, device)
        if self.raised is None:
            self.raised = error
            if self.on_first_raise is not None:
                self.on_first_raise(error)
        raise error

    def _record_failure(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                        precheck: str | None) -> None:
        if self.failed is not None:
            return  # the first failing op is the one that matters
        recent, tensors = compact_calls(list(self.recent))
        self.failed = OpInfo(
            name=op_name(func),
            args=describe_args(func, args, kwargs, value_ranges=True),
            recent=recent,
            precheck=precheck,
            recent_tensors=tensors,
            vocabularies=list(self.vocabularies),
        )


def compact_calls(calls: list[TracedCall]) -> tuple[list[OpCall], list[str]]:
    """Return the calls as a record keeps them, with the distinct tensors they took: each
    tensor once (`float32[8, 16]@cpu`: dtype, shape, device), each call naming its tensors
    by position in that list, and the scalar arguments of the last NEAR_FAILURE calls
    only (strides and contiguity are kept for the failing call's arguments)."""
    tensors: dict[str, int] = {}
    compact = []
    for n, call in enumerate(calls):
        near = n >= len(calls) - NEAR_FAILURE
        positions, scalars = [], []
        for arg in call.args:
            if arg.kind == "tensor":
                text = f"{(arg.dtype or '?').replace('torch.', '')}{arg.shape}@{arg.device}"
                positions.append(tensors.setdefault(text, len(tensors)))
            elif near:
                scalars.append(f"{arg.name}={arg.value}")
        compact.append(OpCall(name=call.name, tensors=positions, scalars=scalars))
    return compact, list(tensors)


def op_name(func: Any) -> str:
    """Return `aten::nll_loss_forward` for an OpOverload (the overload name is dropped when it
    is `default`)."""
    packet = func.overloadpacket.__name__
    namespace = getattr(func, "namespace", "aten")
    overload = func._overloadname
    return f"{namespace}::{packet}" + ("" if overload == "default" else f".{overload}")


def describe_args(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  value_ranges: bool = False) -> list[TensorArg]:
    """Describe each argument of an op call by its schema name (no data read unless
    `value_ranges`, which adds min..max of integer tensors)."""
    names = [a.name for a in func._schema.arguments]
    described = [
        describe_value(names[i] if i < len(names) else f"arg{i}", value, value_ranges)
        for i, value in enumerate(args)
    ]
    described += [describe_value(k, v, value_ranges) for k, v in kwargs.items()]
    return described


def describe_value(name: str, value: Any, value_range: bool = False) -> TensorArg:
    """Describe one argument: a tensor by its metadata, a scalar by its value."""
    if isinstance(value, torch.Tensor):
        return TensorArg(
            name=name, kind="tensor", shape=list(value.shape), dtype=str(value.dtype),
            device=str(value.device), stride=list(value.stride()),
            contiguous=value.is_contiguous(),
            value=_value_range(value) if value_range else None,
        )
    if isinstance(value, (list, tuple)):
        tensors = [v for v in value if isinstance(v, torch.Tensor)]
        if tensors:
            shapes = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors)
            return TensorArg(name=name, kind="list", value=f"[{shapes}]")
        return TensorArg(name=name, kind="list", value=cut_list(value, LIST_ITEMS_SHOWN))
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return TensorArg(name=name, kind="scalar", value=repr(value))
    return TensorArg(name=name, kind="other", value=type(value).__name__)


def _value_range(t: torch.Tensor) -> str | None:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return None
    if t.numel() == 0 or t.numel() > VALUE_RANGE_MAX_NUMEL:
        return None
    try:
        return f"{int(t.min())}..{int(t.max())}"
    except RuntimeError:  # a poisoned context cannot be read; the metadata still stands
        return None


def _consequence(violation: contracts.Violation, device: str) -> str:
    if device == "cpu":
        raised = violation.cpu_message()
        if raised is None:
            return ("On the CPU this kernel does not check the range: it would write outside "
                    "the tensor (memory corruption or a crash)")
        return f"On the CPU this kernel raises: {raised}"
    return (f"On {device} this kernel fails with: device-side assert triggered (the precheck "
            "stopped it before it ran)")


