"""%cuda_isolate, %cuda_compare and the plan's refusal in Japanese (docs/languages.md), through
a real IPython shell after `%cudadiag lang ja`: the isolated run's child writes in the
session's language, PyTorch's operator names and the values stay verbatim, and no English
sentence is left."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag import incidents
from cudadiag.diagnose import incident_from_exception
from cudadiag.i18n import localize
from cudadiag.i18n.width import display_width
from cudadiag.incident import RunInfo
from cudadiag.ui.render import frame_text
from read_back import read_back_in_japanese
from scenarios import MODEL, SETUP, run
from untranslated import english_left


@pytest.fixture
def japanese(shell):
    """The shell after `%cudadiag lang ja` (the choice is forgotten after the test)."""
    run(shell, "%cudadiag lang ja")
    return shell


def _isolated():
    return [i for i in incidents() if i.run.mode == "isolated"]


@pytest.mark.slow
@pytest.mark.isolates
def test_the_guide_example_isolated_in_japanese(japanese, capsys):
    _, setup_cell = run(japanese, SETUP)
    _, model_cell = run(japanese, MODEL)
    _, item_cell = run(japanese, "print('loss', loss.item())")
    capsys.readouterr()

    run(japanese, "%cuda_isolate")
    out = capsys.readouterr().out
    (isolated,) = _isolated()
    assert f"計画: 再実行 In[{setup_cell}], In[{model_cell}]" in out and "、送る値 なし\n" in out
    assert f"cudadiag: 再現しました: In[{item_cell}] と同じ失敗（device_assert）です" in out
    assert f"cudadiag 分離実行 [{isolated.id}]: " in out
    (operator,) = [line for line in out.splitlines() if line.startswith("  演算子: ")]
    assert operator.startswith("  演算子: aten::nll_loss_forward(self=float32[3, 4]@cpu, "
                               "target=int64[3]@cpu") and "0..4" in operator
    raised = frame_text(isolated.error.reported_at)
    assert f"  発生場所: {raised}" in out and raised.startswith(f"In[{model_cell}]")
    assert raised.endswith(": loss = F.cross_entropy(model(x), target)")
    assert ("  事前チェック: aten::nll_loss_forward: 位置 2 の target 4 が [0, 4) の範囲外です"
            "（ignore_index=-100）") in out  # the precheck kept in the record, in Japanese
    # the settings as the build has them: a CUDA build (no device here) blocks with the variable
    setting = "CUDA_LAUNCH_BLOCKING=1" if torch.version.cuda else "CPU 版の PyTorch です。"
    assert f"  設定: {setting}" in out
    assert "  （診断のみです。カーネルの変数、デバイス、RNG には触れていません）" in out
    # the child wrote in Japanese too: its check of the blocking variables
    assert "子プロセスで CUDA の初期化前に確認しました" in out
    # the isolated run's error (PrecheckError) is cudadiag's sentence: Japanese, values verbatim
    message = isolated.error.text
    assert message.startswith("aten::nll_loss_forward: 位置 2 の target 4 が [0, 4) の範囲外です"
                              "（ignore_index=-100）\n"), message
    assert message.endswith("ではこのカーネルは device-side assert triggered で失敗します"
                            "（事前チェックが実行前に止めました）"), message
    assert english_left(message, verbatim=("device-side assert triggered",)) == []
    # the frame and the first check are other areas' sentences, quoted as they are
    kept = (raised, localize(isolated.diagnosis.first_checks[0]))
    assert english_left(out, verbatim=kept) == []


@pytest.mark.slow
@pytest.mark.isolates
def test_compare_rows_and_headings_in_japanese(japanese):
    run(japanese, SETUP)
    _, model_cell = run(japanese, MODEL)
    result, _ = run(japanese, f"%cuda_compare {model_cell} --variants cpu")
    text = str(result.result)
    assert f"In[{model_cell}] を比較: 一度に 1 つずつ変更" in text
    lines = text.splitlines()
    assert lines[2].split() == ["バリアント", "結果", "経過時間", "変更したもの"]
    reference = next(line for line in lines if line.startswith("reference "))
    assert "失敗: device_assert（aten::nll_loss_forward）" in reference
    cpu = next(line for line in lines if line.startswith("cpu "))
    assert "失敗: index_out_of_bounds（aten::nll_loss_forward）" in cpu
    assert "スキップしたシミュレートデバイスの入口 ×1" in cpu
    # the columns line up in a terminal: a Japanese character takes two columns
    assert display_width(reference.split("ms")[0]) == display_width(cpu.split("ms")[0])
    assert "- reference の行と cpu の行が失敗した（または cpu を実行していない）ため" in text
    assert english_left(text) == []


@pytest.mark.slow
@pytest.mark.isolates
def test_a_plan_refusal_in_japanese(japanese, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(japanese, SETUP)
    _, log_cell = run(japanese, "with open('data.txt', 'a') as log:\n"
                                "    log.write('epoch 0\\n')\nlosses = []")
    run(japanese, "logits = torch.zeros(3, 4)\ntarget = torch.tensor([0, 2, 4])\n"
                  "losses.append(F.cross_entropy(logits, target).item())")

    result, _ = run(japanese, "%cuda_isolate")
    assert isinstance(result.error_in_exec, UsageError)
    message = str(result.error_in_exec)
    assert message.startswith("実行しませんでした: 再実行すると、以前のセルがこのマシンに"
                              "対して行ったことを繰り返します:\n"
                              f"  In[{log_cell}] ファイルに書き込みます: "
                              "open('data.txt', 'a')")
    assert (f"In[{log_cell}] は次のために再実行します: losses（送らない理由: その後 "
            f"In[{log_cell + 1}] で変更された可能性があります") in message
    assert message.endswith(f"それでも In[{log_cell}] を再実行するには、--allow-side-effects を"
                            "付けてください。または、--cells N,M,... で再実行するセルを選んで"
                            "ください。")
    assert (tmp_path / "data.txt").read_text() == "epoch 0\n"
    assert english_left(message) == []


@pytest.mark.slow
@pytest.mark.isolates
def test_a_cold_start_child_writes_in_the_sessions_language(japanese, capsys):
    run(japanese, SETUP)
    run(japanese, MODEL)
    run(japanese, "print('loss', loss.item())")
    capsys.readouterr()

    run(japanese, "%cuda_isolate --cold")
    out = capsys.readouterr().out
    assert "；子プロセスで CUDA の初期化前に確認しました；コールドスタート（--cold）；" in out


def test_a_compiled_code_summary_kept_in_a_record_reads_back_in_japanese(tmp_path):
    """The summary of an error raised from generated code is kept with its id: filed in
    English, read back in another process in Japanese."""
    error = RuntimeError("kernel, /tmp/torchinductor_u/2r/c2rqqed7b3.main.cpp:34, index out "
                         "of bounds: 0 <= tmp13 < 10L")
    incident = incident_from_exception(error, RunInfo(mode="kernel"))
    assert "`0 <= tmp13 < 10L` failed in " in incident.diagnosis.summary
    (shown,) = read_back_in_japanese(incident, tmp_path, "i18n.localize(d.summary)")
    assert "torch.compile が生成した" in shown
    assert "で `0 <= tmp13 < 10L` が成り立ちませんでした" in shown


def test_a_magics_bad_option_is_refused_in_japanese(japanese):
    result, _ = run(japanese, "%cuda_isolate --timeout")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == "引数 --timeout: 引数が 1 つ必要です"
    run(japanese, "%cudadiag lang en")
    result, _ = run(japanese, "%cuda_compare --variants")
    assert str(result.error_in_exec) == "argument --variants: expected one argument"
