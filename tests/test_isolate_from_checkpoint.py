"""%cuda_isolate --from-checkpoint: load the trained state instead of replaying the training."""

from __future__ import annotations

import pytest
import torch

from cudadiag.isolate.plan import make_plan
from scenarios import SETUP, run

HISTORY = {
    1: "import torch, torch.nn.functional as F",
    2: "torch.manual_seed(0)\nmodel = torch.nn.Linear(8, 4)\n"
       "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(3, 8)",
    3: "torch.manual_seed(1)\nfor step in range(1000):\n    loss = model(x).pow(2).mean()\n"
       "    loss.backward(); opt.step(); opt.zero_grad()",
    4: "loss = F.cross_entropy(model(x), torch.tensor([0, 2, 4]))\nprint(loss.item(), start)",
}
TRAIN = (
    "torch.manual_seed(1)\n"
    "for step in range(3):\n"
    "    loss = model(x).pow(2).mean()\n"
    "    loss.backward(); opt.step(); opt.zero_grad()\n"
    "    checkpoint.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'step': step},"
    " f'ckpts/step-{step}.pt', step=step)\n"
    "print('weights', round(model.weight.sum().item(), 4))"
)
FAILING = (
    "print('weights', round(model.weight.sum().item(), 4), 'from step', start)\n"
    "loss = F.cross_entropy(model(x), torch.tensor([0, 2, 4]))\n"
    "print(loss.item())"
)


def _namespace():
    model = torch.nn.Linear(8, 4)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1),
            "x": torch.randn(3, 8), "torch": torch}


def test_the_training_cell_is_replaced_by_the_restored_state():
    history = {**HISTORY, 4: HISTORY[4].replace(", start", "")}
    plain = make_plan(history, 4, _namespace(), ship="none")
    plan = make_plan(history, 4, _namespace(), ship="none", restore=["model", "opt"])
    assert plain.replay == [1, 2, 3, 4]
    assert plan.replay == [1, 2, 4] and plan.replaced == [3]
    assert "restored from the checkpoint instead of replaying In[3]: model, opt" \
           in plan.describe()


def test_a_restored_plain_value_needs_no_cell():
    plan = make_plan(HISTORY, 4, _namespace(), ship="none",
                     restore=["model", "opt", "start"])
    assert plan.replay == [1, 2, 4]


def test_a_training_cell_that_binds_what_the_target_reads_is_still_replayed():
    history = {**HISTORY, 3: HISTORY[3] + "\nscale = 2",
               4: "print(model(x).sum() * scale)"}
    plan = make_plan(history, 4, _namespace(), ship="none", restore=["model"])
    assert 3 in plan.replay and plan.replaced == []


@pytest.mark.slow
def test_cuda_isolate_restores_the_checkpoint_and_reproduces(shell, tmp_path, monkeypatch,
                                                             capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpts").mkdir()
    run(shell, SETUP + "\nfrom cudadiag import checkpoint")
    run(shell, "torch.manual_seed(0)\nmodel = torch.nn.Linear(8, 4)\n"
               "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(3, 8)")
    run(shell, TRAIN)
    trained = capsys.readouterr().out.strip().splitlines()[-1]
    run(shell, "start = 0")
    failed, failing_cell = run(shell, FAILING)
    assert failed.error_in_exec is not None
    capsys.readouterr()

    isolated, _ = run(shell, "%cuda_isolate --from-checkpoint latest --restore "
                             "model=ckpt['model'] --restore opt=ckpt['opt'] "
                             "--restore \"start = ckpt['step'] + 1\"")
    out = capsys.readouterr().out
    assert isolated.error_in_exec is None

    assert "checkpoint: " in out and "step-2.pt (step 2" in out and "trusted" in out
    assert (f"restored from the checkpoint instead of replaying In[{failing_cell - 2}]: "
            "model, opt, start") in out
    assert f"{trained} from step 3" in out  # the child's model holds the trained weights
    assert "reproduced: same failure (device_assert)" in out


def test_from_checkpoint_refuses_an_untrusted_checkpoint(shell, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpts").mkdir()
    run(shell, "import torch\nfrom cudadiag import checkpoint\nmodel = torch.nn.Linear(2, 2)\n"
               "checkpoint.save({'model': model.state_dict()}, 'ckpts/a.pt', step=1)")
    (tmp_path / "ckpts" / "a.pt").write_bytes(b"changed")
    _, cell = run(shell, "y = model(torch.ones(2))")
    result, _ = run(shell, f"%cuda_isolate {cell} --from-checkpoint ckpts/a.pt "
                           "--restore model=ckpt['model']")
    assert "ckpts/a.pt cannot be trusted: hash mismatch" in str(result.error_in_exec)
    result, _ = run(shell, f"%cuda_isolate {cell} --from-checkpoint latest")
    assert "--from-checkpoint and --restore go together" in str(result.error_in_exec)
    result, _ = run(shell, f"%cuda_isolate {cell} --from-checkpoint latest "
                           "--restore model=ckpt[")
    assert "--restore model=ckpt[: '[' was never closed" in str(result.error_in_exec)
