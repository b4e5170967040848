"""`cudadiag explain` throughput on a large log, side by side with `grep -c` over the same file.

Writes a synthetic two-rank training log (timestamped progress lines, warnings, a device
assert on rank 1 near the end, then rank 0's watchdog timeout), runs `grep -c error` and
`cudadiag explain` on it in alternating order, and prints the median MB/s of each, the ratio
and the target (>= 50 MB/s). The peak memory of a `cudadiag explain` process shows that the
log is streamed.

    python bench/explain.py [--mb 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MB_S = 50.0
PROGRESS = (
    "[rank{r}]: 2024-05-01 12:{m:02d}:{s:02d},{ms:03d} INFO trainer: epoch 3 step {step}/90000 "
    "loss={loss:.4f} lr=3.0e-04 grad_norm=1.23 tokens/s=12345\n"
)
WARNING = ("[rank{r}]: 2024-05-01 12:{m:02d}:{s:02d},{ms:03d} WARNING dataloader: sample {step} "
           "truncated to 512 tokens\n")
FAILURE = (
    "[rank1]: /pytorch/aten/src/ATen/native/cuda/Loss.cu:240: "
    "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n"
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "train.py", line 88, in <module>\n'
    "[rank1]:     loss.item()\n"
    "[rank1]: RuntimeError: CUDA error: device-side assert triggered\n"
    "[rank0]:[E501 12:59:59.000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.\n"
)


def write_log(path: Path, megabytes: int) -> None:
    """Write about `megabytes` MB of log, the failure in its last 1%."""
    target = megabytes * 10**6
    with open(path, "w") as f:
        step = 0
        while f.tell() < target * 0.99:
            lines = []
            for _ in range(1000):
                step += 1
                fields = {"r": step % 2, "m": step // 60000 % 60, "s": step // 1000 % 60,
                          "ms": step % 1000, "step": step, "loss": 1 / (1 + step)}
                lines.append((WARNING if step % 997 == 0 else PROGRESS).format(**fields))
            f.write("".join(lines))
        f.write(FAILURE)


def timed(command: list[str]) -> tuple[float, str]:
    """Wall time of a command and its output."""
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, out.stdout


def peak_rss_mb(path: Path) -> float:
    """Peak resident memory (MB) of a fresh process that explains `path`."""
    code = ("import resource, sys; from cudadiag.explain import explain_path; "
            "explain_path(sys.argv[1]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the log (default 100)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    args = parser.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        sys.exit("bench/explain.py needs grep for the side-by-side figure")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "slurm-1234.out"
        write_log(log, args.mb)
        size_mb = log.stat().st_size / 10**6
        explain = [sys.executable, "-m", "cudadiag.cli", "explain", "--json", str(log)]
        grep_times, explain_times = [], []
        verdict = ""
        for round_no in range(args.rounds):
            pair = [("grep", [grep, "-c", "error", str(log)]), ("explain", explain)]
            for name, command in (pair if round_no % 2 == 0 else reversed(pair)):
                seconds, out = timed(command)
                (grep_times if name == "grep" else explain_times).append(seconds)
                if name == "explain":
                    verdict = out
        rss = peak_rss_mb(log)
    grep_rate = size_mb / statistics.median(grep_times)
    explain_rate = size_mb / statistics.median(explain_times)
    print(f"log: {size_mb:.1f} MB, {args.rounds} rounds (medians, alternating order)")
    print(f"grep -c error     : {statistics.median(grep_times):.3f} s  {grep_rate:8.1f} MB/s")
    print(f"cudadiag explain  : {statistics.median(explain_times):.3f} s  "
          f"{explain_rate:8.1f} MB/s  (target >= {TARGET_MB_S:.0f} MB/s: "
          f"{'met' if explain_rate >= TARGET_MB_S else 'NOT met'})")
    print(f"ratio explain/grep: {explain_rate / grep_rate:.3f}")
    print(f"peak memory of an explain process: {rss:.0f} MB for a {size_mb:.0f} MB log")
    right = '"family": "device_assert"' in verdict and '"rank": 1' in verdict
    print("diagnosis: " + ("device_assert on rank 1 (right)" if right
                           else "WRONG: " + verdict[:200]))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
