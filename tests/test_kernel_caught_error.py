"""A CUDA error the cell's own try/except caught: the device printed its assertion during
that cell, so the incident (raised by a later cell) names it as the cell that failed."""

from __future__ import annotations

from cudadiag import incidents
from scenarios import SETUP, run

DATA = (
    "logits = torch.randn(4, 3)\n"
    "targets = [torch.tensor([0, 1, 2, 1]), torch.tensor([0, 3, 1, 2])]\n"
    "results = []"
)
LOOP = (
    "for j, t in enumerate(targets):\n"
    "    try: results.append(F.cross_entropy(logits, t).item())\n"
    "    except RuntimeError as e: print('caught:', str(e).splitlines()[0])"
)
NEXT = "total = torch.ones(3).sum().item()"


def _catch_then_fail(shell):
    """Run a loop whose try/except catches the device-side assert, then a cell that fails
    on the unusable context; return (catching cell, failing cell)."""
    # pytest re-points fds 1/2 between the setup and call phases: load again inside the test
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, SETUP)
    run(shell, DATA)
    result, catching = run(shell, LOOP)
    assert result.success
    result, failing = run(shell, NEXT)
    assert result.error_in_exec is not None
    return catching, failing


def test_the_incident_names_the_cell_whose_try_caught_the_device_assert(shell, capsys):
    catching, failing = _catch_then_fail(shell)
    assert "caught: CUDA error: device-side assert triggered" in capsys.readouterr().out
    (incident,) = incidents()
    assert incident.run.cells == [catching]
    assert incident.run.sources[str(catching)] == LOOP
    assert incident.error.reported_at.cell == failing
    assert incident.diagnosis.details["assertion"] == "t >= 0 && t < n_classes"
    run(shell, "y = 2")
    assert f"unusable since In[{catching}]" in capsys.readouterr().err


def test_cuda_isolate_plans_the_cell_that_caught_the_error(shell, capsys):
    catching, failing = _catch_then_fail(shell)
    capsys.readouterr()
    run(shell, "%cuda_isolate --dry-run")
    plan = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("plan:"))
    assert plan.endswith(f"In[{catching}]; ship nothing"), plan
    assert f"In[{failing}]" not in plan
