"""What an isolated run costs against a cold `python -c "import torch"`, both sides measured in
one run, alternating which goes first, medians side by side with their ratio and the target:

- `%%blocking_launch x = 1`, forked from the kernel's warm interpreter: <= 40 ms (on idle
  cores) and within 5x a bare fork measured in the same run (`os.fork` of this process, which
  has imported torch as the warm interpreter has, the child exiting at once, waited for);
- `%cuda_isolate` of the method's worked example (imports, data, a failing cross_entropy on the
  simulated device), warm: ratio <= 0.05, each run checked to name the op and the value;
- for reference, `%%blocking_launch --cold x = 1` (a new interpreter per run).

    python bench/isolate_overhead.py [--runs 7]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

GUIDE_CELLS = [
    "import torch\nimport torch.nn.functional as F\nfrom cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()",
    "torch.manual_seed(0)\nmodel = torch.nn.Linear(8, 4)\nx = torch.randn(3, 8)\n"
    "target = torch.tensor([0, 2, 4])",
    "loss = F.cross_entropy(model(x), target)\nprint('loss', loss.item())",
]
NAMED = ("aten::nll_loss_forward", "target 4 at position 2")
"""What the isolated run of the method's worked example must say: the op, the value and position."""
TARGETS = {"cuda_isolate": 0.05}
BLOCKING_LAUNCH_S = 0.040
BARE_FORKS = 5
"""%%blocking_launch x = 1 (warm): at most this many seconds, and this many bare forks."""


def cold_import_torch() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def bare_fork() -> float:
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return time.perf_counter() - start


def timed_cell(shell, source: str, must_say: tuple[str, ...] = ()) -> float:
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        shell.run_cell(source, store_history=True)
    wall = time.perf_counter() - start
    text = out.getvalue()
    missing = [word for word in must_say if word not in text]
    if missing or ("warm start" not in text and "--cold" not in source):
        sys.exit(f"bench: the run did not say {missing or 'warm start'}:\n{text}")
    return wall


def side_by_side(runs: int, cold: Callable[[], float], other: Callable[[], float]
                 ) -> tuple[float, float]:
    """Medians of `runs` runs of each, alternating which goes first."""
    times: dict[Callable[[], float], list[float]] = {cold: [], other: []}
    for i in range(runs):
        for side in (cold, other) if i % 2 == 0 else (other, cold):
            times[side].append(side())
    return statistics.median(times[cold]), statistics.median(times[other])


def report(label: str, cold: float, other: float, target: float | None) -> None:
    ratio = other / cold
    verdict = "" if target is None else (
        f"   target <= {target}: {'met' if ratio <= target else 'NOT met'}")
    print(f"{label:38} median {other:7.3f} s   cold import {cold:6.3f} s   "
          f"ratio {ratio:.3f}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-bench-")
    import torch  # noqa: F401  (the bare fork forks an interpreter holding torch, as the warm one)
    from IPython.core.interactiveshell import InteractiveShell

    from cudadiag.isolate import warm

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext cudadiag", store_history=True)
    if not warm.wait_ready(300):
        sys.exit("bench: the warm interpreter did not start")
    timed_cell(shell, "%%blocking_launch\nx = 1")  # the kernel's own first-use costs

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{args.runs} runs of each side")
    cold, warm_run = side_by_side(args.runs, cold_import_torch,
                                  lambda: timed_cell(shell, "%%blocking_launch\nx = 1"))
    report("%%blocking_launch x = 1 (warm)", cold, warm_run, None)
    fork, warm_run = side_by_side(args.runs * 3, bare_fork,
                                  lambda: timed_cell(shell, "%%blocking_launch\nx = 1"))
    met = warm_run <= BLOCKING_LAUNCH_S and warm_run <= BARE_FORKS * fork
    print(f"{'  against a bare fork':38} median {warm_run * 1e3:5.1f} ms   bare fork "
          f"{fork * 1e3:5.1f} ms   x{warm_run / fork:.1f}   target <= {BLOCKING_LAUNCH_S * 1e3:.0f}"
          f" ms and <= x{BARE_FORKS}: {'met' if met else 'NOT met'}")
    report("%%blocking_launch --cold x = 1", *side_by_side(
        args.runs, cold_import_torch,
        lambda: timed_cell(shell, "%%blocking_launch --cold\nx = 1")), None)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in GUIDE_CELLS:  # only now: x = 1 above replays none of them
            shell.run_cell(cell, store_history=True)
    failing = shell.execution_count - 1
    report("%cuda_isolate method example (warm)", *side_by_side(
        args.runs, cold_import_torch,
        lambda: timed_cell(shell, f"%cuda_isolate {failing}", NAMED)),
        TARGETS["cuda_isolate"])
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    shell.run_cell("%unload_ext cudadiag")


if __name__ == "__main__":
    main()
