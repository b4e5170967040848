"""Per-step cost of watch() (default keep=2) over a DataLoader of in-memory tensors, side by
side with the bare loader in one run, alternating which goes first each round; prints the load,
medians, the added microseconds per step against the target (<= 20 us), the ratio. Many short
rounds: each pair runs close in time, so a loaded machine's drift (tens of microseconds per
step from round to round) does not swamp an effect of a few microseconds.

    python bench/watch_overhead.py [--rounds 151] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from cudadiag import watch

TARGET_US = 20


def per_step(iterable, steps: int) -> float:
    start = time.perf_counter()
    count = 0
    for _ in iterable:
        count += 1
    assert count == steps
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=151)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    batch = 32
    data = TensorDataset(torch.randn(args.steps * batch, 16),
                         torch.randint(0, 10, (args.steps * batch,)),
                         torch.ones(args.steps * batch, 12, dtype=torch.long))
    loader = DataLoader(data, batch_size=batch)
    bare, watched = [], []
    for round_number in range(args.rounds):  # odd rounds run watch() first
        if round_number % 2:
            watched.append(per_step(watch(loader), args.steps))
            bare.append(per_step(loader, args.steps))
        else:
            bare.append(per_step(loader, args.steps))
            watched.append(per_step(watch(loader), args.steps))
    b, w = statistics.median(bare), statistics.median(watched)
    paired = statistics.median(x - y for x, y in zip(watched, bare, strict=True))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; DataLoader of 3 "
          f"in-memory tensors, batch {batch}, {args.steps} steps x {args.rounds} rounds")
    print(f"bare loader:   median {b * 1e6:7.1f} us/step")
    print(f"with watch():  median {w * 1e6:7.1f} us/step")
    print(f"added:         {paired * 1e6:7.1f} us/step, median of paired rounds "
          f"(target <= {TARGET_US} us: {'met' if paired * 1e6 <= TARGET_US else 'NOT met'}); "
          f"ratio of medians {w / b:.3f}")


if __name__ == "__main__":
    main()
