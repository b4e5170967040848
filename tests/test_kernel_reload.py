"""Reloading the extension keeps what it knows of the kernel: the CUDA context stays unusable
after `%reload_ext cudadiag` or `%unload_ext` + `%load_ext`."""

from __future__ import annotations

import pytest

from cudadiag import incidents
from scenarios import fail_with_device_assert, run

RELOADS = {
    "reload_ext": ["%reload_ext cudadiag"],
    "unload_then_load": ["%unload_ext cudadiag", "%load_ext cudadiag"],
}


def _failed_then_reloaded(shell, capsys, reload: list[str]) -> int:
    """The cell where the method's worked example failed, after `reload` ran; output so far read."""
    cell = fail_with_device_assert(shell)
    for line in reload:
        run(shell, line)
    capsys.readouterr()
    return cell


@pytest.mark.parametrize("reload", RELOADS.values(), ids=RELOADS.keys())
def test_the_reminder_survives_reloading_the_extension(shell, capsys, reload):
    cell = _failed_then_reloaded(shell, capsys, reload)
    result, _ = run(shell, "y = 2")
    assert result.success
    assert f"has been unusable since In[{cell}]" in capsys.readouterr().err


@pytest.mark.parametrize("reload", RELOADS.values(), ids=RELOADS.keys())
def test_cuda_isolate_finds_the_kernels_incident_after_a_reload(shell, capsys, reload):
    cell = _failed_then_reloaded(shell, capsys, reload)
    result, _ = run(shell, "%cuda_isolate --dry-run")
    assert result.success
    out = capsys.readouterr().out
    assert "no incident in this kernel yet" not in out
    assert "plan: replay" in out and f"In[{cell}]" in out


def test_errors_after_a_reload_are_consequences_of_the_first_incident(shell):
    cell = fail_with_device_assert(shell)
    run(shell, "%reload_ext cudadiag")
    _, later = run(shell, "z = torch.ones(2) + 1")
    (incident,) = incidents()
    assert incident.run.cells == [cell]
    assert [x.cell for x in incident.error.later] == [later]


def test_a_new_history_session_starts_without_the_old_incident(shell, capsys):
    fail_with_device_assert(shell)
    run(shell, "sim.stop()")  # the reset forgets `sim`: the fixture could not stop it
    shell.extension_manager.unload_extension("cudadiag")
    shell.reset(new_session=True)
    shell.extension_manager.load_extension("cudadiag")
    capsys.readouterr()
    run(shell, "y = 2")
    assert "unusable" not in capsys.readouterr().err
