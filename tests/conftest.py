"""Shared fixtures: an isolated incident log, a clean simulated device, a real IPython shell,
the warm interpreter a file's tests share."""

from __future__ import annotations

import contextlib
import signal

import pytest


@pytest.fixture(scope="session", autouse=True)
def op_tracer_built():
    """The C++ op tracer built before the first test (about a minute of one core, once per
    machine and source): every test then traces as a user's diagnostic runs do once it is
    built, whichever order the tests run in (a build finishing in the background half-way
    through the suite would switch tracers between tests). Where it cannot be built (no
    compiler) the suite traces in Python throughout; tests/test_trace.py runs both."""
    from cudadiag import trace_native

    if trace_native.load() is None and trace_native.build_failure() is None:
        with contextlib.suppress(Exception):  # the reason is kept: build_failure()
            trace_native.build()


@pytest.fixture(autouse=True)
def cudadiag_home(tmp_path, monkeypatch):
    """Every test writes its incidents to its own log."""
    home = tmp_path / "cudadiag-home"
    monkeypatch.setenv("CUDADIAG_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def english_unless_asked(tmp_path, monkeypatch):
    """Every test writes in English unless it chooses a language: no locale, JupyterLab
    setting or earlier choice of the machine or another test leaks in (docs/languages.md)."""
    from cudadiag import i18n

    for name in ("CUDADIAG_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(tmp_path / "jupyterlab-settings"))
    i18n.choose(None)
    yield
    i18n.choose(None)


@pytest.fixture(autouse=True)
def fresh_simulated_device(monkeypatch):
    """Each test starts with a healthy simulated device and non-blocking launches."""
    from cudadiag.testing import reset_simulated_device

    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    reset_simulated_device()
    yield
    reset_simulated_device()


@pytest.fixture
def ctrl_c_as_in_a_terminal():
    """Popen's keywords for a child that a test stops with SIGINT: its SIGINT back to the
    default action, as a shell in a terminal starts it. Under a suite started in the
    background by a non-interactive shell (`cmd &`) SIGINT is inherited ignored, Python
    then installs no KeyboardInterrupt handler, and the test's Ctrl-C would do nothing."""
    return {"preexec_fn": _default_ctrl_c}


def _default_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def no_watches_from_other_tests():
    """watch() records live for the process, as they do for a kernel; tests start without."""
    from cudadiag.batch import watcher

    watcher._records.clear()


OWN_WARM_INTERPRETER = "own_warm_interpreter"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{OWN_WARM_INTERPRETER}: each test starts and stops its own warm "
        "interpreter (tests of its life and of what it imported), instead of sharing its "
        "file's")


class OwnWarmInterpreter:
    """A test's own warm interpreter: started by its load, stopped by its unload."""

    def lend(self) -> None:
        """Nothing to lend: the test's load starts its own."""

    def note(self) -> None:
        """Nothing to remember."""

    def take_back(self) -> None:
        """Nothing to keep: the test's unload stops its server."""

    def reload_extension(self, ip) -> None:
        """`%reload_ext cudadiag`: a new warm interpreter too."""
        ip.extension_manager.reload_extension("cudadiag")


class FileWarmInterpreter(OwnWarmInterpreter):
    """The kernel's warm interpreter kept from one test of a file to the next. Each test
    still loads and unloads the extension, and the unload leaves `warm` as it always does
    (no server, its reason said), but the server the test ran with is parked instead of
    stopped and lent to the next test before its load, which then finds it running and
    ready: a torch import saved per test, as a kernel keeps one server for all its cells.
    A test that stopped, killed or replaced its server (a restart, a refused fork) leaves
    nothing parked: the next test starts a new one."""

    def __init__(self) -> None:
        self.parked = None
        self.lent = None

    def lend(self) -> None:
        """Make the parked server the warm interpreter again (before the test's load)."""
        from cudadiag.isolate import warm

        parked, self.parked = self.parked, None
        if parked is None:
            return
        if parked.alive and warm.current() is None:
            warm._server = parked
        else:
            parked.close()

    def note(self) -> None:
        """Remember the server the test starts with (the lent one, or one just started)."""
        from cudadiag.isolate import warm

        self.lent = warm.current()

    def take_back(self) -> None:
        """Park the test's server, if it is still the one it started with and alive, so
        that the unload (or stop) that follows finds none to stop."""
        from cudadiag.isolate import warm

        server, lent, self.lent = warm.current(), self.lent, None
        if server is not None and server is lent and server.alive:
            warm._server = None
            self.parked = server

    def reload_extension(self, ip) -> None:
        """Unload and load the extension again within a test (what it captures re-pointed
        at the test's output), keeping the warm interpreter as a kernel's reload would
        not: none of the tests that do so is about the interpreter's restart."""
        self.take_back()
        ip.extension_manager.unload_extension("cudadiag")
        self.lend()
        ip.extension_manager.load_extension("cudadiag")
        self.note()

    def close(self) -> None:
        """Stop the parked server (after the file's last test)."""
        parked, self.parked = self.parked, None
        if parked is not None:
            parked.close()


@pytest.fixture(scope="module")
def file_warm_interpreter():
    """The warm interpreter the tests of one file share (see FileWarmInterpreter)."""
    shared = FileWarmInterpreter()
    yield shared
    shared.close()


@pytest.fixture
def warm_interpreter(request, file_warm_interpreter):
    """The file's shared warm interpreter, or the test's own for one marked
    own_warm_interpreter."""
    if request.node.get_closest_marker(OWN_WARM_INTERPRETER):
        return OwnWarmInterpreter()
    return file_warm_interpreter


@pytest.fixture
def shell(warm_interpreter, request):
    """The process's IPython InteractiveShell with cudadiag loaded, its warm interpreter the
    file's (see FileWarmInterpreter), ready before the test when it is marked `isolates`;
    unloaded and reset (a new history session) afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    from cudadiag.isolate import warm

    ip = InteractiveShell.instance()
    warm_interpreter.lend()
    ip.run_cell("%load_ext cudadiag", store_history=True)
    warm_interpreter.note()
    if request.node.get_closest_marker("isolates"):
        assert warm.wait_ready(180), "the kernel's warm interpreter did not start"
    yield ip
    ip.run_cell("_sim = globals().get('sim')\nif _sim is not None: _sim.stop()")
    warm_interpreter.take_back()
    ip.extension_manager.unload_extension("cudadiag")
    # a new history session too: the plan replays earlier cells that set process-wide state
    # (seeds, the simulated device), and a test's cells are no earlier cells of the next
    ip.reset(new_session=True)


@pytest.fixture(params=["cold", "warm"])
def launcher(request, warm_interpreter):
    """Each way an isolated run's process is made: a new interpreter, or a fork of the
    kernel's warm interpreter (the file's, see FileWarmInterpreter; stopped after the test
    when it is not kept)."""
    from cudadiag.isolate import warm
    from cudadiag.isolate.launcher import SubprocessLauncher

    if request.param == "cold":
        yield SubprocessLauncher()
        return
    warm_interpreter.lend()
    warm.start()
    assert warm.wait_ready(180), "the kernel's warm interpreter did not start"
    warm_interpreter.note()
    yield warm.WarmLauncher()
    warm_interpreter.take_back()
    warm.stop()
