"""The diagnosis and the advice of the method's worked example in Japanese (issue 28): the
summary of a class-4 cross-entropy failure (4 output columns, targets [0, 2, 4]) on the
simulated device, its first checks, a guard's and a precheck's messages; PyTorch's own
words stay as they are, English output is unchanged, and a record filed in English shows in
Japanese when read back in another process."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import GuardError, check_class_targets, i18n, incidents, knowledge
from cudadiag.classification import STICKY_TAIL, sticky_summary
from cudadiag.diagnose import incident_from_exception
from cudadiag.incident import RunInfo
from cudadiag.trace import OpTracer
from read_back import read_back_in_japanese
from scenarios import fail_with_device_assert
from untranslated import english_left

ASSERTION = "t >= 0 && t < n_classes"
DEVICE_LINE = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: "
               "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] "
               f"Assertion `{ASSERTION}` failed.")
PYTORCH_MESSAGE = "CUDA error: device-side assert triggered"
FAILED_HERE = ("nll_loss_forward_reduce_cuda_kernel_2d で `t >= 0 && t < n_classes` が"
               "失敗しました（Loss.cu:250）")
STICKY = " — CUDA コンテキストは使えなくなっています。プロセスを再起動してください"
CLASS_TARGETS = (
    "クラスのターゲットは [0, C) の範囲内か、ignore_index と等しくなければなりません（C は出力の"
    "幅、logits.shape[1]）。C と等しいターゲットには 2 通りの読み方があります。1..C で番号付け"
    "されたラベルか、モデルが想定していないクラスです。1 つのバッチではなくデータセット全体で、"
    "最小値と最大値、0 が現れるか、異なるラベルの数をクラス名と比べれば区別できます。")
FIX_THE_MAPPING = (
    "モデルではなく、ラベルを作る箇所でマッピングを修正してください。クラス名との全単射を確認し"
    "（cudadiag.check_label_mapping(label_to_index, class_names)）、失敗したバッチを、プロジェクト"
    "と一緒に保持するケースとして残してください（cudadiag.keep_case(batch, 'bad_label', "
    "reason=...)）。")
IGNORE_INDEX = ("パディングとラベルのないターゲットは、損失関数の ignore_index（既定値 −100）と"
                "等しくしてください。−1 や 0 ではいけません。")
GUARD_ADVICE = (
    "ラベルのエンコーディングを確認してください。0..3 ではなく 1..4 のエンコーディングか、"
    "予期しない追加のクラスです（データセット全体で、最小値、最大値、0 が現れるか、異なる値の数を"
    "確認します）。ラベルを作る箇所でマッピングを修正し（cudadiag.check_label_mapping）、エラーを"
    "消すために出力層を広げたり、至る所で 1 を引いたりしないでください")


def device_assert_title() -> str:
    """The family's title in the reader's language (its words are another part's)."""
    return i18n.localize(knowledge.FAMILIES["device_assert"].title)


def test_the_class_4_example_in_a_notebook_reads_in_japanese(shell):
    """The kernel hook's incident: the summary quotes PyTorch's message as it is."""
    fail_with_device_assert(shell)
    (incident,) = incidents()
    with i18n.using("ja"):
        summary = i18n.localize(incident.diagnosis.summary)
        title = device_assert_title()
    assert summary == f"{title}：device-side assert triggered{STICKY}"
    assert english_left(summary, verbatim=("device-side assert triggered",)) == []
    assert incident.error.message == PYTORCH_MESSAGE


def test_the_same_summary_is_unchanged_in_english(shell):
    fail_with_device_assert(shell)
    (incident,) = incidents()
    assert incident.diagnosis.summary == (
        "Device-side assertion: device-side assert triggered — the CUDA context is unusable: "
        "restart the process")
    assert i18n.localize(incident.diagnosis.summary) == incident.diagnosis.summary
    assert sticky_summary("a summary") == "a summary" + STICKY_TAIL  # what readers remove


def test_the_kernels_assertion_and_the_class_target_checks_read_in_japanese():
    """With the assertion line the kernel printed (what a Jupyter kernel reads from fd 2):
    the failed condition is quoted as it is, and the checks of the class targets come
    first."""
    incident = incident_from_exception(RuntimeError(PYTORCH_MESSAGE), RunInfo(mode="kernel"),
                                       device_lines=DEVICE_LINE)
    with i18n.using("ja"):
        summary = i18n.localize(incident.diagnosis.summary)
        checks = i18n.localize_all(incident.diagnosis.first_checks)
        title = device_assert_title()
    assert summary == f"{title}：{FAILED_HERE}{STICKY}"
    assert checks[:3] == [CLASS_TARGETS, FIX_THE_MAPPING, IGNORE_INDEX]
    assert english_left("\n".join([summary, *checks[:3]])) == []


def test_a_kept_summary_and_its_checks_show_in_japanese_when_read_back(tmp_path):
    """Filed in English; read back from its JSON in another process whose language is
    Japanese."""
    incident = incident_from_exception(RuntimeError(PYTORCH_MESSAGE), RunInfo(mode="kernel"),
                                       device_lines=DEVICE_LINE)
    assert incident.diagnosis.summary.endswith("restart the process")
    title, summary, without_tail, checks = read_back_in_japanese(
        incident, tmp_path, "i18n.localize(knowledge.FAMILIES['device_assert'].title)",
        "i18n.localize(d.summary)", "i18n.localize(d.summary.removesuffix(STICKY_TAIL))",
        "i18n.localize_all(d.first_checks)")
    assert summary == f"{title}：{FAILED_HERE}{STICKY}"
    assert without_tail == f"{title}：{FAILED_HERE}"  # the summary a reader shows beside its
    # own restart line (ui/render.py removes STICKY_TAIL from the English)
    assert CLASS_TARGETS in checks and FIX_THE_MAPPING in checks


def test_a_guard_says_in_japanese_that_class_4_is_out_of_range():
    with i18n.using("ja"), pytest.raises(GuardError) as raised:
        check_class_targets(torch.tensor([0, 2, 4]), 4)
    said = str(raised.value)
    assert said == ("target: [0, 4) の範囲外の値が 1 個あります（ignore_index=-100）：位置 2 の 4。"
                    + GUARD_ADVICE)
    assert english_left(said) == []
    assert raised.value.values == [4] and raised.value.positions == [2]


def test_the_guards_english_is_unchanged():
    with pytest.raises(GuardError) as raised:
        check_class_targets(torch.tensor([0, 2, 4]), 4)
    assert str(raised.value) == (
        "target: 1 value(s) outside [0, 4) (ignore_index=-100): 4 at position 2. Check the "
        "label encoding: a 1..4 encoding instead of 0..3, or an unexpected extra class (over "
        "the whole dataset: min, max, whether 0 occurs, how many distinct values); fix the "
        "mapping where the labels are made (cudadiag.check_label_mapping), and do not widen "
        "the output layer or subtract 1 everywhere to make this pass")


def test_a_precheck_violation_is_kept_in_english_and_shown_in_japanese():
    with pytest.raises(IndexError) as raised, OpTracer():
        F.cross_entropy(torch.zeros(3, 4), torch.tensor([0, 2, 4]))
    violation = raised.value.violation
    english = violation.message()
    assert english == ("aten::nll_loss_forward: target 4 at position 2 outside [0, 4) "
                       "(ignore_index=-100)")
    with i18n.using("ja"):
        shown = i18n.localize(english)
    assert shown == ("aten::nll_loss_forward: 位置 2 の target 4 が [0, 4) の範囲外です"
                     "（ignore_index=-100）")
    assert english_left(shown) == []


def test_a_precheck_with_many_offending_values_counts_them_in_japanese():
    with pytest.raises(IndexError) as raised, OpTracer():
        F.cross_entropy(torch.zeros(30, 4), torch.arange(30) % 7)
    with i18n.using("ja"):
        shown = i18n.localize(raised.value.violation.message())
    assert shown.startswith("aten::nll_loss_forward: 位置 [4, 5, 6, 11, ")
    assert shown.endswith("の範囲外です（ignore_index=-100）。範囲外の要素は全部で 12 個です")
    assert english_left(shown) == []
