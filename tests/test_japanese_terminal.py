"""`cudadiag` in Japanese in a terminal: `run`'s diagnosis after the script's own traceback,
`explain` of a pasted log, `env --check`, bad arguments, and the language taken from the
locale alone; English stays as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag.explain import explain_text
from cudadiag.i18n import localize, using
from cudadiag.incident import Incident, RunInfo
from untranslated import english_left

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"
BOOM = """\
import torch


def parse(values):
    return torch.tensor(values).view(3, 3)


parse([1, 2])
"""
TWO_RANKS = (
    "[rank1]: /pytorch/aten/src/ATen/native/cuda/Loss.cu:240: "
    "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n"
    "[rank1]: RuntimeError: CUDA error: device-side assert triggered\n"
    "[rank0]:[E501 12:59:59.000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.\n"
)


def cudadiag(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as a user types it, with `env` over a locale-free environment."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("CUDADIAG_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")}
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={**base, **env})


def test_run_keeps_the_scripts_traceback_verbatim_and_diagnoses_in_japanese(tmp_path):
    (tmp_path / "boom.py").write_text(BOOM)
    plain = subprocess.run([sys.executable, "boom.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    result = cudadiag("run", "--", sys.executable, "boom.py", cwd=tmp_path,
                      CUDADIAG_HOME=str(tmp_path / "home"), CUDADIAG_LANG="ja")
    traceback, _, diagnosis = result.stderr.partition("cudadiag [")
    assert result.returncode == 1 and traceback == plain.stderr
    assert "RuntimeError: shape '[3, 3]' is invalid for input of size 2" in traceback
    assert "boom.py:5" in diagnosis
    assert english_left(diagnosis, verbatim=("shape '[3, 3]' is invalid for input of size 2",
                                             )) == []


def test_explain_of_a_log_is_in_japanese_and_quotes_pytorch_verbatim(tmp_path):
    log = DATA / "framework-logs" / "trainer-device-assert.log"
    result = cudadiag("explain", str(log), CUDADIAG_LANG="ja")
    assert result.returncode == 0
    out = result.stdout
    assert "最初のエラー（4 行目）：" in out
    assert "Assertion `t >= 0 && t < n_classes` failed." in out
    assert "再起動しても誤ったターゲットや無効なインデックスは修正されません" in out
    assert "学習の到達点：進捗バー 3/16、最後の記録：loss 1.101" in out
    assert "最初の確認：" in out and "避けるべき結論：" in out
    english = cudadiag("explain", str(log))
    assert "first error (line 4):" in english.stdout and "training had reached: bar at 3/16; " \
        "last logged: loss 1.101" in english.stdout


def test_explain_names_the_rank_that_failed_first_and_its_consequences(tmp_path):
    (tmp_path / "job.log").write_text(TWO_RANKS)
    out = cudadiag("explain", "job.log", cwd=tmp_path, CUDADIAG_LANG="ja").stdout
    assert "最初のエラー（1 行目、ランク 1）：" in out
    assert "後続のエラー（ランク 1 の失敗の結果と考えられます）：" in out
    assert "  ランク 0、3 行目：distributed — " in out


def test_the_locale_alone_gives_japanese():
    log = DATA / "framework-logs" / "trainer-device-assert.log"
    result = cudadiag("explain", str(log), LANG="ja_JP.UTF-8")
    assert "最初のエラー（4 行目）：" in result.stdout
    assert "first error" not in result.stdout


def test_env_check_lines_are_in_japanese():
    result = cudadiag("env", "--check", "--capability", "8.6", CUDADIAG_LANG="ja")
    assert result.returncode in (0, 1)
    assert "Compute Capability 8.6" in result.stdout
    assert "CUDA に対応していません" in result.stdout or "ビルド" in result.stdout
    statuses = {line.split()[0] for line in result.stdout.splitlines()
                if "capability" in line.lower()}
    assert statuses and statuses <= {"合格", "警告", "失敗", "不明"}, result.stdout
    assert english_left(result.stdout) == [], result.stdout  # the checks' names too
    english = cudadiag("env", "--check", "--capability", "8.6").stdout
    shown = {line.split()[0] for line in english.splitlines() if "capability" in line}
    assert shown and shown <= {"PASS", "WARN", "FAIL", "SKIP"}, english


def test_the_first_errors_details_have_japanese_labels(tmp_path):
    shown = cudadiag("demo", CUDADIAG_LANG="ja", CUDADIAG_HOME=str(tmp_path)).stdout
    assert "  ファイル：/pytorch/aten/src/ATen/native/cuda/Loss.cu\n" in shown
    assert "  CUDA カーネル：nll_loss_forward_reduce_cuda_kernel_2d\n" in shown
    assert "  アサーション：t >= 0 && t < n_classes\n" in shown
    assert "\n  file: " not in shown and "\n  kernel: " not in shown


def test_a_bad_argument_is_explained_in_japanese():
    result = cudadiag("env", "--capability", "8.6", CUDADIAG_LANG="ja")
    assert result.returncode == 2
    assert "--capability は --check と一緒に使います" in result.stderr
    assert "使い方: cudadiag env [-h] [--json] [--check] [--capability X.Y]\n" in result.stderr
    assert "cudadiag env: エラー: --capability は --check と一緒に使います" in result.stderr
    wrong = cudadiag("env", "--check", "--capability", "9.x", CUDADIAG_LANG="ja")
    assert wrong.returncode == 2
    assert "--capability には X.Y（例：8.6）" in wrong.stderr and "'9.x'" in wrong.stderr
    missing = cudadiag("explain", "nowhere.log", CUDADIAG_LANG="ja")
    assert missing.stderr == "cudadiag explain: nowhere.log: そのファイルはありません\n"


def test_argparses_own_words_are_in_japanese_and_english_is_unchanged():
    unknown = cudadiag("bogus", CUDADIAG_LANG="ja")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines() == [
        "使い方: cudadiag [-h] COMMAND ...",
        "cudadiag: エラー: 引数 COMMAND: 選べない値です: 'bogus'（'env', 'incidents', 'show', "
        "'run', 'report', 'export', 'explain', 'checkpoints', 'demo' から選んでください）"]
    none = cudadiag(CUDADIAG_LANG="ja").stderr
    assert none.endswith("cudadiag: エラー: 次の引数が必要です: COMMAND\n")
    extra = cudadiag("explain", "a.log", "b.log", CUDADIAG_LANG="ja").stderr
    assert "cudadiag: エラー: 認識できない引数です: b.log" in extra
    bad_number = cudadiag("run", "--timeout", CUDADIAG_LANG="ja").stderr
    assert "cudadiag run: エラー: 引数 --timeout: 引数が 1 つ必要です" in bad_number
    helped = cudadiag("show", "--help", CUDADIAG_LANG="ja").stdout
    assert "\n位置引数:\n" in helped and "\nオプション:\n" in helped
    assert "  -h, --help  このヘルプを表示して終了します" in helped
    assert helped.startswith("使い方: cudadiag show [-h] [--json] [id]")
    for text in (unknown.stderr, none, extra, bad_number, helped):
        assert english_left(text) == [], text

    english = cudadiag("bogus")
    assert english.stderr.startswith("usage: cudadiag [-h] COMMAND ...\n"
                                     "cudadiag: error: argument COMMAND: invalid choice: 'bogus' "
                                     "(choose from 'env', ")
    helped = cudadiag("show", "--help").stdout
    assert "\npositional arguments:\n" in helped and "\noptions:\n" in helped
    assert "  -h, --help  show this help message and exit" in helped


def test_the_help_of_run_is_in_japanese_and_english_is_unchanged():
    ja = cudadiag("run", "--help", CUDADIAG_LANG="ja").stdout
    assert "SCRIPT を `CUDA_LAUNCH_BLOCKING=1 python SCRIPT` と同じように実行し" in ja
    en = cudadiag("run", "--help").stdout
    assert "Run SCRIPT the way `CUDA_LAUNCH_BLOCKING=1 python SCRIPT` does" in en


def test_a_kept_summary_of_a_dead_rank_is_read_back_in_japanese():
    explained = explain_text("[rank3]: something\n"
                             "torch.distributed.elastic.multiprocessing.api:[ERROR] failed "
                             "(exitcode: -11) local_rank: 3 (pid: 4242) of binary: python\n")
    summary = explained.diagnosis.summary
    first = explained.first
    assert first is not None and first.diagnosis is not None
    incident = Incident.from_dict(
        Incident(error=_error(), diagnosis=first.diagnosis, run=RunInfo(mode="cli")).to_dict())
    kept = incident.diagnosis.summary
    assert kept.startswith("local rank 3") or summary
    with using("ja"):
        assert localize(kept).startswith("ローカルランク 3：")


def _error():  # the error an incident needs; its text does not matter here
    from cudadiag.incident import ErrorInfo

    return ErrorInfo(type="RuntimeError", message="m", text="m")
