"""What collect_env() costs each incident in a warm process (torch imported, git revision
cached), beside its target (under 50 ms): the median of a few rounds, cold first call apart.

    python bench/env_cost.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

TARGET_MS = 50.0


def main() -> None:
    """Print the cold and the warm median cost of collect_env() and the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    import torch  # noqa: F401  (imported by the user's program before any incident)

    from cudadiag.env import collect_env

    start = time.perf_counter()
    collect_env()
    cold_ms = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        collect_env()
        times.append((time.perf_counter() - start) * 1000)
    print(f"collect_env: first call {cold_ms:.1f} ms, then median {statistics.median(times):.2f}"
          f" ms over {args.rounds} calls (target < {TARGET_MS:g} ms)")


if __name__ == "__main__":
    main()
