"""Wall time and trials of the minimizer on the 20-cell case (bench/history20.py), CPU twin
and simulated device, each minimized REPEATS times (median reported). Target: at most 10 s
on 2 cores.

    python bench/minimize.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from history20 import history

from cudadiag.isolate.plan import make_plan
from cudadiag.repro.minimize import minimize

REPEATS = 3


def main() -> None:
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")
    print(f"cores: {os.cpu_count()}, {REPEATS} runs each")
    for simulated in (False, True):
        cells = history(simulated)
        plan = make_plan(cells, max(cells), {}, ship="none")
        walls, results = [], []
        for _ in range(REPEATS):
            started = time.perf_counter()
            results.append(minimize({n: plan.sources[n] for n in plan.replay}))
            walls.append(time.perf_counter() - started)
        result = results[-1]
        trials = sorted({r.trials for r in results})
        refused = getattr(result, "refused", 0)
        label = "simulated cuda" if simulated else "cpu twin"
        print(f"{label:14}: 20 cells -> plan of {len(plan.replay)} -> {len(result.cells)} cells,"
              f" {result.statements} statements; median {statistics.median(walls):.2f} s "
              f"(min {min(walls):.2f}, max {max(walls):.2f}); trials {trials}, "
              f"{refused} refused without a trial")


if __name__ == "__main__":
    main()
