"""%cuda_isolate, %%blocking_launch and run_isolated through a real IPython shell.

Each test with a shell waits for the kernel's warm interpreter (a torch import); its
isolated runs fork from it.
"""

from __future__ import annotations

import os

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag import incidents, run_isolated
from cudadiag.isolate.launcher import blocking_settings
from scenarios import MODEL, SETUP, run

pytestmark = [pytest.mark.slow, pytest.mark.isolates]


PLOT = "history = []\nlabel = 'unrelated plotting cell'"


def _isolated(found):
    return [i for i in found if i.run.mode == "isolated"]


def test_method_example_end_to_end_names_the_operator_value_and_position(shell, capsys):
    _, setup_cell = run(shell, SETUP)
    _, model_cell = run(shell, MODEL)
    run(shell, PLOT)
    result, item_cell = run(shell, "print('loss', loss.item())")
    assert "device-side assert" in str(result.error_in_exec)
    (kernel_incident,) = incidents()
    assert kernel_incident.error.reported_at.cell == item_cell
    before = {k: id(v) for k, v in shell.user_ns.items() if not k.startswith("_")}
    capsys.readouterr()

    run(shell, "%cuda_isolate")
    out = capsys.readouterr().out
    assert (f"plan: replay In[{setup_cell}], In[{model_cell}], In[{item_cell}]; ship nothing"
            in out)
    (isolated,) = _isolated(incidents())
    assert isolated.op.name == "aten::nll_loss_forward"
    assert isolated.op.precheck == ("aten::nll_loss_forward: target 4 at position 2 outside "
                                    "[0, 4) (ignore_index=-100)")
    assert isolated.diagnosis.details["value"] == 4
    assert isolated.diagnosis.details["position"] == [2]
    assert isolated.diagnosis.family == "device_assert" and isolated.run.simulated
    assert isolated.error.reported_at.cell == model_cell
    assert isolated.error.reported_at.source == "loss = F.cross_entropy(model(x), target)"
    assert isolated.run.blocking and isolated.run.env_vars["CUDA_LAUNCH_BLOCKING"] == "1"
    assert f"raised at In[{model_cell}], line 5" in out
    assert "operator: aten::nll_loss_forward(self=float32[3, 4]@cpu, target=int64[3]@cpu " \
           "values 0..4" in out
    # the kernel's namespace is untouched: the same objects, nothing brought back
    after = {k: id(v) for k, v in shell.user_ns.items() if not k.startswith("_")}
    assert after == before


def test_a_function_from_a_star_import_of_the_users_module_is_replayed_not_refused(
        shell, capsys, monkeypatch, tmp_path):
    # a notebook beside its helpers: `from helpers import *` binds what no cell shows
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "helpers", raising=False)
    (tmp_path / "helpers.py").write_text(
        "import torch.nn.functional as F\n\n__all__ = ['loss_of']\n\n\n"
        "def loss_of(model, x, target):\n    return F.cross_entropy(model(x), target)\n")
    _, setup_cell = run(shell, SETUP)
    _, star_cell = run(shell, "from helpers import *")
    _, model_cell = run(shell, MODEL.replace("F.cross_entropy(model(x), target)",
                                             "loss_of(model, x, target)"))
    _, item_cell = run(shell, "print('loss', loss.item())")
    capsys.readouterr()
    run(shell, "%cuda_isolate")
    out = capsys.readouterr().out
    assert (f"plan: replay In[{setup_cell}], In[{star_cell}], In[{model_cell}], "
            f"In[{item_cell}]; ship nothing") in out
    assert "reproduced: same failure (device_assert)" in out
    (isolated,) = _isolated(incidents())
    assert isolated.op.name == "aten::nll_loss_forward"
    assert isolated.diagnosis.details["value"] == 4


def test_cpu_twin_gives_index_out_of_bounds_at_the_same_op(shell):
    run(shell, "import torch, torch.nn.functional as F")
    _, model_cell = run(shell, MODEL)
    assert incidents()[0].diagnosis.family == "index_out_of_bounds"
    run(shell, f"%cuda_isolate {model_cell}")
    (isolated,) = _isolated(incidents())
    assert isolated.diagnosis.family == "index_out_of_bounds"
    assert isolated.op.name == "aten::nll_loss_forward"
    assert "On the CPU this kernel raises: Target 4 is out of bounds." in isolated.error.text


def test_no_precheck_lets_the_kernel_raise_its_own_error(shell):
    run(shell, "import torch, torch.nn.functional as F")
    _, model_cell = run(shell, MODEL)
    run(shell, f"%cuda_isolate {model_cell} --no-precheck")
    (isolated,) = _isolated(incidents())
    assert isolated.op.precheck is None and isolated.op.name == "aten::nll_loss_forward"
    assert isolated.error.message == "Target 4 is out of bounds."


UNSEEDED = (
    "import torch, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()\n"
    "logits = torch.zeros(1, 40)\n"
    "for step in range(2000):\n"
    "    print('step', step)\n"
    "    target = torch.randint(0, 41, (1,))  # class 40 does not exist\n"
    "    F.cross_entropy(logits, target).item()"
)


def test_an_unseeded_random_batch_fails_at_the_same_iteration_in_the_child(shell, capsys):
    run(shell, UNSEEDED)
    failing_step = shell.user_ns["step"]
    capsys.readouterr()
    run(shell, "%cuda_isolate")
    out = capsys.readouterr().out
    child_steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert child_steps[-1] == f"step {failing_step}"


def test_blocking_launch_cell_magic_runs_the_body_isolated(shell, capsys):
    import random

    run(shell, "import torch")
    rng_before = (torch.get_rng_state(), random.getstate())
    run(shell, "%%blocking_launch\nimport torch.nn.functional as F\n"
               "F.embedding(torch.tensor([1, 7]), torch.randn(5, 3))")
    assert torch.equal(torch.get_rng_state(), rng_before[0])
    assert random.getstate() == rng_before[1]
    (isolated,) = _isolated(incidents())
    assert isolated.op.precheck == "aten::embedding: indices 7 at position 1 outside [0, 5)"
    assert "operator: aten::embedding" in capsys.readouterr().out


def test_a_run_that_succeeds_says_it_finished_without_error(shell, capsys):
    run(shell, "%%blocking_launch --no-blocking\nprint('fine', 1 + 1)")
    out = capsys.readouterr().out
    assert "fine 2" in out
    assert "the isolated run finished without error (blocking launches off" in out
    assert incidents() == []


def test_dry_run_prints_the_plan_only(shell, capsys):
    _, imports = run(shell, "import torch")
    _, cell = run(shell, "y = torch.ones(2)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {cell} --dry-run")
    out = capsys.readouterr().out
    assert out.strip() == f"plan: replay In[{imports}], In[{cell}]; ship nothing"
    assert incidents() == []


@pytest.mark.parametrize("line", ["%cuda_isolate --bogus", "%cuda_isolate 1 --timeout x",
                                  "%cuda_isolate 99999", "%cuda_isolate 1 --env NOEQUALS",
                                  "%cuda_isolate"])
def test_bad_options_give_a_usage_message_and_run_nothing(shell, line):
    run(shell, "x = 1")
    result, _ = run(shell, line)
    assert isinstance(result.error_in_exec, UsageError)
    assert incidents() == []


def test_abort_timeout_and_flood_leave_the_kernel_alive(shell, capsys):
    run(shell, "%%blocking_launch\nimport os\nos.abort()")
    (aborted,) = _isolated(incidents())
    assert aborted.run.signal == "SIGABRT" and aborted.error.type == "ProcessDied(SIGABRT)"
    capsys.readouterr()

    run(shell, "%%blocking_launch --timeout 2\nwhile True:\n    pass")
    out = capsys.readouterr().out
    assert "exceeded the timeout of 2 s; its whole process group was killed" in out

    run(shell, "%%blocking_launch\nimport sys\nfor _ in range(50):\n"
               "    sys.stdout.write('x' * 2**20)")
    captured = capsys.readouterr()
    assert len(captured.out) < 2 * 2**20
    assert "more bytes of output from the isolated run were not shown" in captured.err
    result, _ = run(shell, "alive = 1 + 1")
    assert result.success and shell.user_ns["alive"] == 2


def test_run_isolated_api(capsys, launcher):
    result = run_isolated("import os, sys\nprint(os.environ['CUDA_LAUNCH_BLOCKING'], "
                          "os.environ['EXTRA'])\nraise ValueError('boom')",
                          env={"EXTRA": "yes"}, cells=["a = 1"], store=False,
                          launcher=launcher)
    assert result.returncode == 1 and result.stdout.strip() == "1 yes"
    assert result.incident.error.type == "ValueError" and result.wall_s > 0
    assert result.incident.error.reported_at.cell == 2
    assert incidents() == []
    with pytest.raises(ValueError, match="timeout must be a positive"):
        run_isolated("x = 1", timeout=0)


def test_rocm_gets_the_hip_variables_never_the_nvidia_one_alone(monkeypatch, launcher):
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    settings = blocking_settings(True)
    assert settings.backend == "rocm"
    assert settings.env == {"HIP_LAUNCH_BLOCKING": "1", "AMD_SERIALIZE_KERNEL": "3"}
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    result = run_isolated("import os\nprint(sorted(k for k in os.environ if k in "
                          "('CUDA_LAUNCH_BLOCKING', 'HIP_LAUNCH_BLOCKING', "
                          "'AMD_SERIALIZE_KERNEL')))", store=False, blocking=False,
                          launcher=launcher)
    assert result.stdout.strip() == "[]"
    assert os.environ["CUDA_LAUNCH_BLOCKING"] == "1"


def test_cells_mixing_magics_and_python_are_replayed_without_the_magics(shell, capsys):
    _, cell = run(shell, "%load_ext cudadiag\n%xmode Minimal\nimport torch")
    capsys.readouterr()
    run(shell, "%%blocking_launch\ntorch.ones(2)[torch.tensor([3])]")
    out = capsys.readouterr().out
    assert f"skipped (magics and shell escapes): In[{cell}]: %xmode Minimal" in out
    (isolated,) = _isolated(incidents())
    assert isolated.op.precheck == "aten::index: indices 3 at position 0 outside [-2, 2)"


def test_a_timed_statement_is_replayed_as_the_statement(shell, capsys):
    run(shell, "%load_ext cudadiag\nimport torch")
    _, defines = run(shell, "idx = torch.tensor([0, 2, 9])")
    _, timed = run(shell, "%time r = torch.zeros(4).index_select(0, idx).sum().item()")
    capsys.readouterr()
    run(shell, "%cuda_isolate")
    out = capsys.readouterr().out
    assert f"In[{defines}], In[{timed}]" in out and "skipped" not in out
    (isolated,) = _isolated(incidents())
    assert isolated.op.precheck == "aten::index_select: index 9 at position 2 outside [0, 4)"


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, not yet reaped) is not alive."""
    try:
        os.kill(pid, 0)
        # a zombie still answers kill(0): look at its state
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):  # gone, or reaped in between
        return False


GRANDCHILD = ("import subprocess, sys\n"
              "p = subprocess.Popen(['sleep', '60'])\n"
              "print('grandchild', p.pid, flush=True)\n"
              "p.wait()")


def test_timeout_kills_the_whole_process_group(launcher):
    # cold: room for torch's import
    result = run_isolated(GRANDCHILD, timeout=8, store=False, launcher=launcher)
    grandchild = int(result.stdout.split()[1])
    assert result.timed_out and result.incident is None
    assert not _alive(grandchild) and not _alive(result.pid)


def test_an_interrupt_kills_the_whole_process_group_and_says_so(launcher):
    import _thread
    import threading

    threading.Timer(8.0, _thread.interrupt_main).start()  # room for torch's import
    result = run_isolated(GRANDCHILD, store=False, launcher=launcher)
    grandchild = int(result.stdout.split()[1])
    assert result.interrupted
    assert result.message == "cudadiag: interrupted; the isolated run's process group was killed"
    assert not _alive(grandchild) and not _alive(result.pid)


def test_os_exit_without_an_exception_is_an_incident(capsys, launcher):
    result = run_isolated("import os, sys\nsys.stderr.write('CUDA error: an illegal memory "
                          "access was encountered\\n')\nsys.stderr.flush()\nos._exit(3)",
                          store=False, launcher=launcher)
    assert result.returncode == 3
    assert result.incident.error.type == "ProcessDied(3)"
    assert result.incident.diagnosis.family == "illegal_memory"
    assert result.incident.error.message == ("CUDA error: an illegal memory access was "
                                             "encountered")


def test_device_lines_of_the_child_reach_the_isolated_incident(shell):
    run(shell, SETUP)
    _, model_cell = run(shell, MODEL)
    run(shell, f"%cuda_isolate {model_cell} --no-precheck")
    (isolated,) = _isolated(incidents())
    # the simulated kernel ran and printed its assertion to the child's fd 2
    assert isolated.diagnosis.details["assertion"] == "t >= 0 && t < n_classes"
    assert "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d" in isolated.error.text
    assert isolated.error.reported_at.source == "loss = F.cross_entropy(model(x), target)"
    assert "might be asynchronously reported" not in isolated.error.text  # blocking
