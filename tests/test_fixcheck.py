"""%cuda_compare --before ID: the recorded failing case, old code against the current version
of the cell; "failed before, passes now" only when the outputs are finite (method point 9)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from cudadiag.comparison.run import Row
from cudadiag.fixcheck.run import PASSES_NOW, FixCheck
from cudadiag.testing import reset_simulated_device
from scenarios import WALK_SETUP, fail_fix_rerun

SETUP = ("import torch\nimport torch.nn.functional as F\n"
         "from torch.utils.data import DataLoader, TensorDataset\nimport cudadiag\n"
         "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
DATA = ("labels = torch.tensor([i % 4 for i in range(30)])\n"
        "labels[24:] = torch.tensor([0, 1, {bad}, 2, 3, 1])\n"
        "loader = DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8, "
        "shuffle=True)  # unseeded\nmodel = torch.nn.Linear(8, 4)")
LOOP = ("for features, target in cudadiag.watch(loader, name='train'):\n"
        "    loss = F.cross_entropy(model({x}), target)\n    print('loss', loss.item())")


def failed():
    return Row("reference", "", "failed", family="device_assert", op="aten::nll_loss_forward")


def check(before, after, outputs=()):
    return FixCheck("abc", before, after, 4, 9, 3, list(outputs))


def test_passes_now_only_when_old_fails_new_passes_and_outputs_are_finite():
    ok = Row("reference", "", "ok")
    finite = {"path": "out['loss']", "nan": 0, "inf": 0}
    assert check(failed(), ok, [finite]).verdict == PASSES_NOW
    nan = check(failed(), ok, [{"path": "out['loss']", "nan": 1, "inf": 0}])
    assert not nan.passed and "outputs are not finite: out['loss']" in nan.verdict
    assert check(failed(), failed()).verdict.startswith(
        "still fails: device_assert at aten::nll_loss_forward")
    assert "no longer fails with the old code" in check(ok, ok, [finite]).verdict


def run(shell, source):
    return shell.run_cell(source, store_history=True)


def restart(shell):
    """What a kernel restart does to the test's shell: a new history, a healthy device."""
    run(shell, "sim.stop()")
    shell.reset(new_session=True)
    reset_simulated_device()


@pytest.mark.slow
def test_fixed_data_after_a_restart_failed_before_passes_now(shell):
    import cudadiag

    run(shell, SETUP)
    run(shell, DATA.format(bad=4))
    run(shell, LOOP.format(x="features"))  # In[4] fails
    run(shell, "%cuda_isolate")
    isolated = [i for i in cudadiag.incidents() if i.run.mode == "isolated"][-1]
    restart(shell)
    run(shell, SETUP)
    run(shell, DATA.format(bad=3))  # the fix: the label 4 was a 3
    run(shell, LOOP.format(x="features"))
    found = run(shell, f"%cuda_compare --before {isolated.id}").result
    assert found.verdict == PASSES_NOW and found.passed
    assert found.step == isolated.step.iteration
    before, now = found.notes  # the same samples at that step: the RNG states were carried
    assert before.split("held")[1] == now.split("held")[1]
    assert {o["path"] for o in found.outputs} >= {"out['loss']", "out['target']"}
    assert "failed before, passes now" in str(found)


@pytest.mark.slow
def test_unfixed_cell_still_fails_and_the_kernel_incident_finds_its_isolated_rerun(shell):
    import cudadiag

    run(shell, SETUP)
    run(shell, DATA.format(bad=4))
    run(shell, LOOP.format(x="features"))
    run(shell, "%cuda_isolate")
    kernel = [i for i in cudadiag.incidents() if i.run.mode == "kernel"][-1]
    restart(shell)
    run(shell, SETUP)
    run(shell, DATA.format(bad=4))
    out = run(shell, f"%%cuda_compare --before {kernel.id}\n" + LOOP.format(x="features * 2"))
    found = out.result
    assert not found.passed
    assert found.verdict.startswith("still fails: device_assert at aten::nll_loss_forward")


def test_unknown_incident_is_a_usage_error(shell):
    with pytest.raises(UsageError, match="no incident"):
        shell.run_line_magic("cuda_compare", "--before 0123456789ab")


@pytest.mark.slow
def test_fixed_data_in_the_same_kernel_failed_before_passes_now(shell, capsys):
    import cudadiag

    failed, rerun = fail_fix_rerun(shell)  # no restart: the fix and the re-run follow
    (kernel,) = cudadiag.incidents()
    capsys.readouterr()
    found = run(shell, f"%cuda_compare --before {kernel.id}").result
    out = capsys.readouterr().out
    assert (found.old_cell, found.new_cell) == (failed, rerun)
    assert found.before.failure.startswith("index_out_of_bounds")
    assert found.verdict == PASSES_NOW and found.after.ok
    assert f"new code: plan: replay In[{failed - 2}], In[{failed - 1}], In[{failed + 1}], " \
           f"In[{rerun}]; ship nothing" in out
    assert "failed before, passes now" in str(found)


@pytest.mark.slow
def test_a_fix_check_of_a_cell_that_writes_runs_only_with_allow_side_effects(
        shell, tmp_path, monkeypatch):
    import cudadiag

    monkeypatch.chdir(tmp_path)
    cell = ("with open('loss.log', 'a') as log:\n    log.write('loss\\n')\n"
            "loss = F.cross_entropy(torch.zeros(3, 4), torch.tensor([0, 2, {last}]))")
    run(shell, WALK_SETUP)
    old = len(shell.user_ns["In"])
    run(shell, cell.format(last=4))  # fails: a target 4 among 4 classes
    new = len(shell.user_ns["In"])
    run(shell, cell.format(last=3))
    (incident,) = cudadiag.incidents()
    assert (tmp_path / "loss.log").read_text() == "loss\n" * 2

    result = run(shell, f"%cuda_compare --before {incident.id}")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == (
        "not run: the failing case would run twice (the old code, then the new code), each "
        "time doing again what it does to this machine:\n"
        f"  In[{old}] writes a file: open('loss.log', 'a')\n"
        f"  In[{new}] writes a file: open('loss.log', 'a')\n"
        "Add --allow-side-effects to run the failing case twice (the old code, then the new "
        "code) anyway.")
    assert (tmp_path / "loss.log").read_text() == "loss\n" * 2  # nothing ran

    found = run(shell, f"%cuda_compare --before {incident.id} --allow-side-effects").result
    assert found.verdict == PASSES_NOW
    assert (tmp_path / "loss.log").read_text() == "loss\n" * 4
