"""The kernel's warm interpreter: isolated runs fork from it, with the run's environment set
and checked in the child; when it cannot serve a run, a cold start said in one line; warm
imports of the installed modules the planned cells import; stopped at %unload_ext and when
its kernel ends (checked in /proc), one per kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import ModuleType

import pytest

from cudadiag.isolate import launcher as launchers
from cudadiag.isolate import warm
from cudadiag.isolate.cellfacts import unconditional_imports
from cudadiag.isolate.runner import run_isolated
from scenarios import run

READY_S = 180


def _server_pid() -> int:
    server = warm.current()
    assert server is not None and warm.wait_ready(READY_S), "no warm interpreter"
    return server.process.pid


def _gone(pid: int, within: float = 15.0) -> bool:
    """True once `pid` has no /proc entry (or is a zombie nobody waits for yet)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


@pytest.mark.slow
def test_blocking_launch_forks_from_the_warm_interpreter_with_blocking_in_effect(shell, capsys):
    server = _server_pid()
    run(shell, "%%blocking_launch\nimport os\n"
               "print('flag', os.environ.get('CUDA_LAUNCH_BLOCKING'), 'parent', os.getppid())")
    out = capsys.readouterr().out
    assert f"flag 1 parent {server}" in out
    assert "checked in the child before CUDA initialised; warm start" in out
    assert "cold start" not in out


@pytest.mark.slow
def test_a_no_blocking_run_has_no_blocking_variable_in_the_child(shell, capsys, monkeypatch):
    _server_pid()
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")  # the kernel's own setting does not leak
    run(shell, "%%blocking_launch --no-blocking\nimport os\n"
               "print('flag', os.environ.get('CUDA_LAUNCH_BLOCKING'))")
    out = capsys.readouterr().out
    assert "flag None" in out
    assert "no blocking variable in the child; warm start" in out


@pytest.mark.slow
def test_a_run_before_the_warm_interpreter_is_ready_is_a_cold_start_that_says_why(shell,
                                                                                    capsys):
    warm.stop()
    warm.start()  # importing torch for a second or more: not ready for the run below
    run(shell, "%%blocking_launch\nimport os\nprint('parent', os.getppid())")
    out = capsys.readouterr().out
    assert f"parent {os.getpid()}" in out  # a new interpreter, started by the kernel
    fallback = [line for line in out.splitlines() if line.startswith("cudadiag: cold start")]
    assert len(fallback) == 1
    assert fallback[0].startswith("cudadiag: cold start: the warm interpreter is still "
                                  "starting (")


@pytest.mark.slow
def test_a_dead_warm_interpreter_means_a_cold_start_and_a_new_one(shell, capsys):
    old = _server_pid()
    os.kill(old, signal.SIGKILL)
    warm.current().process.wait()
    run(shell, "%%blocking_launch\nx = 1")
    out = capsys.readouterr().out
    assert ("cudadiag: cold start: the warm interpreter died (killed by SIGKILL); "
            "restarting it") in out
    new = _server_pid()
    assert new != old
    run(shell, "%%blocking_launch\nimport os\nprint('parent', os.getppid())")
    assert f"parent {new}" in capsys.readouterr().out


@pytest.mark.slow
def test_without_a_safe_fork_every_run_is_cold_and_says_so(shell, capsys, monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    warm.stop()
    warm.start()
    assert warm.current() is None  # nothing started where fork is unsafe
    run(shell, "%%blocking_launch\nprint('ran')")
    out = capsys.readouterr().out
    assert "ran" in out
    assert ("cudadiag: cold start: warm starts need Linux (fork is missing or unsafe on "
            "darwin)") in out


@pytest.mark.slow
def test_cold_option_starts_a_new_interpreter_without_a_fallback_line(shell, capsys):
    _server_pid()
    run(shell, "%%blocking_launch --cold\nimport os\nprint('parent', os.getppid())")
    out = capsys.readouterr().out
    assert f"parent {os.getpid()}" in out
    assert "cold start (--cold)" in out and "cudadiag: cold start:" not in out


@pytest.mark.slow
def test_a_changed_start_up_variable_restarts_the_warm_interpreter(shell, capsys, monkeypatch):
    old = _server_pid()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run(shell, "import torch")
    run(shell, "%%blocking_launch\nx = 1")
    assert ("cudadiag: cold start: OMP_NUM_THREADS differs from the warm interpreter's, which "
            "is read at start-up; restarting it with the new value") in capsys.readouterr().out
    new = _server_pid()
    assert new != old
    run(shell, "%%blocking_launch\nimport os\n"
               "print('threads', torch.get_num_threads(), 'parent', os.getppid())")
    assert f"threads 1 parent {new}" in capsys.readouterr().out


@pytest.mark.slow
def test_cuda_initialised_in_the_warm_interpreter_refuses_the_fork(shell, capsys, monkeypatch,
                                                                     tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import torch\ntorch.cuda.is_initialized = lambda: True  # as after a CUDA call\n")
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    warm.stop()
    warm.start()
    _server_pid()
    run(shell, "%%blocking_launch\nx = 1")
    out = capsys.readouterr().out
    assert ("cudadiag: cold start: the warm interpreter refused the run (CUDA was initialised "
            "in the warm interpreter); restarting it") in out
    # the cold child has the same sitecustomize: its own check says blocking is not sure
    assert "NOT in effect: CUDA was initialised before the run's variables could act" in out


@pytest.mark.slow
def test_a_warm_import_that_initialises_cuda_is_refused_then_left_to_the_child(
        shell, capsys, monkeypatch, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(  # as if importing sqlite3 initialised CUDA
        "import sys, torch\n"
        "torch.cuda.is_initialized = lambda: 'sqlite3' in sys.modules\n")
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    warm.stop()
    warm.start()
    _server_pid()
    run(shell, "import sqlite3")
    run(shell, "%%blocking_launch\nprint(sqlite3.sqlite_version.count('.'))")
    assert ("cudadiag: cold start: the warm interpreter refused the run (importing sqlite3 "
            "initialised CUDA); restarting it") in capsys.readouterr().out
    server = _server_pid()
    run(shell, "%%blocking_launch\nimport os\n"
               "print('parent', os.getppid(), sqlite3.sqlite_version.count('.'))")
    out = capsys.readouterr().out
    assert f"parent {server} 2" in out
    assert "checked in the child before CUDA initialised" in out
    with open(f"/proc/{server}/maps") as f:
        assert "_sqlite3" not in f.read()  # the child imported it, not the server


@pytest.mark.slow
def test_an_installed_module_changed_on_disk_refuses_the_fork_and_restarts_the_server(
        shell, capsys, monkeypatch, tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "sitecustomize.py").write_text(  # site_dir is a site-packages folder
        "import site, sys\n"
        f"sys.path.append({str(site_dir)!r})\n"
        "_listed = site.getsitepackages\n"
        f"site.getsitepackages = lambda *a: [*_listed(*a), {str(site_dir)!r}]\n")
    module = site_dir / "upgraded.py"
    module.write_text("VERSION = 1\n")
    monkeypatch.setenv("PYTHONPATH", f"{site_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    warm.stop()
    warm.start()
    old = _server_pid()
    run(shell, "%%blocking_launch\nimport upgraded\nprint('version', upgraded.VERSION)")
    assert "version 1" in capsys.readouterr().out
    module.write_text("VERSION = 2\n")  # as `pip install -U` while the kernel runs
    os.utime(module, (time.time() + 5, time.time() + 5))
    run(shell, "%%blocking_launch\nimport upgraded\nprint('version', upgraded.VERSION)")
    out = capsys.readouterr().out
    assert ("cudadiag: cold start: the warm interpreter refused the run (installed module "
            "upgraded changed on disk since it was imported); restarting it") in out
    assert "version 2" in out
    new = _server_pid()
    assert new != old
    run(shell, "%%blocking_launch\nimport os, upgraded\n"
               "print('parent', os.getppid(), 'version', upgraded.VERSION)")
    assert f"parent {new} version 2" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.own_warm_interpreter  # asserts on what the server imported
def test_warm_imports_preload_installed_unconditional_imports_never_user_files(
        shell, capsys, monkeypatch, tmp_path, request):
    shadowed = {name: sys.modules.get(name) for name in ("colorsys", "helpers")}
    request.addfinalizer(lambda: _put_back_modules(shadowed))  # later tests import stdlib's
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # as in a Jupyter kernel: the notebook's folder imports
    (tmp_path / "colorsys.py").write_text("NAME = 'the user colorsys'\n")  # shadows stdlib
    (tmp_path / "helpers.py").write_text("NAME = 'user helpers'\n")
    server = _server_pid()
    run(shell, "import sqlite3\nimport colorsys\nimport helpers\nif len(helpers.NAME):\n"
               "    import syslog")
    run(shell, "%%blocking_launch\nprint(sqlite3.sqlite_version.count('.'), colorsys.NAME, "
               "helpers.NAME, syslog.LOG_ERR)")
    out = capsys.readouterr().out
    assert "2 the user colorsys user helpers 3" in out and "warm start" in out
    with open(f"/proc/{server}/maps") as f:
        maps = f.read()
    assert "_sqlite3" in maps  # imported in the server: the child had it for free
    assert "/syslog." not in maps  # imported under a condition: left to the child


def _put_back_modules(modules: dict[str, ModuleType | None]) -> None:
    """Undo the shell's imports of the user's files: the test process's `colorsys` is the
    user's after the test, and mpmath (torch.optim's import of sympy) needs the stdlib's."""
    for name, module in modules.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


@pytest.mark.slow
@pytest.mark.own_warm_interpreter  # asserts on what the server imported
def test_cold_option_does_no_warm_imports(shell, capsys):
    server = _server_pid()
    run(shell, "import sqlite3")
    run(shell, "%%blocking_launch --cold\nprint(sqlite3.sqlite_version.count('.'))")
    assert "2" in capsys.readouterr().out
    with open(f"/proc/{server}/maps") as f:
        assert "_sqlite3" not in f.read()


def test_unconditional_imports_are_the_top_level_absolute_ones():
    source = textwrap.dedent("""\
        %matplotlib inline
        import numpy as np, torch.nn
        from sklearn.model_selection import train_test_split
        from . import sibling
        try:
            import transformers
        except ImportError:
            pass
        if True:
            import pandas
        def f():
            import scipy
        import numpy
    """)
    assert unconditional_imports(source) == ["numpy", "torch.nn", "sklearn.model_selection"]
    assert unconditional_imports("import (") == []


@pytest.mark.slow
def test_runs_from_two_threads_fork_at_the_same_time(shell):
    server = _server_pid()
    results = []
    code = ("import os, time\nstart = time.time()\ntime.sleep(1.5)\n"
            "print(os.getppid(), start, time.time())")

    def one_run() -> None:
        results.append(run_isolated(code, launcher=warm.WarmLauncher(), stream=False,
                                    store=False))

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    (a_parent, a_start, a_end), (b_parent, b_start, b_end) = [
        result.stdout.split() for result in results]
    assert int(a_parent) == int(b_parent) == server
    assert float(a_start) < float(b_end) and float(b_start) < float(a_end)  # they overlapped


@pytest.mark.slow
def test_the_minimizer_forks_from_the_kernels_warm_interpreter(shell, monkeypatch):
    from cudadiag.repro.minimize import minimize

    _server_pid()
    started = []
    monkeypatch.setattr(launchers, "ForkServer",
                        lambda *a, **k: started.append(a) or pytest.fail("a new fork server"))
    monkeypatch.setattr(launchers.SubprocessLauncher, "start",
                        lambda *a, **k: pytest.fail("a cold start"))
    result = minimize({1: "import torch\nunused = 1", 2: "x = torch.ones(2)",
                       3: "x[torch.tensor([5])]"}, expected_family="index_out_of_bounds")
    assert result.cells == {1: "import torch", 2: "x = torch.ones(2)", 3: "x[torch.tensor([5])]"}
    assert started == []


@pytest.mark.slow
def test_unload_ext_stops_the_warm_interpreter_and_kills_its_runs(shell):
    server = _server_pid()
    errors = []

    def long_run() -> None:
        try:
            run_isolated("import time\ntime.sleep(60)", launcher=warm.WarmLauncher(),
                         stream=False, store=False)
        except OSError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=long_run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    children = []
    while not children and time.monotonic() < deadline:
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_child(p, server)]
        time.sleep(0.05)
    assert children, "the run did not start"
    shell.run_cell("%unload_ext cudadiag")
    assert _gone(server) and _gone(children[0])
    assert warm.current() is None
    thread.join(30)
    assert errors == ["the warm interpreter died during the run; the run was killed: run it "
                      "again"]


def _is_child(pid: str, parent: int) -> bool:
    try:
        return _parent_of(int(pid)) == parent
    except (FileNotFoundError, ProcessLookupError):
        return False


KERNEL = textwrap.dedent("""\
    import sys, time
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext cudadiag")
    from cudadiag.isolate import warm
    assert warm.wait_ready(180)
    print(warm.current().process.pid, flush=True)
    sys.stdin.readline()  # until told to exit
""")


@pytest.mark.slow
def test_each_kernel_has_its_own_warm_interpreter_which_ends_with_it(tmp_path):
    kernels = [subprocess.Popen([sys.executable, "-c", KERNEL], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=tmp_path)
               for _ in range(2)]
    try:
        servers = [int(kernel.stdout.readline()) for kernel in kernels]
        assert servers[0] != servers[1]
        assert [_parent_of(s) for s in servers] == [k.pid for k in kernels]
        kernels[0].communicate("exit\n", timeout=60)  # a kernel that exits
        kernels[1].send_signal(signal.SIGKILL)  # a kernel that is killed
        kernels[1].wait(60)
        assert _gone(servers[0]) and _gone(servers[1])
    finally:
        for kernel in kernels:
            kernel.kill()


@pytest.mark.slow
def test_cudadiag_run_stays_a_cold_process_beside_a_warm_interpreter(tmp_path, capsys):
    from cudadiag import cli

    warm.start()
    try:
        server = _server_pid()
        (tmp_path / "script.py").write_text("import os\nprint('parent', os.getppid())\n")
        code = cli.main(["run", str(tmp_path / "script.py")])
        out = capsys.readouterr().out
        assert code == 0 and f"parent {os.getpid()}" in out and f"parent {server}" not in out
    finally:
        warm.stop()


@pytest.mark.slow
def test_a_cold_fallback_runs_in_the_folder_the_run_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    result = run_isolated("import os\nprint(os.getcwd())", stream=False, store=False,
                          launcher=warm.WarmLauncher(cwd=str(tmp_path)))
    assert result.stdout.strip() == str(tmp_path) and tmp_path != os.getcwd()
    assert "cold start: warm starts need Linux" in result.start
