"""Per-step cost of watch() over a DataLoader of in-memory tensors, side by side with the
bare loader, alternating rounds; prints medians, the added microseconds per step, the ratio.

    python bench/watch_overhead.py [--rounds 15] [--steps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from cudadiag import watch


def per_step(iterable, steps: int) -> float:
    start = time.perf_counter()
    count = 0
    for _ in iterable:
        count += 1
    assert count == steps
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=2000)
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
    print(f"DataLoader of 3 in-memory tensors, batch {batch}, {args.steps} steps x "
          f"{args.rounds} rounds")
    print(f"bare loader:   median {b * 1e6:7.1f} us/step")
    print(f"with watch():  median {w * 1e6:7.1f} us/step")
    print(f"added:         {paired * 1e6:7.1f} us/step, median of paired rounds "
          f"(target <= 20 us); ratio of medians {w / b:.3f}")


if __name__ == "__main__":
    main()
