"""Write an incident log with an earlier version's own code (see tests/data/README.md).

Run with PYTHONPATH pointing at that version's src, CUDADIAG_HOME at an empty folder and OUT
at a folder for the repro and the script: a kernel incident (a watch() batch and step, later
errors, an out-of-memory one among them), an isolated one (%cuda_isolate, with its operator
and precheck) exported to a repro (the `repro` record), a `cudadiag run` script incident.
"""

import os
import subprocess
import sys

from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance(colors="nocolor")
cells = [
    "%load_ext cudadiag",
    "import torch, torch.nn.functional as F\nimport cudadiag\n"
    "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()",
    "torch.manual_seed(0)\nmodel = torch.nn.Linear(8, 4)\n"
    "batches = [(torch.randn(3, 8), torch.tensor([0, 1, 2])),\n"
    "           (torch.randn(3, 8), torch.tensor([0, 2, 4]))]",
    "for step, (x, target) in enumerate(cudadiag.watch(batches, name='train')):\n"
    "    loss = F.cross_entropy(model(x), target)\n"
    "    print(step, loss.item())",
    "y = torch.ones(2) * 2",
    "%cuda_isolate 4",
]
for source in cells:
    shell.run_cell(source, store_history=True)
from cudadiag.kernel.store import IncidentStore  # noqa: E402

# the release's export reads its run files under the user's simulated device: stop it first
shell.run_cell("sim.stop()\nfrom cudadiag.testing import reset_simulated_device\n"
               "reset_simulated_device()", store_history=True)
isolated = [i for i in IncidentStore().load() if i.run.mode == "isolated"][-1]
shell.run_cell(f"%cudadiag export {isolated.id} {os.environ['OUT']}/repro.ipynb --max-trials 4",
               store_history=True)

script = os.path.join(os.environ["OUT"], "train.py")
with open(script, "w") as f:
    f.write("import torch\nfrom cudadiag.testing import simulated_cuda\n"
            "with simulated_cuda():\n"
            "    emb = torch.nn.Embedding(10, 4)\n"
            "    for i in range(3):\n"
            "        out = emb(torch.tensor([i, 5 * i]))\n"
            "        print(i, out.sum().item())\n")
subprocess.run([sys.executable, "-m", "cudadiag.cli", "run", script], check=False)

oom = InteractiveShell.instance()
oom.run_cell("with simulated_cuda(memory_budget='1 MiB'):\n    big = torch.empty(10**6)",
             store_history=True)
