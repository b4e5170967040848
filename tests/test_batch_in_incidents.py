"""The batch in incidents: a DataLoader whose last, incomplete batch holds a bad label."""

from __future__ import annotations

import pytest

from cudadiag import incidents
from scenarios import run

LOADER = (
    "import torch, torch.nn.functional as F, cudadiag\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "labels = torch.tensor([i % 4 for i in range(30)])\n"
    "labels[24:] = torch.tensor([0, 1, 4, 2, 3, 1])  # only the last batch holds 4\n"
    "loader = DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8,\n"
    "                    drop_last=False)\n"
    "model = torch.nn.Linear(8, 4)"
)
TRAIN = (
    "for features, target in cudadiag.watch(loader, name='train'):\n"
    "    loss = F.cross_entropy(model(features), target)\n"
    "    loss.item()"
)



def _check_step_and_batch(incident):
    assert incident.step.iteration == 3 and incident.step.last_completed == 2
    assert incident.step.last_incomplete is True and incident.step.loader == "train"
    assert incident.batch.indices == [24, 25, 26, 27, 28, 29]
    target = incident.batch.tensor("batch[1]")
    assert target.max == 4 and target.shape == [6]


@pytest.mark.parametrize("simulated", [True, False], ids=["simulated_cuda", "cpu_twin"])
def test_kernel_incident_names_step_batch_and_indices(shell, simulated):
    if simulated:
        run(shell, "from cudadiag.testing import simulated_cuda\n"
                   "sim = simulated_cuda().start()")
    run(shell, LOADER)
    run(shell, TRAIN)
    (incident,) = incidents()
    assert incident.diagnosis.family == ("device_assert" if simulated else "index_out_of_bounds")
    _check_step_and_batch(incident)
    from cudadiag.ui.render import render_text

    text = render_text(incident)
    assert "step 3, last completed step 2 (train)" in text
    assert "flags: last incomplete batch" in text


@pytest.mark.parametrize("loop_end", ["pass", "break"], ids=["exhausted", "abandoned"])
def test_a_finished_watch_is_not_attached(shell, loop_end):
    run(shell, LOADER)
    run(shell, f"for features, target in cudadiag.watch(loader):\n    {loop_end}")
    run(shell, "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    (incident,) = incidents()
    assert incident.step is None and incident.batch is None


@pytest.mark.slow
def test_cuda_isolate_batch_last_replays_only_that_batch(shell, capsys):
    run(shell, "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, LOADER)
    _, train_cell = run(shell, TRAIN.replace("    loss.item()",
                                             "    print('ran step with', len(target))\n"
                                             "    loss.item()"))
    capsys.readouterr()
    run(shell, "%cuda_isolate --batch last")
    out = capsys.readouterr().out
    assert "replaying step 3 of watch 'train' only" in out
    assert "ran step with" not in out  # the precheck stops the only step before the print
    isolated = [i for i in incidents() if i.run.mode == "isolated"]
    (incident,) = isolated
    assert incident.run.batch_replay == 3
    assert incident.step.iteration == 3
    assert incident.batch.replayed == "only step 3 was replayed"
    assert incident.op.precheck.startswith("aten::nll_loss_forward: target 4 at position 2")
    assert incident.error.reported_at.cell == train_cell


@pytest.mark.slow
def test_batch_option_without_a_watch_is_a_usage_error(shell):
    from IPython.core.error import UsageError

    run(shell, "import torch")
    _, cell = run(shell, "y = torch.ones(1)")
    result, _ = run(shell, f"%cuda_isolate {cell} --batch last")
    assert isinstance(result.error_in_exec, UsageError)
    assert "no watch() has recorded a batch" in str(result.error_in_exec)
