"""What each way of intercepting aten calls costs per op, against untraced eager ops: the
figures behind the choice of the op tracer's design (issue 27, item 2).

Sides, each measured in alternating rounds on the same small-op loops (an elementwise op
with no index contract, an embedding that has one):

- untraced;
- the op tracer as a Python TorchDispatchMode recording every call (where trace_native is
  not built), prechecks off and on;
- the floor of any TorchDispatchMode: one that only calls the op;
- a dispatch key of its own (torch's spare TESTING_ONLY_GenericMode, put in the thread's
  included keys) with a Python kernel on the contract operators only and a fallthrough for
  every other operator: the contract ops are seen, the others cost the dispatcher's skip
  and are not recorded at all;
- a Python fallback on a dispatch key for every operator (TESTING_ONLY_GenericWrapper),
  appending each op to a ring and calling it again with the key excluded: a dispatch mode
  without the mode stack;
- the op tracer in C++ (trace_native.py: a boxed C++ fallback on TESTING_ONLY_GenericMode
  recording every call into a fixed ring, Python only for the watched operators), prechecks
  off, and with its prechecks on (the embedding's runs);
- the legacy autograd profiler (C++ RecordFunction callbacks, names and input shapes): no
  Python per op, but it keeps every event until it is stopped (no ring) and takes the place
  of any profiler the program starts;
- the Kineto profiler, CPU activity only, with input shapes.

The contract-only side's kernel records the call and does not precheck: the figure is the
interception's own cost. trace_native is built first where it is not (its time printed), or
loaded (the time of a cache hit). Registering a fallback recomputes every operator's dispatch
table (milliseconds), so each side's registration is made before its timed loop and removed
after it, before the next side's. Times are this process's CPU time (the loops run on one
thread; on a shared machine wall time also counts other processes' turns).
The loops, the floor and the timing are trace_overhead.py's.

    python bench/trace_alternatives.py [--rounds 9] [--ops 2000]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.library import Library, fallthrough_kernel
from trace_overhead import CallOnly, elementwise_loop, indexed_loop, per_op

from cudadiag import trace_native
from cudadiag.trace import OpTracer

CONTRACT_KEY = "TESTING_ONLY_GenericMode"
EVERY_OP_KEY = "TESTING_ONLY_GenericWrapper"
RING: collections.deque[Any] = collections.deque(maxlen=64)


class IncludedKey:
    """The thread's dispatch includes `key` while entered."""

    def __init__(self, key: str) -> None:
        self.key = torch._C._parse_dispatch_key(key)

    def __enter__(self) -> None:
        self.guard = torch._C._IncludeDispatchKeyGuard(self.key)
        self.guard.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.guard.__exit__(*exc)


_UNREGISTER: list[Callable[[], None]] = []
"""What the last side registered, removed as the next side is made: (un)registering a
fallback recomputes every operator's dispatch table (milliseconds), so it stays out of the
timed loops. The native tracer's fallback and the contract-only side share a key."""


def unregister_last() -> None:
    while _UNREGISTER:
        _UNREGISTER.pop()()


class Registered:
    """`key` included while entered; `libraries` (registered as the side is made) are
    removed as the next side is made."""

    def __init__(self, key: str, libraries: list[Library]) -> None:
        self.included = IncludedKey(key)
        _UNREGISTER.extend(library._destroy for library in libraries)

    def __enter__(self) -> None:
        self.included.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.included.__exit__(*exc)


class NativeTracer:
    """The op tracer on its C++ part, its fallback installed as the side is made."""

    def __init__(self, precheck: bool) -> None:
        module = trace_native.load()
        module.install(trace_native.KEY)
        _UNREGISTER.append(module.uninstall)
        self.tracer = OpTracer(precheck=precheck)

    def __enter__(self) -> None:
        self.tracer.__enter__()
        assert self.tracer.native

    def __exit__(self, *exc: object) -> None:
        self.tracer.__exit__(*exc)


def contract_kernels() -> Registered:
    """A Python kernel for aten::embedding on CONTRACT_KEY, fallthrough for every other op."""
    contract_key = torch._C._parse_dispatch_key(CONTRACT_KEY)
    embedding = torch.ops.aten.embedding.default

    def embedding_kernel(keyset, weight, indices, *rest):
        RING.append((embedding, indices.shape))
        return embedding.redispatch(keyset.remove(contract_key), weight, indices, *rest)

    fallbacks = Library("_", "IMPL")
    fallbacks.fallback(fallthrough_kernel, CONTRACT_KEY)
    kernels = Library("aten", "IMPL")
    kernels.impl("embedding", embedding_kernel, CONTRACT_KEY, with_keyset=True)
    return Registered(CONTRACT_KEY, [fallbacks, kernels])


def every_op_fallback() -> Registered:
    """A Python fallback for every op on EVERY_OP_KEY."""
    not_again = torch._C.DispatchKeySet(torch._C._parse_dispatch_key(EVERY_OP_KEY))

    def every_op(op, *args, **kwargs):
        RING.append(op)
        with torch._C._ExcludeDispatchKeyGuard(not_again):
            return op(*args, **kwargs)

    fallbacks = Library("_", "IMPL")
    fallbacks.fallback(every_op, EVERY_OP_KEY)
    return Registered(EVERY_OP_KEY, [fallbacks])


class Profiled:
    """One of torch's profilers running while entered (state: a ProfilerState name)."""

    def __init__(self, state: str) -> None:
        self.legacy = state == "CPU"
        self.config = torch.autograd.ProfilerConfig(
            getattr(torch.autograd.ProfilerState, state), True, False, False, False, False,
            torch._C._profiler._ExperimentalConfig())

    def __enter__(self) -> None:
        if self.legacy:
            torch.autograd._enable_profiler_legacy(self.config)
            return
        activities = {torch.autograd.ProfilerActivity.CPU}
        torch.autograd._prepare_profiler(self.config, activities)
        torch.autograd._enable_profiler(self.config, activities)

    def __exit__(self, *exc: object) -> None:
        if self.legacy:
            torch.autograd._disable_profiler_legacy()
        else:
            torch.autograd._disable_profiler()


SIDES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "untraced": nullcontext,
    "op tracer, dispatch mode": lambda: OpTracer(precheck=False, native=False),
    "op tracer, dispatch mode, prechecks": lambda: OpTracer(precheck=True, native=False),
    "dispatch mode floor (calls only)": CallOnly,
    "op tracer in C++ (trace_native)": lambda: NativeTracer(precheck=False),
    "op tracer in C++, prechecks": lambda: NativeTracer(precheck=True),
    "own key, contract ops only": contract_kernels,
    "own key, Python fallback, every op": every_op_fallback,
    "legacy profiler (C++, shapes)": lambda: Profiled("CPU"),
    "Kineto profiler (CPU, shapes)": lambda: Profiled("KINETO"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    built = trace_native.load() is not None
    if not built:
        trace_native.build()
    print(f"trace_native: {'loaded' if built else 'built'} in "
          f"{time.perf_counter() - started:.2f} s")
    sides = list(SIDES.items())
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name, loop in (("x.mul (no contract)", elementwise_loop),
                       ("F.embedding (contract)", indexed_loop)):
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        for round_number in range(args.rounds):  # each side leads in turn
            shift = round_number % len(sides)
            for side, mode in sides[shift:] + sides[:shift]:
                unregister_last()
                times[side].append(per_op(loop, args.ops, mode()))
        base = statistics.median(times["untraced"])
        print(f"{name}: untraced {base * 1e6:.1f} us/op")
        for side in list(SIDES)[1:]:
            median = statistics.median(times[side])
            print(f"  {side:38} +{(median - base) * 1e6:5.1f} us/op")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
