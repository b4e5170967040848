"""What a user sees under a failing cell and in `show`, in Japanese (`%cudadiag lang ja`):
the method's worked example (a label 4 among 4 classes, in the last batch of a training loop,
on the simulated device) in a real IPython shell. Every sentence cudadiag writes is Japanese;
PyTorch's messages, code and numbers are quoted as they are; lines fit their columns, a wide
character taking two."""

from __future__ import annotations

import re
import sys
from itertools import takewhile

from cudadiag import incidents
from cudadiag.i18n.width import NO_LINE_START, display_width
from cudadiag.ui.render import LEAD_WIDTH, render_html, render_short, render_text
from scenarios import SETUP, run
from untranslated import english_left

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DATA = ("import cudadiag\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "torch.manual_seed(0)\nlabels = torch.tensor([i % 4 for i in range(30)])\n"
        "labels[24:] = torch.tensor([0, 1, 4, 2, 3, 1])\n"
        "loader = DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8)\n"
        "model = torch.nn.Linear(8, 4)")
LOOP = ("for features, target in cudadiag.watch(loader, name='train'):\n"
        "    loss = F.cross_entropy(model(features), target)\n"
        "    print('loss', loss.item())")
PYTORCH = "SimulatedAcceleratorError: CUDA error: device-side assert triggered"
RESTART = "「カーネル」メニューの「カーネルを再起動…」"


def fail_in_japanese(shell, capsys, monkeypatch) -> tuple[int, str]:
    """Choose Japanese, run the worked example's loop until its device-side assert surfaces;
    return the loop's cell and what the shell printed (one stream, in the order a terminal
    shows it)."""
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    shell.InteractiveTB.set_mode("Context")  # IPython's default (a test may have left Minimal)
    run(shell, "%cudadiag lang ja")
    run(shell, SETUP)
    run(shell, DATA)
    capsys.readouterr()
    result, cell = run(shell, LOOP)
    assert result.error_in_exec is not None
    return cell, ANSI.sub("", capsys.readouterr().out)


def test_the_block_under_the_failing_cell_is_japanese_and_quotes_pytorch(
        shell, capsys, monkeypatch):
    cell, printed = fail_in_japanese(shell, capsys, monkeypatch)
    (incident,) = incidents()
    lead = render_short(incident, show="%cudadiag show")
    assert lead in printed
    facts = render_short(incident, show="%cudadiag show", width=0).splitlines()
    assert facts[0].startswith(f"cudadiag [{incident.id}] device_assert — ")
    assert facts[0].endswith(" [シミュレーション]")
    assert "プロセスを再起動" not in facts[0]  # the restart has its own line
    assert facts[1] == (f"  検出箇所（原因とは限りません）：In[{cell}] の 3 行目: "
                        "print('loss', loss.item())")
    assert facts[2] == (f"  再起動が必要です：CUDA コンテキスト（シミュレーション）は "
                        f"In[{cell}] 以降使えなくなっています。カーネルを再起動してください"
                        "（再起動しても誤ったターゲットや無効なインデックスは修正されません）")
    assert facts[3].startswith("  エラー検出時のループ：features=")
    assert facts[3].endswith(f" (In[{cell}])")
    assert facts[4].startswith("  watch(train)：ステップ 3、最後に完了したステップ 2；"
                               "最後の不完全なバッチ；ローダーの最後のステップ；"
                               "データセットのインデックス [24, 25, 26, 27, 28, 29]")
    assert facts[5].startswith("  最初の確認：")
    assert facts[6] == (f"  次の手順：%cuda_isolate が In[{cell}] を新しいプロセスで"
                        "ブロッキング起動（同期実行）により再実行し、演算子、問題の値とその位置を"
                        "特定します")
    assert facts[7] == f"  詳細：%cudadiag show {incident.id}"
    # the folded traceback after it: cudadiag's words in Japanese, PyTorch's as they are
    folded = printed[printed.index("cudadiag がトレースバックを折りたたみました"):].splitlines()
    assert folded[:3] == [
        "cudadiag がトレースバックを折りたたみました（%tb で全体を表示、%debug で開けます）。",
        f"In[{cell}] の 3 行目: print('loss', loss.item())", PYTORCH]
    assert printed.index(f"cudadiag [{incident.id}]") < printed.index(folded[0])
    assert english_left(lead + "\n" + "\n".join(folded[:3])) == []


def test_the_lines_under_the_cell_fit_their_columns_and_break_between_wide_characters(
        shell, capsys, monkeypatch):
    fail_in_japanese(shell, capsys, monkeypatch)
    (incident,) = incidents()
    lines = render_short(incident, show="%cudadiag show").splitlines()
    assert all(display_width(line) <= LEAD_WIDTH for line in lines), lines
    assert any(display_width(line) > len(line) for line in lines)  # wide characters
    assert any(display_width(line) > LEAD_WIDTH - 4 for line in lines)  # lines filled
    assert not any(line.strip()[:1] in NO_LINE_START for line in lines)
    restart = next(n for n, line in enumerate(lines) if "再起動が必要です" in line)
    # broken between two Japanese phrases, the rest indented under it
    continued = list(takewhile(lambda line: line.startswith("      "), lines[restart + 1:]))
    assert continued and all(line[6] != " " for line in continued)
    assert (lines[restart] + "".join(line.strip() for line in continued)).endswith(
        "カーネルを再起動してください（再起動しても誤ったターゲットや無効なインデックスは修正されません）")
    cut = render_short(incident, show="%cudadiag show", width=40).splitlines()
    assert all(display_width(line) <= 40 for line in cut), cut
    assert any(line.startswith("  再起動が必要です：") and line.endswith(" …") for line in cut)


def test_every_later_cell_is_reminded_in_japanese(shell, capsys, monkeypatch):
    cell, _ = fail_in_japanese(shell, capsys, monkeypatch)
    run(shell, "y = torch.ones(2) * 2")
    reminder, *folded = ANSI.sub("", capsys.readouterr().out).splitlines()
    assert reminder == (f"cudadiag: CUDA コンテキスト（シミュレーション）は In[{cell}] 以降使えなく"
                        "なっています（device_assert）。カーネルを再起動してください。再起動しても"
                        "誤ったターゲットや無効なインデックスは修正されません。")
    assert folded[0].startswith("cudadiag がトレースバックを折りたたみました")  # a consequence
    assert english_left(reminder) == []


def test_show_writes_the_incident_in_japanese_with_the_restart_in_the_guides_words(
        shell, capsys, monkeypatch):
    cell, _ = fail_in_japanese(shell, capsys, monkeypatch)
    (incident,) = incidents()
    run(shell, f"%cudadiag show {incident.id}")
    shown = ANSI.sub("", capsys.readouterr().out)
    assert shown.strip() == render_text(incident).strip()
    titles = [line for line in shown.splitlines() if line and not line.startswith((" ", "-"))]
    assert titles[0].startswith(f"インシデント {incident.id} — ")
    assert titles[0].endswith(" — kernel 実行 [シミュレーション]")
    for title in ("再起動が必要です", "最初のエラー", "ループ内の位置", "バッチ", "最初の確認",
                  "避けるべき結論", "環境"):
        assert title in titles, titles
    box = " ".join(shown.split("再起動が必要です\n", 1)[1].split("\n\n", 1)[0].split())
    box = re.sub(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])", "", box)  # undo the wrapping
    assert "プロセスを終了して再起動する必要があります。" in box
    assert "ノートブックでは、修正した再現の前にカーネルを再起動してください。" in box
    assert "再起動しても誤ったターゲットや無効なインデックスは修正されません。" in box
    assert f"JupyterLab / Notebook 7：{RESTART}。" in box
    assert f"  cudadiag.testing.{PYTORCH}" in shown
    assert f"  場所：In[{cell}] の 3 行目（<module> 内）: print('loss', loss.item())" in shown
    assert "  データセットのインデックス [24, 25, 26, 27, 28, 29]" in shown
    assert "  パス | 形状 | dtype | デバイス | ストライド | 最小 | 最大 |" in shown
    # every wrapped line fits (the header's and the source code's lines are never wrapped)
    wrapped = [line for line in shown.split("\n\n", 1)[1].splitlines()
               if display_width(line) > len(line) and "|" not in line]
    assert wrapped and all(display_width(line) <= 100 for line in wrapped)
    # the HTML form: the same words, the restart box framed in the theme's error colour
    html = render_html(incident)
    assert ('<div class="cd-restart" style="border: 2px solid var(--jp-error-color1, #d32f2f)'
            in html)
    assert "<b>再起動が必要です</b>" in html and "<h4>最初のエラー</h4>" in html
    assert 'class="cd-restart-line"' in html and "カーネルを再起動してください" in html
    # the knowledge's sentences too (the checks, the conclusions to avoid)
    quoted = (*LOOP.splitlines(), "device-side assert triggered")  # code, PyTorch's message
    assert english_left(shown, verbatim=quoted) == []


def test_in_english_the_same_failure_reads_as_before(shell, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    run(shell, SETUP)
    run(shell, DATA)
    _, cell = run(shell, LOOP)
    printed = ANSI.sub("", capsys.readouterr().out)
    (incident,) = incidents()
    facts = render_short(incident, show="%cudadiag show", width=0).splitlines()
    assert facts[1] == (f"  noticed (not necessarily the cause) at In[{cell}], line 3: "
                        "print('loss', loss.item())")
    assert facts[2].startswith(f"  Restart required: the CUDA context (simulated) has been "
                               f"unusable since In[{cell}] — restart the kernel")
    assert "Traceback folded by cudadiag (%tb shows it in full, %debug opens it):" in printed
    assert "Kernel > Restart Kernel…" in render_text(incident)
