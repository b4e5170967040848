"""`%load_ext cudadiag` after the failure: the incident names the cell that was running."""

from __future__ import annotations

from cudadiag import incidents
from scenarios import SETUP, run

TRAIN_STEP = (
    "def train_step(model, x, y):\n"
    "    loss = F.nll_loss(F.log_softmax(model(x), 1), y); return loss.item()"
)
TRAIN = (
    "model = torch.nn.Linear(4, 3); X = torch.randn(40, 4); Y = torch.randint(1, 4, (40,))\n"
    "hist = [train_step(model, X[k:k+8], Y[k:k+8]) for k in range(0, 40, 8)]"
)


def _fail_before_loading(shell):
    """Run the setup, a cell defining a function and a cell calling it that fails, with the
    extension unloaded; return (defining cell, failing cell)."""
    shell.extension_manager.unload_extension("cudadiag")
    run(shell, SETUP)
    _, defining = run(shell, TRAIN_STEP)
    result, failing = run(shell, TRAIN)
    assert result.error_in_exec is not None
    return defining, failing


def test_loading_late_names_the_cell_that_ran_not_the_one_defining_the_function(shell, capsys):
    defining, failing = _fail_before_loading(shell)
    run(shell, "%load_ext cudadiag")
    (incident,) = incidents()
    assert incident.run.ingested_late
    assert incident.run.cells == [failing]
    assert incident.run.sources[str(failing)] == TRAIN
    assert incident.error.reported_at.cell == defining
    capsys.readouterr()
    run(shell, "y = 2")
    assert f"unusable since In[{failing}]" in capsys.readouterr().err


def test_loading_late_plans_the_failing_cell_and_lists_it_under_its_number(shell, capsys):
    _, failing = _fail_before_loading(shell)
    run(shell, "%load_ext cudadiag")
    capsys.readouterr()
    run(shell, "%cuda_isolate --dry-run")
    plan = capsys.readouterr().out
    assert "plan: replay" in plan and f"In[{failing}]" in plan
    run(shell, f"%cudadiag incidents --cell {failing}")
    (incident,) = incidents()
    assert incident.id in capsys.readouterr().out
