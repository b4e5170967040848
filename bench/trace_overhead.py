"""Per-op cost of the op tracer (and of its prechecks) against untraced eager ops.

Runs the same small-op loop untraced, traced, and traced with prechecks on an index-taking
op, alternating rounds so all three see the same machine noise; prints medians per op and the
ratios.

    python bench/trace_overhead.py [--rounds 15] [--ops 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from cudadiag.trace import OpTracer


def elementwise_loop(n: int) -> None:
    x = torch.ones(64)
    for _ in range(n):
        x = x.mul(1.0)


def indexed_loop(n: int) -> None:
    weight, idx = torch.randn(100, 16), torch.randint(0, 100, (32,))
    for _ in range(n):
        F.embedding(idx, weight)


def per_op(loop, n: int, mode) -> float:
    start = time.perf_counter()
    with mode:
        loop(n)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    for name, loop in (("elementwise (x.mul)", elementwise_loop),
                       ("embedding (precheck applies)", indexed_loop)):
        plain: list[float] = []
        traced: list[float] = []
        checked: list[float] = []
        sides = [(plain, nullcontext), (traced, lambda: OpTracer(precheck=False)),
                 (checked, lambda: OpTracer(precheck=True))]
        for round_number in range(args.rounds):  # each side leads in turn
            shift = round_number % len(sides)
            for times, mode in sides[shift:] + sides[:shift]:
                times.append(per_op(loop, args.ops, mode()))
        base = statistics.median(plain)
        t, c = statistics.median(traced), statistics.median(checked)
        print(f"{name}: untraced {base * 1e6:.1f} us/op, traced {t * 1e6:.1f} us/op "
              f"(+{(t - base) * 1e6:.1f} us, x{t / base:.2f}), traced+precheck "
              f"{c * 1e6:.1f} us/op (+{(c - base) * 1e6:.1f} us, x{c / base:.2f})")


if __name__ == "__main__":
    main()
