"""What each way of intercepting aten calls costs per op, against untraced eager ops: the
figures behind the choice of the op tracer's design (issue 27, item 2).

Sides, each measured in alternating rounds on the same small-op loops (an elementwise op
with no index contract, an embedding that has one):

- untraced;
- the op tracer as it is (a Python TorchDispatchMode recording every call), prechecks off;
- the floor of any TorchDispatchMode: one that only calls the op;
- a dispatch key of its own (torch's spare TESTING_ONLY_GenericMode, put in the thread's
  included keys) with a Python kernel on the contract operators only and a fallthrough for
  every other operator: the contract ops are seen, the others cost the dispatcher's skip
  and are not recorded at all;
- a Python fallback on a dispatch key for every operator (TESTING_ONLY_GenericWrapper),
  appending each op to a ring and calling it again with the key excluded: a dispatch mode
  without the mode stack;
- the legacy autograd profiler (C++ RecordFunction callbacks, names and input shapes): no
  Python per op, but it keeps every event until it is stopped (no ring) and takes the place
  of any profiler the program starts;
- the Kineto profiler, CPU activity only, with input shapes.

The contract-op kernel here records the call and does not precheck: the figure is the
interception's own cost. Times are this process's CPU time (the loops run on one thread; on a
shared machine wall time also counts other processes' turns).
The loops, the floor and the timing are trace_overhead.py's.

    python bench/trace_alternatives.py [--rounds 9] [--ops 2000]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.library import Library, fallthrough_kernel
from trace_overhead import CallOnly, elementwise_loop, indexed_loop, per_op

from cudadiag.trace import OpTracer

CONTRACT_KEY = "TESTING_ONLY_GenericMode"
EVERY_OP_KEY = "TESTING_ONLY_GenericWrapper"
RING: collections.deque[Any] = collections.deque(maxlen=64)
_LIBRARIES: list[Library] = []


class IncludedKey:
    """The thread's dispatch includes `key` while entered."""

    def __init__(self, key: str) -> None:
        self.key = torch._C._parse_dispatch_key(key)

    def __enter__(self) -> None:
        self.guard = torch._C._IncludeDispatchKeyGuard(self.key)
        self.guard.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.guard.__exit__(*exc)


def register_kernels() -> None:
    """A Python kernel for aten::embedding on CONTRACT_KEY (fallthrough for every other op),
    and a Python fallback for every op on EVERY_OP_KEY."""
    contract_key = torch._C._parse_dispatch_key(CONTRACT_KEY)
    every_key = torch._C._parse_dispatch_key(EVERY_OP_KEY)
    embedding = torch.ops.aten.embedding.default

    def embedding_kernel(keyset, weight, indices, *rest):
        RING.append((embedding, indices.shape))
        return embedding.redispatch(keyset.remove(contract_key), weight, indices, *rest)

    not_again = torch._C.DispatchKeySet(every_key)

    def every_op(op, *args, **kwargs):
        RING.append(op)
        with torch._C._ExcludeDispatchKeyGuard(not_again):
            return op(*args, **kwargs)

    fallbacks = Library("_", "IMPL")
    fallbacks.fallback(fallthrough_kernel, CONTRACT_KEY)
    fallbacks.fallback(every_op, EVERY_OP_KEY)
    kernels = Library("aten", "IMPL")
    kernels.impl("embedding", embedding_kernel, CONTRACT_KEY, with_keyset=True)
    _LIBRARIES.extend([fallbacks, kernels])


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
    "op tracer today (dispatch mode)": lambda: OpTracer(precheck=False),
    "dispatch mode floor (calls only)": CallOnly,
    "own key, contract ops only": lambda: IncludedKey(CONTRACT_KEY),
    "own key, Python fallback, every op": lambda: IncludedKey(EVERY_OP_KEY),
    "legacy profiler (C++, shapes)": lambda: Profiled("CPU"),
    "Kineto profiler (CPU, shapes)": lambda: Profiled("KINETO"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    register_kernels()
    sides = list(SIDES.items())
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name, loop in (("x.mul (no contract)", elementwise_loop),
                       ("F.embedding (contract)", indexed_loop)):
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        for round_number in range(args.rounds):  # each side leads in turn
            shift = round_number % len(sides)
            for side, mode in sides[shift:] + sides[:shift]:
                times[side].append(per_op(loop, args.ops, mode()))
        base = statistics.median(times["untraced"])
        print(f"{name}: untraced {base * 1e6:.1f} us/op")
        for side in list(SIDES)[1:]:
            median = statistics.median(times[side])
            print(f"  {side:38} +{(median - base) * 1e6:5.1f} us/op")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
