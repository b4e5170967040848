"""Export options and interruptions: bad values are usage errors, Ctrl-C stops early with
one line, the verifying kernel's start-up noise stays out of the output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from IPython.core.error import UsageError

from cudadiag import incidents, run_isolated
from test_repro import history

BAD = [("--max-trials", "-5"), ("--max-trials", "0"), ("--max-trials", "many"),
       ("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "-1"), ("--timeout", "0"),
       ("--timeout", "soon")]


@pytest.mark.parametrize(("option", "value"), BAD)
def test_bad_values_are_usage_errors_in_the_magic(shell, option, value):
    with pytest.raises(UsageError, match=f"argument {option}"):
        shell.run_line_magic("cudadiag", f"export {option} {value}")


@pytest.mark.slow
@pytest.mark.parametrize(("option", "value"), BAD[::3])
def test_bad_values_exit_2_in_the_shell(option, value, tmp_path):
    done = subprocess.run([sys.executable, "-m", "cudadiag.cli", "export", "abc",
                           str(tmp_path / "x.ipynb"), option, value],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"argument {option}" in done.stderr


class _Export:
    """`cudadiag export` in a subprocess whose output is read as it comes."""

    def __init__(self, incident_id: str, path: str, **popen) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cudadiag.cli", "export", incident_id, path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
        self.out = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while chunk := os.read(self.process.stdout.fileno(), 4096):
            self.out += chunk

    def interrupt_when(self, text: str, delay: float = 0.0) -> None:
        deadline = time.monotonic() + 300
        while text.encode() not in self.out:
            assert time.monotonic() < deadline and self.process.poll() is None, self.out
            time.sleep(0.05)
        time.sleep(delay)
        self.process.send_signal(signal.SIGINT)

    def finish(self) -> tuple[int, str]:
        stderr = self.process.stderr.read().decode()
        code = self.process.wait(timeout=300)
        self.reader.join(timeout=10)
        return code, self.out.decode() + stderr


@pytest.fixture
def twenty_cells():
    numbered = sorted(history(False).items())
    run_isolated(numbered[-1][1], cells=numbered[:-1], target_cell=numbered[-1][0],
                 stream=False)
    (incident,) = incidents()
    return incident.id


@pytest.mark.slow
def test_ctrl_c_before_the_first_run_ends_says_stopped_early(twenty_cells, tmp_path,
                                                            cudadiag_home,
                                                            ctrl_c_as_in_a_terminal):
    out = tmp_path / "out"
    out.mkdir()
    export = _Export(twenty_cells, str(out / "repro.ipynb"), **ctrl_c_as_in_a_terminal)
    export.interrupt_when("minimizing incident", delay=0.3)  # the fork server is starting
    code, output = export.finish()
    assert code == 130
    assert "stopped early" in output and "nothing was written" in output
    assert "Traceback" not in output and "BrokenPipeError" not in output
    assert list(out.iterdir()) == []
    assert _processes_of(cudadiag_home) == []  # no fork server, no orphaned trial


def _processes_of(home) -> list[int]:
    """Processes still running with this test's incident log in their environment."""
    marker = f"CUDADIAG_HOME={home}".encode()
    deadline = time.monotonic() + 10
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(pid))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.slow
def test_ctrl_c_during_the_first_trials_keeps_the_best_so_far(twenty_cells, tmp_path,
                                                              ctrl_c_as_in_a_terminal):
    export = _Export(twenty_cells, str(tmp_path / "repro.ipynb"), **ctrl_c_as_in_a_terminal)
    export.interrupt_when("trial 3/")
    code, output = export.finish()
    assert "stopped early (interrupted): the best candidate so far was kept" in output, output
    assert "Traceback" not in output and "BrokenPipeError" not in output
    assert "reproduces: yes" in output and code == 0
    assert "without encryption" not in output  # the verifying kernel's start-up warning
    assert (tmp_path / "repro.ipynb").exists()
