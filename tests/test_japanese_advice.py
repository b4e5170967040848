"""The advice of a device-side assert in Japanese (issue 28): the conclusions to avoid and the
family's first checks an incident keeps are shown in the source document's words once the
language is Japanese, stay byte for byte the same in English, and keep their message ids
through the record, so an incident read back in a new process shows the same Japanese."""

from __future__ import annotations

import pytest

from cudadiag import i18n, incidents
from cudadiag.advice import ordinal
from cudadiag.explain import explain_text
from cudadiag.i18n import localize_all
from cudadiag.incident import Incident
from read_back import read_back_in_japanese
from scenarios import fail_with_device_assert
from untranslated import english_left

AVOID_EN = [
    "The GPU or the driver is broken.",
    "The line in the traceback (.item(), .cpu(), print) is the cause: it is only where the "
    "asynchronous error was noticed.",
    "Restarting the kernel fixes it: the restart clears the poisoned CUDA context, not the "
    "bad target or index.",
    "Widening the output layer or the embedding until the error goes away.",
    "Subtracting 1 from every label before knowing that every source numbers them 1..C.",
]
AVOID_JA = [
    "GPU またはドライバーが必ず故障している。",
    "トレースバックが示す行（.item()、.cpu()、print）が原因である。その行は非同期のエラーに"
    "気づいた観測点にすぎず、必ずしも原因ではありません。",
    "カーネルの再起動で直る。再起動で消えるのは壊れた CUDA コンテキストであり、再起動しても"
    "誤ったターゲットや無効なインデックスは修正されません。",
    "エラーが消えるまで出力層や埋め込みを大きくする。単に出力サイズを増やすと、アノテーションの"
    "意味を解決することなく制約が消えてしまいます。",
    "すべてのソースがラベルを 1..C で番号付けしていると分かる前に、すべてのラベルから 1 を引く。",
]
RERUN_EN = ("Name the operator that really failed: re-run the cell isolated with blocking "
            "launches (%cuda_isolate).")
RERUN_JA = ("ブロッキング起動によるセルの分離再実行（%cuda_isolate）で、実際に失敗した演算子を"
            "特定してください。")
LOG = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 12, in <module>\n'
    "    print(loss.item())\n"
    "RuntimeError: CUDA error: device-side assert triggered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
)
"""A device-side assert as a log shows it when the device's assertion line is lost: nothing
names the operator, so every line of its advice is the family's."""
def device_assert_in_a_cell(shell, warm_interpreter) -> Incident:
    """The method's worked example failing in a cell, the device's assertion line read (the
    extension loaded again: pytest re-points fds 1/2 between setup and call), as in a
    notebook: the operator's kind is known; return the incident."""
    warm_interpreter.reload_extension(shell)
    fail_with_device_assert(shell)
    (incident,) = incidents()
    assert incident.diagnosis.details["assertion"] == "t >= 0 && t < n_classes"
    return incident


def test_a_device_side_assert_in_a_cell_is_advised_in_japanese_and_unchanged_in_english(
        shell, warm_interpreter):
    incident = device_assert_in_a_cell(shell, warm_interpreter)
    checks, avoid = incident.diagnosis.first_checks, incident.diagnosis.avoid
    assert avoid == AVOID_EN and checks[-1] == RERUN_EN
    with i18n.using("ja"):
        avoid_ja, checks_ja = localize_all(avoid), localize_all(checks)
    assert avoid_ja == AVOID_JA
    assert checks_ja[-1] == RERUN_JA
    assert english_left("\n".join([*avoid_ja, checks_ja[-1]])) == []
    assert localize_all(avoid) == AVOID_EN  # English again outside the block


def test_the_incident_read_back_in_a_new_process_shows_the_same_japanese(
        shell, warm_interpreter, tmp_path):
    incident = device_assert_in_a_cell(shell, warm_interpreter)
    with i18n.using("ja"):
        shown = [localize_all(incident.diagnosis.first_checks),
                 localize_all(incident.diagnosis.avoid)]
    assert read_back_in_japanese(incident, tmp_path, "i18n.localize_all(d.first_checks)",
                                 "i18n.localize_all(d.avoid)") == shown
    assert shown[1] == AVOID_JA and shown[0][-1] == RERUN_JA


def test_a_log_whose_operator_is_unknown_gets_every_line_of_its_advice_in_japanese():
    diagnosis = explain_text(LOG).diagnosis
    english = [*diagnosis.first_checks, *diagnosis.avoid]
    with i18n.using("ja"):
        checks, avoid = localize_all(diagnosis.first_checks), localize_all(diagnosis.avoid)
    assert checks == [
        "失敗した演算子のインデックスとターゲットを確認してください。クラスのターゲットは [0, C) の"
        "範囲にあるか ignore_index と等しく、埋め込みのインデックスは [0, num_embeddings) の範囲に"
        "なければなりません。",
        "`cudadiag run -- python your_script.py` によるプログラムの再実行（ブロッキング起動、演算子"
        "トレーサー、事前チェック。ノートブックでは %cuda_isolate）で、実際に失敗した演算子を特定"
        "してください。",
        "処理中だったバッチを調べてください。最後の不完全なバッチ、めったに現れないラベル、空または"
        "パディングされたターゲットがないかを見ます。",
    ]
    assert avoid[0] == AVOID_JA[0] and avoid[3] == AVOID_JA[3]
    assert avoid[2].startswith("プロセス（またはノートブックのカーネル）の再起動で直る。")
    assert english_left("\n".join([*checks, *avoid])) == []
    assert [*diagnosis.first_checks, *diagnosis.avoid] == english
    assert diagnosis.first_checks[1] == (
        "Name the operator that really failed: re-run the program with `cudadiag run -- python "
        "your_script.py` (blocking launches, the op tracer and prechecks; %cuda_isolate in a "
        "notebook).")


@pytest.mark.parametrize(("n", "english"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (5, "5th"),
                                             (11, "11th"), (12, "12th"), (21, "21st"),
                                             (28, "28th"), (113, "113th")])
def test_an_ordinal_is_english_grammar_in_english_and_a_counter_in_japanese(n, english):
    word = ordinal(n)
    assert word == english
    with i18n.using("ja"):
        assert i18n.localize(word) == f"{n} 番目"
