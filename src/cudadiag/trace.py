"""The op tracer: records each aten call and names the one that raised.

Used only in diagnostic runs (the isolated worker); outside them nothing here is active and
nothing is paid. With prechecks on, index-taking operators (contracts.py) have their index
argument's range read *before* the kernel runs, and a violation raises PrecheckError naming
the operator, the argument, the offending values and their positions.

The per-call work is done in C++ (trace_native.py: no Python on a call without a contract)
where that extension is built; until then, or where it cannot be, by this module's Python
dispatch mode, which sees the same calls.
"""

from __future__ import annotations

import functools
import sys
from collections import deque
from collections.abc import Callable
from types import CodeType
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cudadiag import contracts, probes, trace_native
from cudadiag.errors import CudadiagError
from cudadiag.i18n import N_, _, localize
from cudadiag.shortlist import cut_list

if TYPE_CHECKING:  # built when a record is read (a failure, `recent`): not at start-up
    from cudadiag.incident import OpCall, OpInfo, TensorArg

RECENT_OPS = 64
NEAR_FAILURE = 8
"""The recent calls whose scalar arguments (dims, integer values, flags) a record keeps."""
SIMULATED_DEVICE = N_("the simulated CUDA device")
VALUE_RANGE_MAX_NUMEL = 10_000_000
LIST_ITEMS_SHOWN = 16
EMBEDDING_LOOKUPS = frozenset({"embedding", "_embedding_bag", "_embedding_bag_forward_only"})
"""aten operators whose first argument is an embedding table (rows = the vocabulary)."""

Tensor = torch.Tensor

_active: list[OpTracer] = []


class PrecheckError(CudadiagError, IndexError, RuntimeError):
    """An index argument outside its operator's range, found before the kernel ran. A
    RuntimeError as the device's own error is (torch.AcceleratorError), so a program's
    `except RuntimeError` handlers run as they would on the GPU; an IndexError as the CPU's."""

    def __init__(self, violation: contracts.Violation, device: str) -> None:
        self.violation = violation
        self.device = device
        self.simulated = device == SIMULATED_DEVICE
        super().__init__(f"{localize(violation.message())}\n{_consequence(violation, device)}")


def prechecks_active() -> bool:
    """Return True when a tracer with prechecks is active (the simulator then leaves the
    index contracts to it, so the precise error is raised instead of a simulated assert)."""
    return any(t.precheck for t in _active)


class TracedCall(NamedTuple):
    """One aten call as the tracer saw it: its name and each argument described."""

    name: str
    args: list[TensorArg]


class _TensorMark:
    """The first item of a recorded tensor's tuple in the ring."""


_TENSOR = _TensorMark()
RecordedTensor = tuple[_TensorMark, torch.dtype, torch.Size, torch.device]
"""A tensor argument as the ring keeps it, without its data and without keeping the tensor
alive: (_TENSOR, dtype, shape, device). A plain tuple is the cheapest thing to make on every
call; strides and contiguity are read only for the failing call (its live arguments)."""


def _is_recorded(value: Any) -> bool:
    return type(value) is tuple and len(value) == 4 and value[0] is _TENSOR


class _OpFacts(NamedTuple):
    """What the tracer needs to know of one OpOverload, learnt on its first call."""

    call: Callable[..., Any]
    contract: contracts.IndexContract | None
    embedding: bool


_FACTS: dict[Any, _OpFacts] = {}
"""Per OpOverload: looked up once per call instead of parsing its name each time."""

_Recorded = tuple[Any, list[Any], dict[str, Any] | None]
"""One call in the ring: its OpOverload, its arguments (tensors as RecordedTensor), its
kwargs."""


def _skipped_by_compilation(code: CodeType) -> bool:
    """Mark `code`, and every frame it calls, as never compiled by torch.compile, as
    torch._dynamo.disable(recursive=True) does, but in the frame evaluator itself (no Python
    wrapper around each call); return False where this torch has no such setting."""
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError:
        return False
    set_code_exec_strategy(code, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    return True


class OpTracer(TorchDispatchMode):
    """Records the last `keep` aten calls; `failed` holds the call that raised, if any.

    Each call costs a snapshot of its tensors' dtype, shape and device (no strings, no data
    read): the calls are described only when they are read (`recent`, a failure). The failing
    call is described from its live arguments, strides included. The snapshot is taken in C++
    where trace_native's extension is built (`native`; a first diagnostic run starts its
    build in the background and traces in Python), else by this class as a dispatch mode.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Asked once, as the class is made: whether TorchDispatchMode must wrap each call of
        __torch_dispatch__ in torch._dynamo.disable (so that torch.compile never compiles
        the tracer's own frames). Not where the tracer's code is marked as skipped for it in
        C (`_skipped_by_compilation`): the wrapper cost about 1 us on every op."""
        return not _skipped_by_compilation(cls.__dict__["__torch_dispatch__"].__code__)

    def __init__(self, keep: int = RECENT_OPS, precheck: bool = True,
                 native: bool = True) -> None:
        super().__init__()
        self.precheck = precheck
        self._ring: deque[_Recorded] = deque(maxlen=keep)
        self._native_wanted = native
        self._native: trace_native.NativeOps | None = None
        self.failed: OpInfo | None = None
        self.raised: PrecheckError | None = None
        """The first precheck error raised, even when the program caught it."""
        self.on_first_raise: Callable[[PrecheckError], object] | None = None
        """Called with that error as it is raised, the failing frames still as they are."""
        self.vocabularies: dict[int, None] = {}
        """The row counts of the embedding tables looked up so far, in the order first
        looked up."""

    @property
    def native(self) -> bool:
        """Whether the calls are recorded in C++ (while entered)."""
        return self._native is not None

    @property
    def recent(self) -> list[TracedCall]:
        """The last `keep` calls that returned, oldest first, each described."""
        calls = _from_native(self._native.recent()) if self._native is not None else self._ring
        return [_described(func, args, kwargs) for func, args, kwargs in calls]

    def __enter__(self) -> OpTracer:
        _active.append(self)
        module = _native_module() if self._native_wanted and not any(
            t.native for t in _active) else None
        if module is None:
            super().__enter__()
            return self
        watched = {f"aten::{name}": -1 for name in EMBEDDING_LOOKUPS}
        if self.precheck:
            watched.update({f"aten::{name}": -1 if c.index_is_list else c.index_arg
                            for name, c in contracts.CONTRACTS.items()})
        self._native = trace_native.NativeOps(
            module, self._ring.maxlen or RECENT_OPS, watched, self._watched_call,
            self._failed_call, _TENSOR)
        self._native.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        _active.remove(self)
        if self._native is None:
            super().__exit__(*exc_info)
            return
        self._ring.extend(_from_native(self._native.recent()))
        self._native.__exit__(*exc_info)
        self._native = None

    def _watched_call(self, name: str, overload: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any], index_range: tuple[int, int] | None) -> None:
        """Before the kernel of a watched operator runs (native tracing), with the range of
        its index argument when it was read."""
        func = _overload(name, overload)
        self._special(func, _FACTS.get(func) or _learn(func), args, index_range)

    def _failed_call(self, name: str, overload: str, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> None:
        """A call that raised, with its live arguments (native tracing)."""
        self._record_failure(_overload(name, overload), args, kwargs, None)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        facts = _FACTS.get(func) or _learn(func)
        if facts.contract is not None or facts.embedding:
            self._special(func, facts, args)
        snapshot = [(_TENSOR, a.dtype, a.shape, a.device) if isinstance(a, Tensor)
                    else _snapshot_list(a) if isinstance(a, (list, tuple)) else a
                    for a in args]
        try:
            out = facts.call(*args, **kwargs) if kwargs else facts.call(*args)
        except Exception:
            self._record_failure(func, args, kwargs or {}, None)
            raise
        self._ring.append((func, snapshot, _snapshot_kwargs(kwargs) if kwargs else None))
        return out

    def _special(self, func: Any, facts: _OpFacts, args: tuple[Any, ...],
                 index_range: tuple[int, int] | None = None) -> None:
        if facts.embedding and args:
            self.vocabularies.setdefault(int(args[0].shape[0]))
        if self.precheck and facts.contract is not None:
            self._precheck(func, facts.contract, args, index_range)

    def _precheck(self, func: Any, contract: contracts.IndexContract,
                  args: tuple[Any, ...], index_range: tuple[int, int] | None) -> None:
        violation = contracts.check(contract, args, index_range)
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
        from cudadiag.incident import OpInfo

        recent, tensors = compact_calls(self.recent)
        self.failed = OpInfo(
            name=op_name(func),
            args=describe_args(func, args, kwargs, value_ranges=True),
            recent=recent,
            precheck=precheck,
            recent_tensors=tensors,
            vocabularies=list(self.vocabularies),
        )



def _native_module() -> Any:
    """The built extension, or None: then its build is started in the background, or the
    reason it could not be built is printed (once in a process)."""
    module = trace_native.load()
    if module is None:
        _build_or_say_why()
    return module


@functools.cache
def _build_or_say_why() -> None:
    reason = trace_native.build_failure()
    if reason is None:
        trace_native.build_in_background()
    else:
        print(_("cudadiag: the op tracer traces in Python (about 6 us an op instead of under "
                "1): its C++ part could not be built here ({reason})").format(reason=reason),
              file=sys.stderr)


_OVERLOADS: dict[tuple[str, str], Any] = {}


def _overload(name: str, overload: str) -> Any:
    """The OpOverload of `aten::mul` and `Tensor` (remembered); where the operator is gone
    (a custom operator's library torn down since the call), its name as a string
    (`mylib::twice`), which _described describes by argument position."""
    found = _OVERLOADS.get((name, overload))
    if found is None:
        namespace, packet = name.split("::")
        try:
            found = getattr(getattr(getattr(torch.ops, namespace), packet),
                            overload or "default")
        except AttributeError:
            return name + ("" if overload in ("", "default") else f".{overload}")
        _OVERLOADS[(name, overload)] = found
    return found


def _from_native(calls: list[trace_native.RecentCall]) -> list[_Recorded]:
    """The native ring's calls as this module's ring keeps them (read as the tracer exits)."""
    return [(_overload(name, overload), list(args), kwargs)
            for name, overload, args, kwargs in calls]


def _learn(func: Any) -> _OpFacts:
    """The facts of an OpOverload seen for the first time (remembered in _FACTS)."""
    name = func.overloadpacket.__name__
    call = func._op if type(func) is torch._ops.OpOverload else func  # its __call__ is _op
    facts = _OpFacts(call, contracts.contract_for(name), name in EMBEDDING_LOOKUPS)
    _FACTS[func] = facts
    return facts


def _snapshot_list(value: list[Any] | tuple[Any, ...]) -> Any:
    """A list argument as recorded: its tensors as RecordedTensor (the ring never keeps a
    tensor alive), or the list itself when it holds none (the dispatcher made it for this
    call)."""
    if any(isinstance(v, Tensor) for v in value):
        return [(_TENSOR, v.dtype, v.shape, v.device) if isinstance(v, Tensor) else v
                for v in value]
    return value


def _snapshot(value: Any) -> Any:
    """One argument as recorded (what __torch_dispatch__ writes inline, per positional
    argument, to spare a call on every op)."""
    if isinstance(value, Tensor):
        return (_TENSOR, value.dtype, value.shape, value.device)
    return _snapshot_list(value) if isinstance(value, (list, tuple)) else value


def _snapshot_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: _snapshot(v) for k, v in kwargs.items()}


def _described(func: Any, args: list[Any], kwargs: dict[str, Any] | None) -> TracedCall:
    if isinstance(func, str):  # an operator gone since the call: no schema to name arguments
        return TracedCall(func, [describe_value(f"arg{i}", value) for i, value in enumerate(args)]
                          + [describe_value(k, v) for k, v in (kwargs or {}).items()])
    return TracedCall(op_name(func), describe_args(func, tuple(args), kwargs or {}))


def compact_calls(calls: list[TracedCall]) -> tuple[list[OpCall], list[str]]:
    """Return the calls as a record keeps them, with the distinct tensors they took: each
    tensor once (`float32[8, 16]@cpu`: dtype, shape, device), each call naming its tensors
    by position in that list, and the scalar arguments of the last NEAR_FAILURE calls
    only (strides and contiguity are kept for the failing call's arguments)."""
    from cudadiag.incident import OpCall

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
    """Describe one argument: a tensor by its metadata (a recorded one by its dtype, shape
    and device), a scalar by its value."""
    from cudadiag.incident import TensorArg

    if _is_recorded(value):
        _, dtype, shape, device = value
        return TensorArg(name=name, kind="tensor", shape=list(shape), dtype=str(dtype),
                         device=str(device))
    if isinstance(value, torch.Tensor):
        return TensorArg(
            name=name, kind="tensor", shape=list(value.shape), dtype=str(value.dtype),
            device=str(value.device), stride=list(value.stride()),
            contiguous=value.is_contiguous(),
            value=_value_range(value) if value_range else None,
        )
    if isinstance(value, (list, tuple)):
        tensors = [(v.dtype, v.shape) if isinstance(v, torch.Tensor) else (v[1], v[2])
                   for v in value if isinstance(v, torch.Tensor) or _is_recorded(v)]
        if tensors:
            shapes = ", ".join(f"{dtype}{list(shape)}" for dtype, shape in tensors)
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
    """What the kernel would have done with the values, in the language of the moment (the
    CPU's message and the device's are quoted verbatim)."""
    if device == "cpu":
        raised = violation.cpu_message()
        if raised is None:
            return _("On the CPU this kernel does not check the range: it would write outside "
                     "the tensor (memory corruption or a crash)")
        return _("On the CPU this kernel raises: {raised}").format(raised=raised)
    return _("On {device} this kernel fails with: device-side assert triggered (the precheck "
             "stopped it before it ran)").format(
        device=_(SIMULATED_DEVICE) if device == SIMULATED_DEVICE else device)


