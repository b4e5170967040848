"""Start-up cost of an isolated run: `x = 1` through %%blocking_launch against a cold
`python -c "import torch"`, medians of several runs side by side, and their ratio; plus the
same run through the fork-server launcher (a pre-started interpreter, as the minimizer uses).

    python bench/isolate_overhead.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def cold_import_torch() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def blocking_launch(shell) -> float:
    start = time.perf_counter()
    shell.run_cell("%%blocking_launch\nx = 1", store_history=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext cudadiag", store_history=True)
    from cudadiag.isolate.launcher import ForkServerLauncher
    from cudadiag.isolate.runner import run_isolated

    cold, isolated, forked = [], [], []
    with ForkServerLauncher() as launcher:
        run_isolated("x = 1", launcher=launcher, stream=False, store=False)  # start it
        def forked_run() -> float:
            start = time.perf_counter()
            run_isolated("x = 1", launcher=launcher, stream=False, store=False)
            return time.perf_counter() - start

        sides = [(cold, cold_import_torch), (isolated, lambda: blocking_launch(shell)),
                 (forked, forked_run)]
        for run_number in range(args.runs):  # each side leads in turn
            shift = run_number % len(sides)
            for times, measure in sides[shift:] + sides[:shift]:
                times.append(measure())
    c, i, f = statistics.median(cold), statistics.median(isolated), statistics.median(forked)
    print(f"runs: {args.runs}")
    print(f"python -c 'import torch' (cold): median {c:.3f} s")
    print(f"%%blocking_launch x = 1:         median {i:.3f} s")
    print(f"ratio isolated / cold import:    {i / c:.2f}")
    print(f"fork-server run of x = 1 (warm): median {f:.3f} s, ratio to cold import {f / c:.3f}")


if __name__ == "__main__":
    main()
