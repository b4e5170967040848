"""Wall time and trials of the minimizer on the 20-cell case (bench/history20.py), CPU twin
and simulated device, both sides in one run, alternating which goes first: forking from the
kernel's warm interpreter (as `%cudadiag export` does once `%load_ext cudadiag` has started
it) and from a fork server of its own (as `cudadiag export` in a terminal). Medians of
REPEATS runs each. Target (warm): 20 cells to <= 3 cells in <= 5 s (imports, model, loss:
the seed goes, as the failure is the same under other seeds).

    python bench/minimize.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from history20 import history

from cudadiag.isolate import warm
from cudadiag.isolate.plan import make_plan
from cudadiag.repro.minimize import minimize

REPEATS = 3
TARGET_CELLS, TARGET_S = 3, 5.0


def timed(cells: dict[int, str], use_warm: bool) -> tuple[float, object]:
    if use_warm:
        warm.start()
        if not warm.wait_ready(300):
            raise SystemExit("bench: the warm interpreter did not start")
    else:
        warm.stop("bench: the other side")
    started = time.perf_counter()
    result = minimize(cells)
    return time.perf_counter() - started, result


def main() -> None:
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{REPEATS} runs of each side")
    for simulated in (False, True):
        cells = history(simulated)
        plan = make_plan(cells, max(cells), {}, ship="none")
        planned = {n: plan.sources[n] for n in plan.replay}
        walls: dict[bool, list[float]] = {True: [], False: []}
        results: dict[bool, list] = {True: [], False: []}
        for i in range(REPEATS):
            for use_warm in (True, False) if i % 2 == 0 else (False, True):
                wall, result = timed(planned, use_warm)
                walls[use_warm].append(wall)
                results[use_warm].append(result)
        label = "simulated cuda" if simulated else "cpu twin"
        for use_warm in (True, False):
            result = results[use_warm][-1]
            wall = statistics.median(walls[use_warm])
            side = "warm (kernel's)" if use_warm else "own fork server"
            verdict = ""
            if use_warm:
                met = len(result.cells) <= TARGET_CELLS and wall <= TARGET_S
                verdict = (f"   target <= {TARGET_CELLS} cells in <= {TARGET_S:g} s: "
                           f"{'met' if met else 'NOT met'}")
            kept = ", ".join(f"In[{n}]" for n in result.cells)
            print(f"{label:14} {side:16}: 20 cells -> plan of {len(plan.replay)} -> "
                  f"{len(result.cells)} cells ({kept}), {result.statements} statements; median "
                  f"{wall:.2f} s (min {min(walls[use_warm]):.2f}, max "
                  f"{max(walls[use_warm]):.2f}); trials "
                  f"{sorted({r.trials for r in results[use_warm]})}{verdict}")
    warm.stop("bench: done")


if __name__ == "__main__":
    main()
