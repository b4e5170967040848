"""A simulated CUDA device on CPU tensors, for tests and demos without a GPU.

`simulated_cuda()` is a dispatch mode that reproduces CUDA's behaviour where cudadiag cares:

- a broken index contract (every row of contracts.py: loss targets, embedding, index_select,
  index_add / copy / fill, take / put, gather / scatter, advanced indexing, and their backward
  operators) is a *kernel assertion*: its line is written to the process's stderr file
  descriptor as the real kernel's printf would, and the error is raised later, at the next
  synchronising operation (`.item()`, `.tolist()`, `.cpu()`, `print(t)`), with PyTorch's real
  text and the asynchronous-report suffix;
- while that error is pending, later operators run on in-range indices (the garbage a faulted
  kernel leaves) and print nothing: the device stopped at the first assertion, so a second
  violation (`loss.backward()` on the same bad target) never raises the CPU kernel's error;
- `F.one_hot` takes CUDA's path (no host check of the classes: `scatter_` asserts in the
  kernel), not the CPU's ("Class values must be smaller than num_classes.");
- with `CUDA_LAUNCH_BLOCKING=1` in the environment it is raised at the faulty operator instead,
  without the suffix;
- after the error surfaces every operator raises it again (sticky) until the process ends;
- opt-in, a memory budget: an allocation beyond it raises `torch.OutOfMemoryError` with the
  caching allocator's real message;
- code written for a GPU runs as it is: `.cuda()`, `.to("cuda")`, `device="cuda"` in a factory
  function, `model.cuda()` keep the tensors on the CPU, and `torch.cuda.is_available()`,
  `device_count()`, `current_device()`, `get_device_name()` answer as a one-GPU machine does
  (`torch.cuda.synchronize()` waits for the simulated device), as does `torch.accelerator`
  (torch >= 2.6: a CUDA accelerator whose stream never captures).

Everything it raises carries `simulated = True`; incidents record it.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_map

from cudadiag import contracts, probes, trace
from cudadiag.own_work import outside_user_modes

F = TypeVar("F", bound=Callable[..., Any])
if TYPE_CHECKING:  # torch.AcceleratorError exists from torch 2.8 on
    _BaseAcceleratorError = RuntimeError
else:
    _BaseAcceleratorError = getattr(torch, "AcceleratorError", RuntimeError)

_DOCS = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
_ASYNC_SUFFIX = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
_DSA = "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
MAX_ASSERT_LINES = 32

# Operators that wait for the device on CUDA: a pending asynchronous error surfaces here.
SYNCHRONISING_OPS = frozenset({
    "_local_scalar_dense", "nonzero", "equal", "is_nonzero", "masked_select", "_unique2",
    "unique_dim", "unique_consecutive",
})
# Tensor methods that read data on the host without going through the dispatcher.
# Checked in Python before the dispatcher is reached, so the traceback ends at the user's
# line (a dispatch mode's frames include torch's own wrappers).
_HOST_READS = ("item", "tolist", "cpu", "numpy", "__repr__", "__str__", "__format__",
               "__array__", "__float__", "__int__", "__bool__", "__index__")


class SimulatedAcceleratorError(_BaseAcceleratorError):
    """A CUDA runtime error raised by the simulator (`simulated` is True)."""

    simulated = True
    violation: contracts.Violation | None = None
    """The index contract the failing kernel broke (a device-side assert)."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


class SimulatedOutOfMemoryError(torch.OutOfMemoryError):
    """The caching allocator's out-of-memory error, raised by the simulator."""

    simulated = True


@dataclass
class _Fault:
    violation: contracts.Violation

    def error(self, blocking: bool) -> SimulatedAcceleratorError:
        text = (
            "CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert' in "
            f"{_DOCS} for more information."
            + ("" if blocking else _ASYNC_SUFFIX) + _DSA
        )
        error = SimulatedAcceleratorError(text, 710)
        error.violation = self.violation
        return error


class _DeviceState:
    """The simulated device. Module-level: like a CUDA context, it lives as long as the
    process."""

    def __init__(self) -> None:
        self.pending: _Fault | None = None
        self.poisoned: _Fault | None = None
        self.blocking_surfaced = False
        self.active = 0
        self.live: dict[int, list[int]] = {}
        """data_ptr -> [bytes, number of live tensors using it], for the memory budget."""

    def surface(self) -> None:
        __tracebackhide__ = True  # IPython: show the user's line, not the simulator's
        if self.poisoned is not None:
            raise self.poisoned.error(self.blocking_surfaced)
        if self.pending is not None:
            self.poisoned, self.pending = self.pending, None
            raise self.poisoned.error(False)

    def live_bytes(self) -> int:
        return sum(size for size, _ in self.live.values())


_STATE = _DeviceState()
_SWITCHED_OFF = {"skipped": 0}
"""simulated_cuda() entries skipped since the simulator was switched off in this process."""


def is_poisoned() -> bool:
    """Return True when a simulated device-side assert has surfaced in this process."""
    return _STATE.poisoned is not None


def is_active() -> bool:
    """Return True while a simulated device is entered in this process."""
    return _STATE.active > 0


def in_use() -> bool:
    """Return True while a simulated device is entered, or once one has faulted (pending or
    surfaced): whatever fails then is the simulated device's doing, not a real GPU's."""
    return _STATE.active > 0 or _STATE.pending is not None or _STATE.poisoned is not None




def reset_simulated_device() -> None:
    """Forget a simulated fault (for test isolation only: a real CUDA context cannot be reset,
    the process must restart)."""
    active = _STATE.active
    _DeviceState.__init__(_STATE)
    _STATE.active = active


def switch_off() -> None:
    """Make every later `simulated_cuda()` entry in this process a no-op, so the same cells
    run on the plain CPU (the `cpu` variant of `%cuda_compare`)."""
    probes.switch_off_simulator()


def skipped_entries() -> int:
    """Return how many simulated_cuda() entries switch_off() has skipped in this process."""
    return _SWITCHED_OFF["skipped"]


probes.register_simulator(is_active, in_use, is_poisoned, skipped_entries)


SIMULATED_DEVICE_NAME = "cudadiag simulated CUDA device (CPU tensors)"


def _synchronize(device: Any = None) -> None:
    """`torch.cuda.synchronize()` on the simulated device: a pending fault surfaces."""
    __tracebackhide__ = True
    if _simulator_on_stack():
        _STATE.surface()


_ONE_GPU_MACHINE: dict[str, Callable[..., Any]] = {
    "is_available": lambda: True,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "get_device_name": lambda device=None: SIMULATED_DEVICE_NAME,
    "synchronize": _synchronize,
}
"""What `torch.cuda` answers under the simulator: a machine with one GPU."""


class _SimulatedStream:
    """The current stream of the simulated GPU: it never captures a graph, and synchronising
    it surfaces a pending fault."""

    device = torch.device("cuda", 0)

    def is_capturing(self) -> bool:
        """Return False: the simulated device captures no CUDA graph."""
        return False

    def synchronize(self) -> None:
        """Wait for the simulated device: a pending fault surfaces."""
        __tracebackhide__ = True
        _synchronize()

    def query(self) -> bool:
        """Return True: the simulated device runs every launch at once."""
        return True


def _cuda_accelerator(check_available: bool = False) -> torch.device:
    return torch.device("cuda")


_ONE_GPU_ACCELERATOR: dict[str, Callable[..., Any]] = {
    "is_available": lambda: True,
    "current_accelerator": _cuda_accelerator,
    "device_count": lambda: 1,
    "current_device_index": lambda: 0,
    "current_stream": lambda device=None: _SimulatedStream(),
    "synchronize": _synchronize,
}
"""What `torch.accelerator` (torch >= 2.6) answers under the simulator: one CUDA GPU. On a
CUDA build without a device the real functions would initialise the driver and fail (an
optimizer's step asks for the current stream)."""


def _answer_as_one_gpu(module: Any, answers: dict[str, Callable[..., Any]],
                       originals: dict[tuple[Any, str], Any]) -> None:
    for name, answer in answers.items():
        original = getattr(module, name, None)
        if original is None:
            continue
        originals[(module, name)] = original
        functools.update_wrapper(answer, original)
        answer._cudadiag_sim = True  # type: ignore[attr-defined]
        setattr(module, name, answer)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":")[0].strip() == "cuda"
    return False


def _on_the_cpu(device: Any) -> Any:
    """`device` with a CUDA device read as the CPU (an int is a CUDA device index)."""
    return "cpu" if _is_cuda(device) or (isinstance(device, int) and
                                         not isinstance(device, bool)) else device


def _stays_on_the_cpu(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
                      memory_format: Any = None) -> torch.Tensor:
    """`Tensor.cuda()` on the simulated device: the tensor itself, on the CPU."""
    return self


_stays_on_the_cpu._cudadiag_sim = True  # type: ignore[attr-defined]


def blocking_from_env() -> bool:
    """Return True when CUDA_LAUNCH_BLOCKING asks for synchronous launches."""
    return os.environ.get("CUDA_LAUNCH_BLOCKING", "").strip() not in ("", "0")


class SimulatedCuda(TorchDispatchMode):
    """The dispatch mode behind `simulated_cuda()`; usable as a context manager, a decorator,
    or with `start()` / `stop()` across notebook cells."""

    def __init__(self, memory_budget: int | None = None, device_index: int = 0) -> None:
        super().__init__()
        self.memory_budget = memory_budget
        self.device_index = device_index
        self._patched: dict[str, Any] = {}
        self._cuda_answers: dict[tuple[Any, str], Any] = {}
        self._off = False

    def start(self) -> SimulatedCuda:
        """Enter the mode until `stop()` (for notebooks, where a `with` cannot span cells)."""
        self.__enter__()
        return self

    def stop(self) -> None:
        """Leave the mode entered by `start()`."""
        self.__exit__(None, None, None)

    def __enter__(self) -> SimulatedCuda:
        self._off = probes.simulator_switched_off()
        if self._off:
            _SWITCHED_OFF["skipped"] += 1
            return self
        super().__enter__()
        self._functions = _CudaFunctionPaths().__enter__()
        self._patch_host_reads()
        _STATE.active += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._off:
            return
        _STATE.active -= 1
        self._restore_host_reads()
        self._functions.__exit__(*exc_info)
        super().__exit__(*exc_info)

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with SimulatedCuda(self.memory_budget, self.device_index):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        __tracebackhide__ = True
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if _STATE.poisoned is not None or (name in SYNCHRONISING_OPS and _STATE.pending):
            _STATE.surface()
        contract = contracts.contract_for(name)
        if contract is not None and not trace.prechecks_active():
            with outside_user_modes():
                violation = contracts.check(contract, args)
                if violation is not None:
                    args = self._fault(contract, args, violation)
        if self.memory_budget is not None:
            self._check_memory(func, args, kwargs)
        out = func(*args, **kwargs)
        if self.memory_budget is not None:
            tree_map(self._track, out)
        return out

    def _fault(self, contract: contracts.IndexContract, args: tuple[Any, ...],
               violation: contracts.Violation) -> tuple[Any, ...]:
        """Assert as the kernel would; return the args the CPU kernel may run on."""
        if _STATE.pending is not None:  # the device already stopped: no kernel runs, no line
            return contracts.sanitized_args(contract, args, violation)
        _write_assert_lines(violation)
        fault = _Fault(violation)
        if blocking_from_env():
            _STATE.poisoned, _STATE.blocking_surfaced = fault, True
            raise fault.error(blocking=True)
        _STATE.pending = fault
        return contracts.sanitized_args(contract, args, violation)

    def _check_memory(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        requested = _predicted_new_bytes(func, args, kwargs)
        used = _STATE.live_bytes()
        if (requested and self.memory_budget is not None
                and used + requested > self.memory_budget):
            raise SimulatedOutOfMemoryError(
                allocator_oom_message(requested, self.memory_budget, used, self.device_index)
            )

    def _track(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            key = value.untyped_storage().data_ptr()
            entry = _STATE.live.setdefault(key, [value.untyped_storage().nbytes(), 0])
            entry[1] += 1
            weakref.finalize(value, _release, key)
        return value

    def _patch_host_reads(self) -> None:
        for name in (*_HOST_READS, "to", "cuda"):
            original = getattr(torch.Tensor, name, None)
            if original is None or getattr(original, "_cudadiag_sim", False):
                continue
            # None marks a method inherited from the C base class: restored by deleting.
            self._patched[name] = torch.Tensor.__dict__.get(name)
            wrap = {"to": _synchronising_to, "cuda": lambda _original: _stays_on_the_cpu
                    }.get(name, _synchronising)
            setattr(torch.Tensor, name, wrap(original))
        if self._cuda_answers or getattr(torch.cuda.is_available, "_cudadiag_sim", False):
            return
        _answer_as_one_gpu(torch.cuda, _ONE_GPU_MACHINE, self._cuda_answers)
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None:
            _answer_as_one_gpu(accelerator, _ONE_GPU_ACCELERATOR, self._cuda_answers)

    def _restore_host_reads(self) -> None:
        for name, original in self._patched.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        self._patched.clear()
        for (module, name), original in self._cuda_answers.items():
            setattr(module, name, original)
        self._cuda_answers.clear()


class _CudaFunctionPaths(TorchFunctionMode):
    """Composite functions whose CPU path checks values on the host where CUDA's leaves the
    check to a kernel assertion: under the simulator they take CUDA's path."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.one_hot:
            return _one_hot_as_on_cuda(*args, **kwargs)
        if "device" in kwargs:  # a factory function asked for a CUDA tensor
            kwargs["device"] = _on_the_cpu(kwargs["device"])
        return func(*args, **kwargs)


def _one_hot_as_on_cuda(tensor: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """aten/src/ATen/native/Onehot.cpp on CUDA: with `num_classes` given, no host check of
    the values; `scatter_` asserts on one outside [0, num_classes)."""
    if num_classes == -1 or tensor.dtype != torch.long or num_classes < 1:
        return torch.nn.functional.one_hot(tensor, num_classes)  # the checks CUDA makes too
    out = torch.zeros(*tensor.shape, num_classes, dtype=torch.long)
    return out.scatter_(-1, tensor.unsqueeze(-1), 1)


def simulated_cuda(memory_budget: int | str | None = None) -> SimulatedCuda:
    """Return a simulated CUDA device for CPU tensors (a context manager and decorator).

    `memory_budget` (bytes, or a size like `"2 GiB"`) turns on the out-of-memory simulation.
    Raises ValueError for a budget that cannot be read.
    """
    if isinstance(memory_budget, str):
        from cudadiag.classification import parse_size

        parsed = parse_size(memory_budget)
        if parsed is None:
            raise ValueError(
                f"memory_budget {memory_budget!r} is not a size; give bytes or e.g. '2 GiB'"
            )
        memory_budget = parsed
    return SimulatedCuda(memory_budget)


def format_size(size: int) -> str:
    """Return a size the way PyTorch's allocator prints it (`20.00 MiB`)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} bytes"


def allocator_oom_message(requested: int, total: int, used: int, device: int = 0) -> str:
    """Return the caching allocator's out-of-memory text (c10/cuda/CUDACachingAllocator.cpp)."""
    free = max(total - used, 0)
    return (
        f"CUDA out of memory. Tried to allocate {format_size(requested)}. GPU {device} has a "
        f"total capacity of {format_size(total)} of which {format_size(free)} is free. "
        f"Of the allocated memory {format_size(used)} is allocated by PyTorch, and "
        f"{format_size(0)} is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _synchronising(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if _simulator_on_stack():
            _STATE.surface()
        return method(*args, **kwargs)

    wrapper._cudadiag_sim = True  # type: ignore[attr-defined]
    return wrapper


def _synchronising_to(method: Callable[..., Any]) -> Callable[..., Any]:
    """`Tensor.to` waits for the device only when it copies to the host."""

    @functools.wraps(method)
    def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        targets = [*args, kwargs.get("device")]
        to_host = any(str(t) == "cpu" for t in targets if isinstance(t, (str, torch.device)))
        if to_host and _simulator_on_stack():
            _STATE.surface()
        if any(map(_is_cuda, targets)):  # .to("cuda"): the simulated device's tensors stay
            args = tuple(map(_on_the_cpu_unless_dtype, args))
            if "device" in kwargs:
                kwargs["device"] = _on_the_cpu(kwargs["device"])
        return method(self, *args, **kwargs)

    wrapper._cudadiag_sim = True  # type: ignore[attr-defined]
    return wrapper


def _on_the_cpu_unless_dtype(arg: Any) -> Any:
    return "cpu" if _is_cuda(arg) else arg


def _simulator_on_stack() -> bool:
    """False inside `_disable_current_modes()`: cudadiag's own reads of a batch copy are
    host work, not the simulated device's."""
    return any(isinstance(mode, SimulatedCuda) for mode in _get_current_dispatch_mode_stack())


def _release(key: int) -> None:
    entry = _STATE.live.get(key)
    if entry is not None:
        entry[1] -= 1
        if entry[1] <= 0:
            del _STATE.live[key]


def _write_assert_lines(violation: contracts.Violation) -> None:
    """Write the kernel's assertion printf lines to fd 2, as a real kernel would (none for a
    kernel whose assertion is not known; line 0 for one whose line is not known)."""
    ka = violation.kernel_assert
    if ka is None:
        return
    lines = []
    for position in violation.positions[:MAX_ASSERT_LINES]:
        thread = position[-1] if position else 0
        lines.append(
            f"{ka.file}:{ka.line or 0}: {ka.kernel}: block: [0,0,0], thread: [{thread},0,0] "
            f"Assertion `{ka.assertion}` failed.\n"
        )
    os.write(2, "".join(lines).encode())


def _predicted_new_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes of fresh storage the call would allocate, computed on the meta device."""
    if any(r.alias_info is not None for r in func._schema.returns):
        return 0

    def to_meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                       device="meta")
        if isinstance(value, torch.device):
            return torch.device("meta")
        return value

    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    if "device" in kwargs:
        meta_kwargs["device"] = torch.device("meta")
    try:
        out = func(*tree_map(to_meta, args), **meta_kwargs)
    except Exception:  # no meta kernel: the budget is checked only for what meta can size
        return 0
    sizes: list[int] = []
    tree_map(lambda t: sizes.append(t.untyped_storage().nbytes())
             if isinstance(t, torch.Tensor) else None, out)
    return sum(sizes)
