"""Real-hardware check of what cudadiag.testing simulates. Needs an NVIDIA GPU.

Two parts, one JSON line per case:

- contract cases: every row of cudadiag.contracts.CONTRACTS (its `example`, then its backward
  pass when it has one, then a synchronising `.item()`), and a few extra cases (two
  violations in a row, index_put with accumulate, one_hot, a loss without reduction). Each
  runs in a fresh process on the GPU and on the simulated device; the line gives, for both,
  the assertion lines the device printed, where the error surfaced (forward / backward /
  sync), the exception's type, first line and family, whether the context stayed broken
  (sticky), and whether the two agree.
- notebook scenarios: each in a fresh ipykernel (nbclient), the live-kernel capture first,
  then `%cuda_isolate`: family, sticky, the operator named, where it was reported, the
  offending value, the device's own lines, seconds.
- the warm case (WARM_CASE): in a fresh ipykernel, an out-of-range index whose kernel is
  queued asynchronously, run by `%%blocking_launch --no-precheck` forked from the kernel's
  warm interpreter; it must be raised by the indexing op itself (blocking launches really
  in effect after the fork), not at the later `.item()`. Its line says `ok`; a failure makes
  the exit status 1. With --simulated it runs on the simulated device.

    python scripts/gpu_check.py              # everything: about 3-5 minutes on one GPU
    python scripts/gpu_check.py --dry-run    # list the cases, run nothing
    python scripts/gpu_check.py --simulated  # contract cases and warm case, simulated device
    python scripts/gpu_check.py --simulated --case take --case two_violations
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(SRC))

CHILD_TIMEOUT_S = 120
ASSERT_LINE = re.compile(r"(?P<file>[^\s:]+\.(?:cu|cuh)):(?P<line>\d+): (?P<kernel>.*?): "
                         r"block: \[[\d,]+\], thread: \[[\d,]+\] "
                         r"Assertion `(?P<assertion>.*)` failed\.")
LINES_KEPT = 3


@dataclass(frozen=True)
class Case:
    """A call that breaks an index contract, run on the GPU and on the simulated device."""

    name: str
    code: str
    """Statements that leave the result in `out`; tensors on device `dev`."""
    op: str | None = None
    """The contract row it comes from (None for an extra case)."""


EXTRA_CASES = (
    Case("two_violations",
         "w = torch.randn(5, 3, device=dev, requires_grad=True)\n"
         "features = F.embedding(torch.tensor([[1, 5], [2, 0]], device=dev), w).mean(1)\n"
         "out = F.cross_entropy(features, torch.tensor([0, 3], device=dev))  # 2nd violation"),
    Case("index_put_accumulate",
         "out = torch.zeros(4, device=dev).index_put_((torch.tensor([9], device=dev),), "
         "torch.ones(1, device=dev), accumulate=True)"),
    Case("one_hot_class_equals_num_classes",
         "out = F.one_hot(torch.tensor([1, 4], device=dev), 4).float()"),
    Case("cross_entropy_without_reduction",
         "out = F.cross_entropy(torch.randn(3, 4, device=dev, requires_grad=True), "
         "torch.tensor([0, 2, 4], device=dev), reduction='none')"),
)

PRELUDE = "%load_ext cudadiag\nimport torch, torch.nn.functional as F"

SCENARIOS = {
    "cross_entropy_target_equals_C": [
        "logits = torch.randn(3, 4, device='cuda')\n"
        "target = torch.tensor([0, 2, 4], device='cuda')\n"
        "loss = F.cross_entropy(logits, target)\n"
        "print(loss.item())",
    ],
    "embedding_index_in_last_incomplete_batch": [
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "ids = torch.arange(30) % 10\nids[27] = 10  # only the last batch (24..29) holds 10\n"
        "loader = DataLoader(TensorDataset(ids), batch_size=8)\n"
        "emb = torch.nn.Embedding(10, 4).cuda()\n"
        "for step, (batch,) in enumerate(loader):\n"
        "    out = emb(batch.cuda())\n"
        "    out.sum().item()",
    ],
    "oom_oversized_allocation": [
        "big = torch.empty(2**44, dtype=torch.uint8, device='cuda')",
    ],
    "model_on_cuda_input_on_cpu": [
        "model = torch.nn.Linear(8, 4).cuda()\nmodel(torch.randn(2, 8))",
    ],
    "item_after_assert_async_report": [
        "x = torch.randn(5, device='cuda')\n"
        "bad = x[torch.tensor([1, 9], device='cuda')]  # no error yet: the kernel is queued\n"
        "y = bad * 2",
        "print(y.sum().item())  # the assert is reported here",
    ],
    "backward_after_bad_target_in_a_training_step": [
        "model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(),\n"
        "                            torch.nn.Linear(16, 10)).cuda()\n"
        "ids = torch.randint(0, 50, (8, 2), device='cuda'); ids[5, 1] = 50\n"
        "labels = torch.randint(0, 10, (8,), device='cuda'); labels[3] = 10\n"
        "loss = F.cross_entropy(model(ids), labels)\n"
        "loss.backward()\n"
        "print(loss.item())",
    ],
}


WARM_CASE = "warm_fork_blocking_async_assert"
WARM_CELLS = [
    "from cudadiag.isolate import warm\n"
    "assert warm.wait_ready(300), 'the warm interpreter did not start'",
    "%%blocking_launch --no-precheck\n"
    "x = torch.randn(5, device=dev)\n"
    "bad = x[torch.tensor([1, 9], device=dev)]  # the faulty op\n"
    "y = bad * 2\n"
    "print(y.sum().item())  # where an asynchronous launch reports it",
]
DEVICE_CELL = {"cuda": "dev = 'cuda'",
               "simulated": "from cudadiag.testing import simulated_cuda\n"
                            "sim = simulated_cuda().start()\ndev = 'cpu'"}


def contract_cases() -> list[Case]:
    """One case per row of the contract table, then the extra cases."""
    from cudadiag.contracts import CONTRACTS

    rows = [Case(row.op, f"out = {row.example}", row.op) for row in CONTRACTS.values()]
    return rows + list(EXTRA_CASES)


def run_case_here(case: Case, device: str) -> dict:
    """Run `case` in this process on `device` ("cuda" or "simulated"); return what happened.
    Meant for a fresh process: a device-side assert leaves the context unusable."""
    import torch
    import torch.nn.functional as F

    dev = "cuda" if device == "cuda" else "cpu"
    if device == "simulated":
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    namespace = {"torch": torch, "F": F, "dev": dev}
    stage, raised = "forward", None
    try:
        exec(case.code, namespace)
        out = namespace["out"]
        stage = "backward"
        if out.requires_grad:
            out.sum().backward()
        stage = "sync"
        out.float().sum().item()
        stage = "none"
    except Exception as exc:  # what the device raised is the finding
        raised = exc
    return {
        "surfaced_at": stage,
        "exception": f"{type(raised).__module__}.{type(raised).__qualname__}" if raised else None,
        "message": (str(raised).strip().splitlines() or [""])[0] if raised else None,
        "family": _family(raised) if raised else None,
        "async_suffix": bool(raised) and "might be asynchronously reported" in str(raised),
        "sticky": _sticky(torch, dev),
    }


def _family(exc: BaseException) -> str:
    from cudadiag import classify

    return classify(exc).family


def _sticky(torch: object, dev: str) -> bool:
    try:
        (torch.ones(1, device=dev) + 1).item()
    except Exception:
        return True
    return False


def run_case_in_child(case: Case, device: str) -> dict:
    """Run `case` in a fresh interpreter; add the device's assertion lines (fds 1 and 2) and
    the seconds it took."""
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as tmp:
        result_file = Path(tmp) / "result.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
        env.pop("CUDA_LAUNCH_BLOCKING", None)
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", case.name, "--device", device,
                 "--result", str(result_file)],
                capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
        seconds = round(time.perf_counter() - started, 1)
        if not result_file.exists():
            return {"error": f"child exited {proc.returncode}", "stderr": proc.stderr[-2000:],
                    "seconds": seconds}
        result = json.loads(result_file.read_text())
    lines = [m.group(0) for m in ASSERT_LINE.finditer(proc.stdout + "\n" + proc.stderr)]
    result.update(assertions=sorted({_assertion_key(line) for line in lines}),
                  assertion_lines=lines[:LINES_KEPT], assertion_count=len(lines),
                  seconds=seconds)
    return result


def _assertion_key(line: str) -> str:
    """`Loss.cu:250 nll_loss_forward_reduce_cuda_kernel_2d: t >= 0 && t < n_classes` (no
    block or thread: those differ between launches)."""
    m = ASSERT_LINE.match(line)
    return (f"{Path(m.group('file')).name}:{m.group('line')} {m.group('kernel')}: "
            f"{m.group('assertion')}")


def agreement(gpu: dict, simulated: dict) -> dict:
    """Which observations of the simulated device match the hardware's."""
    return {key: gpu.get(key) == simulated.get(key)
            for key in ("surfaced_at", "family", "message", "async_suffix", "sticky",
                        "assertions")}


def check_contracts(cases: list[Case], devices: list[str], jobs: int) -> None:
    """Run every case on every device, `jobs` processes at a time; print one line each."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {(c.name, d): pool.submit(run_case_in_child, c, d)
                   for c in cases for d in devices}
        for case in cases:
            row = {"case": case.name, "op": case.op, "code": case.code}
            for device in devices:
                row[device] = futures[(case.name, device)].result()
            if len(devices) == 2:
                row["agrees"] = agreement(row["cuda"], row["simulated"])
            print(json.dumps(row), flush=True)


def run_scenario(name: str, cells: list[str]) -> list[dict]:
    """Run one notebook scenario in a fresh kernel; one row per incident it recorded."""
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    home = tempfile.mkdtemp(prefix=f"gpucheck-{name}-")
    os.environ["CUDADIAG_HOME"] = home
    nb = new_notebook(cells=[new_code_cell(c) for c in [PRELUDE, *cells, "%cuda_isolate"]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    started = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    seconds = time.perf_counter() - started
    from cudadiag.log.store import IncidentStore

    rows = []
    for incident in IncidentStore(home).load():
        d = incident.diagnosis
        at = incident.error.reported_at
        rows.append({
            "scenario": name,
            "path": incident.run.mode,
            "family": d.family,
            "sticky": d.sticky,
            "op": incident.op.name if incident.op else None,
            "precheck": incident.op.precheck if incident.op else None,
            "reported_at": at.location() + f": {at.source}" if at else None,
            "offending_value": d.details.get("value"),
            "assertion": d.details.get("assertion"),
            "device_lines": [ln for ln in incident.error.text.splitlines()
                             if "Assertion" in ln][:3],
            "message": incident.error.message,
            "seconds": round(seconds, 1),
        })
    if not rows:
        rows.append({"scenario": name, "path": "none", "family": None,
                     "message": "no incident recorded", "seconds": round(seconds, 1)})
    return rows


def run_warm_case(simulated: bool) -> dict:
    """Run WARM_CASE in a fresh kernel; return its row, `ok` when the run was forked from the
    warm interpreter, the child checked its blocking variables, and the indexing op raised."""
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    home = tempfile.mkdtemp(prefix="gpucheck-warm-")
    os.environ["CUDADIAG_HOME"] = home
    cells = [PRELUDE, DEVICE_CELL["simulated" if simulated else "cuda"], *WARM_CELLS]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    started = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True).execute()
    seconds = round(time.perf_counter() - started, 1)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    from cudadiag.log.store import IncidentStore

    isolated = [i for i in IncidentStore(home).load() if i.run.mode == "isolated"]
    at = isolated[-1].error.reported_at if isolated else None
    row = {
        "case": WARM_CASE,
        "device": "simulated" if simulated else "cuda",
        "warm": "warm start" in text,
        "blocking_checked": "checked in the child before CUDA initialised" in text,
        "op": isolated[-1].op.name if isolated and isolated[-1].op else None,
        "family": isolated[-1].diagnosis.family if isolated else None,
        "reported_at": at.source if at else None,
        "raised_at_the_faulty_op": bool(at and at.source.startswith("bad = x[")),
        "seconds": seconds,
    }
    row["ok"] = row["warm"] and row["blocking_checked"] and row["raised_at_the_faulty_op"]
    if not row["ok"]:
        row["output"] = text[-2000:]
    return row


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="list the cases, run nothing")
    parser.add_argument("--simulated", action="store_true",
                        help="run the contract cases and the warm case on the simulated "
                             "device only (no GPU)")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="only this contract case or scenario (repeatable)")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="processes at a time for the contract cases")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cuda", "simulated"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the check; return the exit status (1: the warm case failed; 2: no GPU, or an
    unknown case name)."""
    args = _arguments(argv)
    cases = contract_cases()
    if args.child:
        case = next(c for c in cases if c.name == args.child)
        Path(args.result).write_text(json.dumps(run_case_here(case, args.device)))
        return 0
    known = {c.name for c in cases} | set(SCENARIOS) | {WARM_CASE}
    unknown = sorted(set(args.case) - known)
    if unknown:
        print(f"gpu_check: unknown case {', '.join(unknown)}; --dry-run lists them",
              file=sys.stderr)
        return 2
    if args.case:
        cases = [c for c in cases if c.name in args.case]
    scenarios = {n: s for n, s in SCENARIOS.items() if not args.case or n in args.case}
    warm_case = not args.case or WARM_CASE in args.case
    if args.dry_run:
        for case in cases:
            print(json.dumps({"case": case.name, "op": case.op, "code": case.code}))
        for name in scenarios:
            print(json.dumps({"scenario": name}))
        if warm_case:
            print(json.dumps({"scenario": WARM_CASE, "cells": WARM_CELLS}))
        return 0
    if args.simulated:
        check_contracts(cases, ["simulated"], args.jobs)
        return _report_warm_case(simulated=True) if warm_case else 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run this on a machine with an NVIDIA GPU "
              "(--simulated runs the simulated side alone)", file=sys.stderr)
        return 2
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "cuda": torch.version.cuda}), flush=True)
    check_contracts(cases, ["cuda", "simulated"], args.jobs)
    for name, cells in scenarios.items():
        for row in run_scenario(name, cells):
            print(json.dumps(row), flush=True)
    return _report_warm_case(simulated=False) if warm_case else 0


def _report_warm_case(simulated: bool) -> int:
    row = run_warm_case(simulated)
    print(json.dumps(row), flush=True)
    return 0 if row["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
