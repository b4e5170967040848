"""Per-op cost of the op tracer (and of its prechecks) against untraced eager ops.

Runs the same small-op loop untraced, under a dispatch mode that only calls the op (the floor
of any tracer written as a Python dispatch mode), traced, and traced with prechecks on an
index-taking op (the tracer as diagnostic runs use it: in C++ where trace_native is built),
alternating rounds so all four see the same machine noise; prints medians
per op, what each adds and the targets (<= 2 us added per op without an index contract,
<= 5 us for an op whose precheck runs). Times are this process's CPU time: on a shared machine
wall time also counts the turns of other processes, and these loops run on one thread.

    python bench/trace_overhead.py [--rounds 15] [--ops 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from cudadiag.trace import OpTracer


class CallOnly(TorchDispatchMode):
    """A dispatch mode that records nothing: what Python dispatch costs by itself (without
    torch._dynamo.disable's wrapper around each call, which the op tracer does without too;
    nothing here is compiled)."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def elementwise_loop(n: int) -> None:
    x = torch.ones(64)
    for _ in range(n):
        x = x.mul(1.0)


def indexed_loop(n: int) -> None:
    weight, idx = torch.randn(100, 16), torch.randint(0, 100, (32,))
    for _ in range(n):
        F.embedding(idx, weight)


def per_op(loop, n: int, mode) -> float:
    start = time.process_time()
    with mode:
        loop(n)
    return (time.process_time() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    with OpTracer() as tracer:  # its fallback registered (once) before the timed loops
        native = tracer.native
    print("op tracer: " + ("C++ (trace_native)" if native else "Python dispatch mode "
                           "(trace_native not built: python -m cudadiag.trace_native)"))
    for name, loop in (("elementwise (x.mul)", elementwise_loop),
                       ("embedding (precheck applies)", indexed_loop)):
        plain: list[float] = []
        floor: list[float] = []
        traced: list[float] = []
        checked: list[float] = []
        sides = [(plain, nullcontext), (floor, CallOnly),
                 (traced, lambda: OpTracer(precheck=False)),
                 (checked, lambda: OpTracer(precheck=True))]
        for round_number in range(args.rounds):  # each side leads in turn
            shift = round_number % len(sides)
            for times, mode in sides[shift:] + sides[:shift]:
                times.append(per_op(loop, args.ops, mode()))
        base, f = statistics.median(plain), statistics.median(floor)
        t, c = statistics.median(traced), statistics.median(checked)
        target = 5 if "precheck" in name else 2
        print(f"{name}: untraced {base * 1e6:.1f} us/op, dispatch floor +{(f - base) * 1e6:.1f}"
              f" us, traced {t * 1e6:.1f} us/op (+{(t - base) * 1e6:.1f} us, x{t / base:.2f}),"
              f" traced+precheck {c * 1e6:.1f} us/op (+{(c - base) * 1e6:.1f} us, "
              f"x{c / base:.2f}); target <= +{target} us")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
