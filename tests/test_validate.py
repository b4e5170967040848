"""%cudadiag validate: a loop's cell re-run in a fresh process over the steps that matter,
with per-step outcomes, sample counts, guard rejections and swallowed exceptions (method
point 10)."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag.panel.widget import Panel
from cudadiag.steps import StepProfile, choose_steps, profile_of
from scenarios import WALK_SETUP, fail_fix_rerun

SETUP = ("import torch\nimport torch.nn.functional as F\n"
         "from torch.utils.data import DataLoader, TensorDataset\nimport cudadiag\n"
         "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
DATA = ("torch.manual_seed(0)\nlabels = torch.tensor([i % 4 for i in range(30)])\n"
        "labels[24:] = torch.tensor([0, 1, {bad}, 2, 3, 1])\n"
        "loader = DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8)\n"
        "model = torch.nn.Linear(8, 4)")
LOOP = ("for features, target in cudadiag.watch(loader, name='train'):\n"
        "    loss = F.cross_entropy(model(features), target)\n"
        "    print('loss', loss.item())")
GUARDED = ("done = 0\nfor features, target in cudadiag.watch(loader, name='train'):\n"
           "    try:\n        cudadiag.check_class_targets(target, 4)\n"
           "    except cudadiag.GuardError:\n        continue  # the batch is dropped\n"
           "    loss = F.cross_entropy(model(features), target)\n    done += len(target)")


def profile(step, size=8, length=None, low=0, high=3):
    return StepProfile(step, size, None, length, low, high)


def test_choice_names_why_each_step_matters():
    seen = [profile(0, length=12), profile(1, length=40, high=9), profile(2, length=5, low=-1),
            profile(3), profile(4), profile(5, size=3)]
    chosen = choose_steps(seen, 10, failing=4, slice_size=2, seed=1)
    assert chosen[4] == ["failing step"]
    assert chosen[3] == ["neighbour of the failing step"] and "neighbour of the failing step" \
        in chosen[5]
    assert chosen[9] == ["last step"]
    assert "longest sequence" in chosen[1] and "largest value" in chosen[1]
    assert "shortest sequence" in chosen[2] and "smallest value" in chosen[2]
    randoms = [s for s, why in chosen.items() if why == ["random (seed 1)"]]
    assert len(randoms) == 2 and randoms == [s for s, why in choose_steps(
        seen, 10, failing=4, slice_size=2, seed=1).items() if why == ["random (seed 1)"]]


def test_last_incomplete_step_is_named_so():
    seen = [profile(0), profile(1), profile(2, size=6)]
    assert choose_steps(seen, 3, None, slice_size=0) == {2: ["last step (incomplete)"]}


def test_profile_reads_integer_range_and_sequence_length_only():
    batch = {"input_ids": torch.tensor([[5, 7, 2], [1, 0, 9]]), "x": torch.randn(2, 3)}
    p = profile_of(4, batch, 2, [10, 11])
    assert (p.step, p.size, p.indices, p.length, p.low, p.high) == (4, 2, [10, 11], 3, 0, 9)


def test_validate_without_a_watch_says_what_to_do(shell):
    with pytest.raises(UsageError, match="wrap the loop's iterable"):
        shell.run_line_magic("cudadiag", "validate")


def run(shell, source):
    return shell.run_cell(source, store_history=True)


def test_a_loop_run_while_the_extension_was_unloaded_is_not_validated(shell):
    shell.run_line_magic("unload_ext", "cudadiag")
    run(shell, "import torch, cudadiag\n"
               "for x in cudadiag.watch(torch.arange(6).view(3, 2), name='unloaded'):\n"
               "    pass")
    shell.run_line_magic("load_ext", "cudadiag")
    with pytest.raises(UsageError, match=r"no watch\(\) has run in this kernel since"):
        shell.run_line_magic("cudadiag", "validate")


@pytest.mark.slow
def test_before_the_fix_validate_reports_the_failing_step(shell):
    run(shell, SETUP)
    run(shell, DATA.format(bad=4))
    run(shell, LOOP)  # In[4] fails at step 3, the last incomplete batch
    report = run(shell, "%cudadiag validate").result
    assert report.failing_step == 3 and report.failure == "device_assert at aten::nll_loss_forward"
    steps = {s.step: s for s in report.steps}
    assert steps[3].outcome == "failed" and steps[3].indices == list(range(24, 30))
    assert "failing step" in steps[3].why and "neighbour of the failing step" in steps[2].why
    assert report.processed == 24 and report.expected == 30
    panel = Panel(shell=shell)
    assert panel.tabs.titles[-1] == "Validate" and "fails at step 3" in \
        panel.tabs.children[-1].value
    assert str(report).splitlines()[1].strip().startswith(
        "fails at step 3: device_assert at aten::nll_loss_forward; 24 of 30 samples")


@pytest.mark.slow
def test_swallowed_guard_error_names_the_rejected_sample_and_the_count_differs(shell):
    run(shell, SETUP)
    run(shell, DATA.format(bad=4))
    run(shell, GUARDED)  # In[4] "passes": the bad batch is dropped silently
    assert shell.user_ns["done"] == 24
    report = run(shell, "%cudadiag validate 4").result
    assert report.failure is None
    assert (report.processed, report.expected) == (24, 30)
    assert report.rejected[0]["dataset_indices"] == [26] and report.rejected[0]["values"] == [4]
    assert [(s["type"], s["step"], s["line"]) for s in report.swallowed] == [
        ("GuardError", 3, 4)]
    assert {s.step: s.outcome for s in report.steps}[3] == "exception caught"
    assert "the cell ran, but 24 of 30 samples processed" in str(report)


@pytest.mark.slow
def test_after_the_fix_every_step_passes_and_the_counts_match(shell, capsys):
    run(shell, SETUP)
    run(shell, DATA.format(bad=3))
    run(shell, GUARDED)
    capsys.readouterr()
    report = run(shell, "%cudadiag validate --all").result
    assert "\r[" + "#" * 30 + "] 4/4 steps" in capsys.readouterr().out  # the progress bar
    assert report.every_step and [s.step for s in report.steps] == [0, 1, 2, 3]
    assert all(s.outcome == "ok" for s in report.steps)
    assert report.verdict == "every chosen step passes: 30 of 30 samples processed"
    assert not report.swallowed and not report.rejected


@pytest.mark.slow
def test_cpu_twin_validate_reports_the_failing_step(shell):
    run(shell, SETUP.replace("sim = simulated_cuda().start()", ""))  # plain CPU tensors
    run(shell, DATA.format(bad=4))
    run(shell, LOOP)
    report = run(shell, "%cudadiag validate").result
    assert report.failing_step == 3 and report.failure.startswith("index_out_of_bounds")
    assert (report.processed, report.expected) == (24, 30)


@pytest.mark.slow
def test_after_a_fix_in_the_same_kernel_validate_judges_the_re_run_cell(shell, capsys):
    failed, rerun = fail_fix_rerun(shell)  # the loop failed, the label was fixed, re-run
    capsys.readouterr()
    report = run(shell, f"%cudadiag validate {rerun} --all").result
    out = capsys.readouterr().out
    assert report.cell == rerun and report.failure is None
    assert report.verdict == "every chosen step passes: 30 of 30 samples processed"
    assert [(s.step, s.outcome, s.run) for s in report.steps] == [
        (0, "ok", 0), (1, "ok", 0), (2, "ok", 0), (3, "ok", 0)]
    assert f"plan: replay In[{failed - 2}], In[{failed - 1}], In[{failed + 1}], In[{rerun}]" \
        in out  # never the loop cell that failed before the fix
    assert (f"  not replayed: In[{failed}] failed in this session; In[{rerun}], its new "
            "version, stands for it") in out
    chosen = run(shell, f"%cudadiag validate {rerun}").result  # the steps that matter
    assert chosen.failure is None and chosen.processed == chosen.expected > 0
    assert str(chosen).splitlines()[1].strip() == (
        f"every chosen step passes: {chosen.expected} of {chosen.expected} samples processed")


LOGGED_DATA = ("torch.manual_seed(0)\nwith open('data.log', 'a') as log:\n"
               "    log.write('loaded\\n')\n"
               "loader = DataLoader(TensorDataset(torch.randn(30, 8), torch.arange(30) % 4), "
               "batch_size=8)\nmodel = torch.nn.Linear(8, 4)")
LOGGED_LOOP = ("with open('train.log', 'a') as log:\n"
               "    for features, target in cudadiag.watch(loader, name='train'):\n"
               "        loss = F.cross_entropy(model(features), target)\n"
               "        log.write('step\\n')")


@pytest.mark.slow
def test_validate_names_the_side_effects_and_repeats_earlier_ones_only_when_allowed(
        shell, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(shell, WALK_SETUP)
    data = len(shell.user_ns["In"])
    run(shell, LOGGED_DATA)
    loop = len(shell.user_ns["In"])
    run(shell, LOGGED_LOOP)
    assert (tmp_path / "train.log").read_text() == "step\n" * 4
    capsys.readouterr()

    result = run(shell, f"%cudadiag validate {loop} --all")
    assert isinstance(result.error_in_exec, UsageError)
    message = str(result.error_in_exec)
    assert message.startswith("not run: replaying would repeat what earlier cells did to this "
                              f"machine:\n  In[{data}] writes a file: open('data.log', 'a')")
    assert message.endswith(f"Add --allow-side-effects to replay In[{data}] anyway.")
    out = capsys.readouterr().out  # named before anything ran; nothing ran
    assert f"  side effect: In[{data}] writes a file: open('data.log', 'a')" in out
    assert (f"  side effect: In[{loop}] (the cell re-run) writes a file: "
            "open('train.log', 'a')") in out
    assert (tmp_path / "data.log").read_text() == "loaded\n"
    assert (tmp_path / "train.log").read_text() == "step\n" * 4

    report = run(shell, f"%cudadiag validate {loop} --all --allow-side-effects").result
    assert report.verdict == "every chosen step passes: 30 of 30 samples processed"
    assert (tmp_path / "data.log").read_text() == "loaded\n" * 2  # the validation, once
    assert (tmp_path / "train.log").read_text() == "step\n" * 8
