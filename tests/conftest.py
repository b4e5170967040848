"""Shared fixtures: an isolated incident log, a clean simulated device, a real IPython shell."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def cudadiag_home(tmp_path, monkeypatch):
    """Every test writes its incidents to its own log."""
    home = tmp_path / "cudadiag-home"
    monkeypatch.setenv("CUDADIAG_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def fresh_simulated_device(monkeypatch):
    """Each test starts with a healthy simulated device and non-blocking launches."""
    from cudadiag.testing import reset_simulated_device

    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    reset_simulated_device()
    yield
    reset_simulated_device()


@pytest.fixture(autouse=True)
def no_watches_from_other_tests():
    """watch() records live for the process, as they do for a kernel; tests start without."""
    from cudadiag.batch import watcher

    watcher._records.clear()


@pytest.fixture
def shell():
    """The process's IPython InteractiveShell with cudadiag loaded; unloaded and reset (a new
    history session) afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext cudadiag", store_history=True)
    yield ip
    ip.run_cell("_sim = globals().get('sim')\nif _sim is not None: _sim.stop()")
    ip.extension_manager.unload_extension("cudadiag")
    # a new history session too: the plan replays earlier cells that set process-wide state
    # (seeds, the simulated device), and a test's cells are no earlier cells of the next
    ip.reset(new_session=True)


@pytest.fixture(params=["cold", "warm"])
def launcher(request):
    """Each way an isolated run's process is made: a new interpreter, or a fork of the
    kernel's warm interpreter (started for the test, stopped after it)."""
    from cudadiag.isolate import warm
    from cudadiag.isolate.launcher import SubprocessLauncher

    if request.param == "cold":
        yield SubprocessLauncher()
        return
    warm.start()
    assert warm.wait_ready(180), "the kernel's warm interpreter did not start"
    yield warm.WarmLauncher()
    warm.stop()
