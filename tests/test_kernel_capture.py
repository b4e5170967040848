"""Live-kernel capture through a real IPython InteractiveShell and the simulated device."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cudadiag import incidents
from cudadiag.capture.shell_state import capture_for
from scenarios import fail_with_device_assert, run, unwrapped


def test_load_registers_callbacks_and_unload_removes_them(shell):
    capture = capture_for(shell)
    assert capture.post_run_cell in shell.events.callbacks["post_run_cell"]
    assert capture.pre_run_cell in shell.events.callbacks["pre_run_cell"]
    shell.extension_manager.unload_extension("cudadiag")
    assert capture.post_run_cell not in shell.events.callbacks["post_run_cell"]
    assert capture.pre_run_cell not in shell.events.callbacks["pre_run_cell"]
    shell.extension_manager.load_extension("cudadiag")


def test_device_assert_in_a_cell_becomes_the_incident(shell, capsys):
    cell = fail_with_device_assert(shell)
    (incident,) = incidents()
    assert incident.diagnosis.family == "device_assert"
    assert incident.diagnosis.sticky and incident.diagnosis.asynchronous
    assert incident.run.mode == "kernel" and incident.run.simulated
    assert incident.run.cells == [cell]
    assert incident.error.reported_at.cell == cell
    assert incident.error.reported_at.source == "print('loss', loss.item())"
    assert incident.env.torch == torch.__version__
    err = capsys.readouterr().err
    assert f"cudadiag [{incident.id}]" in err
    assert "noticed (not necessarily the cause) at" in unwrapped(err)
    assert "restart the kernel" in err


def test_later_errors_are_consequences_not_new_incidents(shell):
    cell = fail_with_device_assert(shell)
    _, second = run(shell, "y = torch.ones(2) + 1")
    _, third = run(shell, "undefined_name")
    (incident,) = incidents()
    assert [(x.cell, x.probable_consequence) for x in incident.error.later] == [
        (second, True), (third, False)]
    assert incident.error.later[0].family == "device_assert"
    assert incident.run.cells == [cell]


def test_every_cell_after_a_sticky_error_is_warned_and_still_runs(shell, capsys):
    cell = fail_with_device_assert(shell)
    capsys.readouterr()
    result, _ = run(shell, "plain = 41 + 1")
    assert result.success and shell.user_ns["plain"] == 42
    err = capsys.readouterr().err
    assert f"has been unusable since In[{cell}]" in err
    assert "a restart fixes no bad target or index" in err


def test_after_a_non_sticky_error_the_next_error_is_a_new_incident(shell):
    run(shell, "import torch\nfrom cudadiag.testing import simulated_cuda")
    run(shell, "with simulated_cuda(memory_budget='1 MiB'):\n    big = torch.empty(10**6)")
    run(shell, "raise RuntimeError('Expected all tensors to be on the same device, but found "
               "at least two devices, cuda:0 and cpu!')")
    assert [i.diagnosis.family for i in incidents()] == ["oom", "device_mismatch"]
    assert not incidents()[0].diagnosis.sticky


def test_errors_unrelated_to_pytorch_are_not_incidents(shell):
    run(shell, "{}['missing']")
    run(shell, "1/0")
    assert incidents() == []


def test_loading_after_a_failure_ingests_that_failure(shell):
    shell.extension_manager.unload_extension("cudadiag")
    run(shell, "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    assert incidents() == []
    shell.extension_manager.load_extension("cudadiag")
    (incident,) = incidents()
    assert incident.diagnosis.family == "illegal_memory"
    assert incident.run.ingested_late
    assert incident.run.cells and incident.error.reported_at.cell == incident.run.cells[0]


def test_rng_states_are_recorded_at_the_start_of_each_cell(shell):
    run(shell, "import torch, random\ntorch.manual_seed(0)\nrandom.seed(1)")
    _, cell = run(shell, "a = torch.rand(3)\nr = random.random()")
    states = capture_for(shell).rng_state_before(cell)
    torch.set_rng_state(states["torch"])
    assert torch.equal(torch.rand(3), shell.user_ns["a"])
    import random

    random.setstate(states["random"])
    assert random.random() == shell.user_ns["r"]


def test_incidents_and_show_magics(shell, capsys):
    fail_with_device_assert(shell)
    (incident,) = incidents()
    capsys.readouterr()
    run(shell, "%cudadiag incidents")
    out = capsys.readouterr().out
    assert incident.id in out and "device_assert" in out and "[simulated]" in out
    run(shell, "%cudadiag incidents --family oom")
    assert "no incident matches --family oom (1 in the log)" in capsys.readouterr().out
    run(shell, f"%cudadiag show {incident.id[:6]}")
    out = capsys.readouterr().out
    assert "RESTART REQUIRED" in out and "Kernel > Restart Kernel" in out
    assert "Check first" in out and "Do not conclude" in out


@pytest.mark.parametrize("line", ["%cudadiag", "%cudadiag frobnicate", "%cudadiag show nope"])
def test_bad_magic_usage_is_a_usage_error(shell, line):
    from IPython.core.error import UsageError

    result, _ = run(shell, line)
    assert isinstance(result.error_in_exec, UsageError)


def test_unload_stops_the_warnings(shell, capsys):
    fail_with_device_assert(shell)
    shell.extension_manager.unload_extension("cudadiag")
    capsys.readouterr()
    run(shell, "z = 1")
    assert "unusable" not in capsys.readouterr().err
    shell.extension_manager.load_extension("cudadiag")


def test_device_lines_written_to_the_stream_reach_the_incident(shell):
    """A kernel's printf goes to the process's fd, never into the exception: the cell writes
    the only assertion line there is (no simulated device prints one of its own)."""
    # pytest re-points fds 1/2 between the setup and call phases: load again inside the test.
    shell.extension_manager.reload_extension("cudadiag")
    line = ("/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:367: operator(): "
            "block: [5,0,0], thread: [7,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size"
            "` failed.")
    run(shell, f"import os\nos.write(2, ({line!r} + '\\n').encode())\n"
               "raise RuntimeError('CUDA error: device-side assert triggered')")
    (incident,) = incidents()
    assert incident.diagnosis.details["assertion"] == "idx_dim >= 0 && idx_dim < index_size"
    assert incident.diagnosis.details["thread"] == "7,0,0"
    assert incident.error.text.startswith(line)


def test_a_simulated_error_at_item_shows_no_torch_wrapper_frames(shell):
    """Like a real CUDA error raised from C++: the traceback ends at the user's line."""
    fail_with_device_assert(shell)
    (incident,) = incidents()
    files = [f.file for f in incident.error.traceback]
    assert not any("torch" in f for f in files), files


def test_an_error_raised_from_the_cuda_error_is_diagnosed_where_the_cuda_error_arose(
        shell, capsys):
    # the user's wrapper raises its own error from the CUDA error: the first error, and the
    # line it surfaced at, are the CUDA error's; the traceback under the cell is theirs
    run(shell, "import torch, torch.nn.functional as F\n"
               "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    cell = run(shell, "def step(logits, target):\n"
                      "    loss = F.cross_entropy(logits, target)\n"
                      "    return loss.item()\n")[1]
    run(shell, "try:\n"
               "    step(torch.randn(3, 4, device='cuda'), torch.tensor([0, 2, 4]).cuda())\n"
               "except RuntimeError as e:\n"
               "    raise ValueError('training step failed') from e")
    (incident,) = incidents()
    assert incident.diagnosis.family == "device_assert"
    assert incident.error.type == "cudadiag.testing.SimulatedAcceleratorError"
    assert incident.error.message == "CUDA error: device-side assert triggered"
    at = incident.error.reported_at
    assert (at.cell, at.line, at.function, at.source) == (cell, 3, "step", "return loss.item()")
    assert [f.function for f in incident.error.traceback if f.user] == ["<module>", "step"]
    assert not any("cudadiag" in f.file for f in incident.error.traceback)
    shown = capsys.readouterr()
    assert (f"noticed (not necessarily the cause) at In[{cell}], line 3 in step: "
            "return loss.item()") in unwrapped(shown.err)
    assert "ValueError\x1b[39m: training step failed" in shown.out  # the traceback: theirs


@pytest.mark.slow
def test_loading_the_extension_imports_no_torch():
    # %load_ext is the first cell of a notebook: it must not pay torch's import (seconds)
    code = ("import sys\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().run_line_magic('load_ext', 'cudadiag')\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.slow
def test_loading_the_extension_leaves_compare_validate_and_fix_check_unloaded():
    # %load_ext registers %cuda_compare; what it runs is loaded on its first use
    heavy = ["cudadiag.comparison.run", "cudadiag.isolate.cellfacts", "cudadiag.validate.run",
             "cudadiag.fixcheck.run", "cudadiag.ui.results"]
    code = ("import sys\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().run_line_magic('load_ext', 'cudadiag')\n"
            f"print([m for m in {heavy!r} if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
