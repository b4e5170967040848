"""Cost of cudadiag's cell callbacks on cells that raise nothing.

Runs the same trivial cells in one IPython shell with and without the extension, alternating
blocks so both conditions see the same machine noise, and prints the median time per cell,
the added cost and the ratio.

    python bench/hook_overhead.py [--rounds 15] [--cells 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

CELL = "x = 1"


def time_block(shell, cells: int) -> float:
    """Return the mean seconds per cell over a block of `cells` cells."""
    start = time.perf_counter()
    for _ in range(cells):
        shell.run_cell(CELL, store_history=True)
    return (time.perf_counter() - start) / cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("import torch, numpy", store_history=True)  # RNG states to record
    shell.history_manager.enabled = False
    without, with_ext = [], []
    for round_number in range(args.rounds):  # odd rounds measure the extension first
        if round_number % 2:
            shell.extension_manager.load_extension("cudadiag")
            with_ext.append(time_block(shell, args.cells))
            shell.extension_manager.unload_extension("cudadiag")
            without.append(time_block(shell, args.cells))
        else:
            without.append(time_block(shell, args.cells))
            shell.extension_manager.load_extension("cudadiag")
            with_ext.append(time_block(shell, args.cells))
            shell.extension_manager.unload_extension("cudadiag")
    base, loaded = statistics.median(without), statistics.median(with_ext)
    print(f"cells per block: {args.cells}, rounds: {args.rounds}")
    print(f"median per cell without cudadiag: {base * 1e6:8.1f} us")
    print(f"median per cell with cudadiag:    {loaded * 1e6:8.1f} us")
    print(f"added per cell:                   {(loaded - base) * 1e6:8.1f} us (target < 1000 us)")
    print(f"ratio with/without:               {loaded / base:8.3f}")


if __name__ == "__main__":
    main()
