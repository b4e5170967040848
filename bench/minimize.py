"""Wall time and trials of the minimizer on the 20-cell case (bench/history20.py), CPU twin
and simulated device, in one run. Target: at most 10 s on 2 cores.

    python bench/minimize.py
"""

from __future__ import annotations

import os
import tempfile
import time

from history20 import history

from cudadiag.isolate.plan import make_plan
from cudadiag.repro.minimize import minimize


def main() -> None:
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")
    print(f"cores: {os.cpu_count()}")
    for simulated in (False, True):
        cells = history(simulated)
        plan = make_plan(cells, max(cells), {}, ship="none")
        started = time.perf_counter()
        result = minimize({n: plan.sources[n] for n in plan.replay})
        wall = time.perf_counter() - started
        label = "simulated cuda" if simulated else "cpu twin"
        print(f"{label:14}: 20 cells -> plan of {len(plan.replay)} -> {len(result.cells)} cells,"
              f" {result.statements} statements; {result.trials} trials in {wall:.2f} s "
              f"({wall / result.trials * 1000:.0f} ms per trial, fork-server start included)")


if __name__ == "__main__":
    main()
