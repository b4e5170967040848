"""Time `%cudadiag export` on a realistic notebook in a real kernel (nbclient): the method's
example (4 classes, one label 4) on the simulated device, a few unrelated cells, and a
training loop on unseeded random minibatches that fails a few steps after step 500 (when its
curriculum reaches the bad labels). Reports how long the
export kept the kernel busy, how long until the repro was written and verified, and what the
export said. Target: the whole export under 60 s, the kernel busy for well under a second.

    python bench/export_notebook.py
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

CELLS = [
    "%load_ext cudadiag",
    "import json, time\nimport torch, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()  # CPU tensors behave like a CUDA device",
    "config = {'lr': 0.1, 'batch': 32, 'steps': 5000}\nprint(json.dumps(config))",
    "features = torch.randn(16000, 8)\nlabels = torch.randint(0, 4, (16000,))  # classes 0..3\n"
    "labels[torch.arange(8000, 16000, 40)] = 4  # in the second half, some are not a class",
    "def describe(t):\n    return f'{tuple(t.shape)} {t.dtype}'\n\n"
    "print(describe(features), describe(labels))",
    "model = torch.nn.Linear(8, 4)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=config['lr'])",
    "history = []\nnotes = {'run': 'baseline', 'plots': []}",
    "for step in range(config['steps']):\n"
    "    seen = 8000 if step < 500 else 16000  # curriculum: the second half from step 500\n"
    "    ix = torch.randint(0, seen, (config['batch'],))  # unseeded minibatch\n"
    "    loss = F.cross_entropy(model(features[ix]), labels[ix])\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    history.append(loss.item())",
    "export_started = time.time()\n%cudadiag export repro.ipynb",
    "import threading\n"
    "for thread in threading.enumerate():\n"
    "    if thread.name == 'cudadiag export':\n"
    "        thread.join()\n"
    "print(f'failed at step {step}; export done after {time.time() - export_started:.1f} s')",
]


def main() -> None:
    folder = tempfile.mkdtemp(prefix="cudadiag-bench-export-")
    os.environ["CUDADIAG_HOME"] = os.path.join(folder, "home")
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": folder}}).execute()
    export_cell, wait_cell = nb.cells[-2], nb.cells[-1]
    print(f"cores: {os.cpu_count()}")
    print(f"export cell kept the kernel busy {_busy(export_cell):.2f} s")
    print(_text(wait_cell).strip())
    print(_result(nb, export_cell).strip())


def _busy(cell: nbformat.NotebookNode) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                  for k in ("iopub.status.busy", "iopub.status.idle"))
    return (end - start).total_seconds()


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _result(nb: nbformat.NotebookNode, export_cell: nbformat.NotebookNode) -> str:
    """The export's final message: its widget's text (background) or its printed output."""
    states = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json",
                                                {}).get("state", {})
    for model in states.values():
        value = model["state"].get("value")
        if isinstance(value, str) and "cudadiag repro" in value:
            return re.sub(r"<[^>]+>", "", value)
    return _text(export_cell)[-1500:]


if __name__ == "__main__":
    main()
