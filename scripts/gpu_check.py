"""Real-hardware check of what cudadiag.testing simulates. Needs an NVIDIA GPU.

Each scenario runs in a fresh ipykernel (nbclient): the live-kernel capture first, then
`%cuda_isolate` in the next cell. One JSON line per scenario and path: family, sticky, the
operator named, where it was reported, the offending value, the device's own lines (to keep
the simulator's assertion text in line with the hardware), seconds.

    python scripts/gpu_check.py            # about 2-4 minutes on one GPU
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

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
}


def run_scenario(name: str, cells: list[str]) -> list[dict]:
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    home = tempfile.mkdtemp(prefix=f"gpucheck-{name}-")
    os.environ["CUDADIAG_HOME"] = home
    nb = new_notebook(cells=[new_code_cell(c) for c in [PRELUDE, *cells, "%cuda_isolate"]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    started = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    seconds = time.perf_counter() - started
    from cudadiag.kernel.store import IncidentStore

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


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run this on a machine with an NVIDIA GPU",
              file=sys.stderr)
        return 2
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "cuda": torch.version.cuda}))
    for name, cells in SCENARIOS.items():
        for row in run_scenario(name, cells):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
