"""`cudadiag explain` of the logs training libraries print: the Hugging Face Trainer's tqdm
bar and its `{'loss': ...}` lines, Lightning's tqdm and rich bars. The first error is found
as in a plain script's log, without the bar's frame printed before it on the same line, and
the last progress before it is said."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudadiag.explain import explain_path, explain_text
from cudadiag.explain.view import render_explanation

LOGS = Path(__file__).parent / "data" / "framework-logs"
ASSERTION = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: "
             "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [")


def _explained(name: str) -> tuple[object, str]:
    explanation = explain_path(LOGS / name)
    return explanation, render_explanation(explanation, name)


def test_trainer_log_first_error_is_the_kernel_assertion_without_the_bar_before_it():
    explanation, text = _explained("trainer-device-assert.log")
    assert explanation.first.line == 4
    assert explanation.first.evidence.startswith(ASSERTION)
    assert explanation.diagnosis.family == "device_assert"
    assert f"first error (line 4):\n  {ASSERTION}" in text


def test_trainer_log_says_the_bar_and_the_last_logged_loss_before_the_error():
    explanation, text = _explained("trainer-device-assert.log")
    progress = explanation.first.progress
    assert (progress.done, progress.total) == (3, 16)
    assert progress.logged["loss"] == "1.101" and progress.logged["epoch"] == "0.375"
    assert ("  training had reached: bar at 3/16; last logged: loss 1.101, grad_norm 0.5482, "
            "learning_rate 4.375e-05, epoch 0.375") in text
    assert explanation.to_dict()["progress"]["logged"]["epoch"] == "0.375"


def test_trainer_cpu_log_finds_the_index_error_and_the_progress_before_it():
    explanation, text = _explained("trainer-cpu.log")
    assert explanation.first.evidence == "IndexError: Target 3 is out of bounds."
    assert "training had reached: bar at 3/16; last logged: loss 1.101" in text


def test_lightning_tqdm_log_names_the_epoch_and_the_bars_metrics():
    explanation, text = _explained("lightning-tqdm-device-assert.log")
    assert explanation.first.evidence.startswith(ASSERTION)
    progress = explanation.first.progress
    assert progress.stage == "Epoch 0" and (progress.done, progress.total) == (4, 8)
    assert progress.metrics == {"train_loss": "1.080"}
    assert "training had reached: Epoch 0, bar at 4/8, train_loss=1.080" in text
    later = [c.evidence for c in explanation.consequences]
    assert later and all("device-side assert triggered" in e for e in later)


def test_lightning_rich_bar_printed_after_the_error_still_says_how_far_it_got():
    explanation, text = _explained("lightning-rich-device-assert.log")
    assert explanation.first.evidence.startswith(ASSERTION)
    assert "training had reached: Epoch 0/1, bar at 4/8, train_loss=1.085" in text


def test_lightning_cpu_log_finds_the_index_error_after_the_bars_redraws():
    explanation, text = _explained("lightning-tqdm-cpu.log")
    assert explanation.first.evidence == "IndexError: Target 3 is out of bounds."
    assert explanation.diagnosis.family == "index_out_of_bounds"
    assert "Epoch 0, bar at 4/8" in text


def test_a_pasted_lightning_bar_without_a_total_is_cut_off_the_assertion():
    explanation, text = _explained("uzh-rpg-RVT-60.log")
    assert explanation.first.evidence.startswith("/opt/conda/conda-bld/")
    assert "training had reached: Epoch 3, bar at 67190, loss=2.15, v_num=m9eu" in text


def test_a_long_log_of_redraws_reads_the_progress_just_before_the_error():
    frames = "".join(f"\rEpoch 1:  {i % 100:2d}%|█         | {i}/9000 [00:01<00:09, "
                     f"9.1it/s, loss=0.{i % 10}]" for i in range(60_000))
    log = "Epoch 0 done\n" + frames + ASSERTION + "0,0,0] Assertion `t >= 0 && t < n_classes` " \
          "failed.\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert len(log) > 2**21
    explanation = explain_text(log)
    assert explanation.first.evidence.startswith(ASSERTION)
    progress = explanation.first.progress
    assert (progress.stage, progress.done, progress.metrics) == ("Epoch 1", 59_999,
                                                                 {"loss": "0.9"})


@pytest.mark.parametrize("line", [
    "| Name | Type | Params |",
    "Total params: 1.1 K",
    "x = {'loss': float('nan')}",
])
def test_lines_that_only_look_like_progress_say_nothing(line):
    explanation = explain_text(line + "\nIndexError: Target 3 is out of bounds.\n")
    assert explanation.first.progress is None
