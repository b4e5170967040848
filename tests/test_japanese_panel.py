"""cudadiag in Japanese where incidents are browsed: `%cudadiag incidents` (the listing, its
figures, its errors), `%cudadiag show`'s refusals, `%cudadiag checkpoints`, a bad argument,
the panel's labels (in Python and in JupyterLab, in Debian's Chromium) — every sentence in
Japanese, the records' own words (PyTorch's messages, ids, paths) as they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag import Panel, checkpoint, i18n
from cudadiag.i18n.width import display_width
from cudadiag.incident import Incident
from cudadiag.log.entry import SUMMARY_MAX
from cudadiag.log.store import IncidentStore
from test_browser_panel import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    _run_all_cells,
    lab,  # noqa: F401 (the JupyterLab fixture, used by name)
)
from test_panel import _store_with
from untranslated import english_left

ASSERT = "CUDA error: device-side assert triggered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture
def japanese(monkeypatch):
    """CUDADIAG_LANG=ja for this test (and the kernels it starts)."""
    monkeypatch.setenv("CUDADIAG_LANG", "ja")
    assert i18n.current_code() == "ja"


def _log(*messages: str) -> list[Incident]:
    """The incidents of `messages`, filed in this test's log (test_panel's)."""
    return _store_with(*messages)[1]


def _summaries(made: list[Incident]) -> tuple[str, ...]:
    """The summaries the records keep as a listing shows them (the diagnosis's words, in
    Japanese where the diagnosis has a translation; cut to the column): quoted by the
    listing, not written by it."""
    return tuple(i18n.localize(i.diagnosis.summary)[:SUMMARY_MAX - 1] for i in made)


def test_the_incidents_listing_is_in_japanese_and_its_columns_align(japanese, shell, capsys):
    made = _log(ASSERT, OOM)
    shell.run_line_magic("cudadiag", "incidents")
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "時刻", "系統", "場所", "概要"]
    assert [row.split()[0] for row in rows] == [i.id for i in made]
    assert "In[1]" in rows[0] and "device_assert" in rows[0] and "oom" in rows[1]
    # the summary column starts where its heading does, counted in terminal columns
    start = display_width(header[:header.index("概要")])
    for row, incident in zip(rows, made, strict=True):
        summary = _summaries([incident])[0][:20]
        assert display_width(row[:row.index(summary)]) == start
    # the summaries quote PyTorch's message as it is
    assert english_left(out, verbatim=(*_summaries(made), "device-side assert triggered")) == []


def test_the_logs_figures_and_a_listing_that_matches_nothing(japanese, shell, capsys):
    _log(ASSERT, OOM, ASSERT)
    shell.run_line_magic("cudadiag", "incidents --stats")
    stats = capsys.readouterr().out
    assert "インシデント: 3 件" in stats
    assert "系統: device_assert 2, oom 1" in stats
    assert "保持設定: 最新の 10,000 件、ただし 180 日より古いものは残しません（既定値）" in stats
    assert "変更するには" in stats and "config.json" in stats
    shell.run_line_magic("cudadiag", "incidents --family illegal_memory")
    none = capsys.readouterr().out
    assert none.strip() == ("--family illegal_memory に合うインシデントはありません"
                            "（ログには 3 件あります）")
    assert english_left(stats + none) == []


def test_show_says_in_japanese_that_no_incident_matches(japanese, shell, cudadiag_home):
    with pytest.raises(UsageError) as empty:
        shell.run_line_magic("cudadiag", "show")
    assert str(empty.value) == (f"インシデントログ {cudadiag_home / 'incidents.sqlite3'} には"
                                "まだインシデントがありません")
    made = _log(ASSERT)
    with pytest.raises(UsageError) as unknown:
        shell.run_line_magic("cudadiag", "show zzz")
    assert str(unknown.value) == (f"ID が 'zzz' で始まるインシデントはありません。"
                                  f"最近の ID: {made[0].id}")
    shell.run_line_magic("cudadiag", f"show {made[0].id}")  # the one it names is shown
    assert english_left(str(empty.value) + str(unknown.value)) == []


def test_a_bad_argument_is_refused_in_japanese_with_the_usage(japanese, shell):
    with pytest.raises(UsageError) as zero:
        shell.run_line_magic("cudadiag", "incidents --last 0")
    first, usage = str(zero.value).split("\n", 1)
    assert first == "引数 --last: 1 以上を指定してください。0 は指定できません"
    assert usage.startswith("使い方: %cudadiag incidents [-h]")
    with pytest.raises(UsageError) as mode:
        shell.run_line_magic("cudadiag", "incidents --mode gpu")
    assert str(mode.value).startswith(
        "引数 --mode: 選べない値です: 'gpu'（'kernel', 'isolated', 'cli' から選んでください）")
    with pytest.raises(UsageError) as since:
        shell.run_line_magic("cudadiag", "incidents --since soon")
    assert str(since.value) == ("--since soon: 日付（2026-11-30）、日時（2026-11-30T14:00）、"
                                "または現在からさかのぼる期間（90m、12h、3d、2w）を指定してください")
    # the usage line is argparse's notation of the options (`{kernel,isolated,cli}`)
    said = [str(e.value).split("\n使い方: ")[0] for e in (zero, mode, since)]
    assert english_left("\n".join(said)) == []


def test_the_magics_help_is_in_japanese(japanese, shell):
    with pytest.raises(UsageError) as helped:
        shell.run_line_magic("cudadiag", "incidents -h")
    text = str(helped.value)
    assert "使い方: %cudadiag incidents" in text
    assert "このヘルプを表示して終了します" in text
    assert "条件に合う最新の N 件を表示します（既定: 50）" in text
    assert "保持設定の対象外のインシデントを、分離実行のファイルと一緒に今すぐ削除します" in text
    # argparse's notation of a choice, `{kernel,isolated,cli}`, is the options' own words
    assert english_left(re.sub(r"\{[\w,]+\}", " ", text)) == []


def _state(value: float = 1.0) -> dict[str, torch.Tensor]:
    return {"weight": torch.full((2, 2), value)}


def test_the_checkpoints_and_their_verdicts_in_japanese(japanese, shell, tmp_path, capsys):
    checkpoint.save(_state(), tmp_path / "step-1.pt", step=1)
    checkpoint.save(_state(), tmp_path / "step-2.pt", step=2)
    (tmp_path / "step-2.pt").write_bytes(b"changed after it was saved")
    torch.save(_state(), tmp_path / "plain.pt")
    capsys.readouterr()
    shell.run_line_magic("cudadiag", f"checkpoints {tmp_path}")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"{tmp_path} のチェックポイント（新しい順）:"
    assert re.search(r"step-2\.pt  ステップ 2  \S+  不採用: ハッシュが一致しません。"
                     r"保存後にファイルが変更されました"
                     r"（sha256 [0-9a-f]{12}…、マニフェスト [0-9a-f]{12}…）", out)
    assert re.search(r"step-1\.pt  ステップ 1  \S+  信頼できます", out)
    assert ("plain.pt  ステップ ?  時刻不明  不採用: マニフェストがありません"
            "（このチェックポイントは cudadiag.checkpoint.save で書かれていないか、"
            "保存が中断されました）") in out
    assert lines[-1] == f"再開に使うチェックポイント: {tmp_path / 'step-1.pt'}"
    assert english_left(out) == []


def test_a_verdict_made_in_english_reads_in_japanese_later(tmp_path, monkeypatch):
    """A verdict's reason is kept in English (what code and records compare) with its
    message id, and is written again in the reader's language when shown."""
    incident = _log(ASSERT)[0]
    checkpoint.save(_state(), tmp_path / "after.pt", step=2)
    verdict = checkpoint.verify(tmp_path / "after.pt", before=incident)
    assert verdict.reason.startswith("written after the error: saved at ")
    monkeypatch.setenv("CUDADIAG_LANG", "ja")
    assert verdict.reason.startswith("written after the error: saved at ")
    described = verdict.describe()
    assert re.fullmatch(
        rf"after\.pt  ステップ 2  \S+  不採用: エラーの後に書き込まれました: "
        rf"\S+ に保存されました。{re.escape(incident.created_at)} のインシデント "
        rf"{incident.id}（device_assert）より後です",
        described), described
    assert english_left(described) == []


def test_the_panels_labels_are_in_japanese(japanese):
    made = _log(ASSERT, OOM)
    panel = Panel(store=IncidentStore())
    assert panel.tabs.titles == ("最初のエラー", "バッチ", "次の確認", "環境", "後続のエラー")
    assert panel.family.options == ("すべての系統", "device_assert", "oom")
    assert (panel.family.description, panel.selector.description) == ("系統", "インシデント")
    assert (panel.rerun.description, panel.copy.description, panel.export.description) == (
        "ブロッキング起動で分離して再実行", "コピー用のレポート", "再現ノートブックを書き出す")
    assert (panel.newer.description, panel.older.description) == ("新しい方へ", "古い方へ")
    assert panel.position.value == "2 件中 1–2 件目（新しい順）"
    assert panel.rerun.tooltip == "ノートブックのカーネルが必要です"
    panel.family.value = "oom"
    assert [value for _, value in panel.selector.options] == [made[1].id]
    panel.family.value = "すべての系統"
    assert len(panel.selector.options) == 2
    labels = [panel.family.description, panel.selector.description, panel.position.value,
              panel.rerun.tooltip, panel.copy.tooltip, panel.export.tooltip,
              panel.newer.tooltip, *panel.tabs.titles,
              *(b.description for b in (panel.rerun, panel.copy, panel.export))]
    assert english_left("\n".join(labels)) == []


def test_the_selector_names_each_incident_in_japanese(japanese, monkeypatch):
    long_assert = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_"
                   "cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0 && t < "
                   "n_classes` failed.\n" + ASSERT)
    _log(long_assert)
    monkeypatch.setattr(i18n.texts, "_known", {})  # as in a later session: only the records
    label = Panel(store=IncidentStore()).selector.options[0][0]
    assert "device_assert: nll_loss_forward_reduce_cuda_kernel_2d で" in label, label
    assert english_left(label) == [] and " failed in " not in label


def test_an_empty_panel_says_so_in_japanese(japanese):
    panel = Panel(store=IncidentStore())
    assert panel.header.value == "<b>cudadiag: まだインシデントは記録されていません</b>"
    bundle = panel._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["text/plain"] == "cudadiag: まだインシデントは記録されていません"
    assert english_left(data["text/plain"]) == []


def test_the_report_box_names_the_incident_in_japanese(japanese):
    from cudadiag.panel.widget import report_for_the_box

    incident = _log(ASSERT)[0]
    first = report_for_the_box(incident).splitlines()[0]
    assert first == (f"**cudadiag インシデント** `{incident.id}`（2026-12-02 10:00、In[1]）")


@pytest.fixture
def lab_in_japanese(monkeypatch, request):
    """test_browser_panel's JupyterLab, its kernels started with CUDADIAG_LANG=ja."""
    monkeypatch.setenv("CUDADIAG_LANG", "ja")
    return request.getfixturevalue("lab")


PANEL_JA = ARTIFACTS / "panel-ja.png"
"""The screenshot of the panel in Japanese (its CJK glyphs drawn by fonts-noto-cjk); the one
in docs/panel-ja.png is a copy of it."""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(),
                    reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_panel_in_japanese_in_jupyterlab(lab_in_japanese):
    """The demo's panel in JupyterLab with the kernel in Japanese: its tabs, buttons and
    filter in Japanese; the glyphs are drawn by a CJK font (not boxes); a screenshot."""
    from playwright.sync_api import expect, sync_playwright

    base, token = lab_in_japanese
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="ja-JP")
        try:
            panel = _run_all_cells(page, base, token)
            expect(panel).to_contain_text("device_assert")
            tabs = [panel.get_by_role("tab", name=name)
                    for name in ("最初のエラー", "バッチ", "次の確認", "環境", "後続のエラー")]
            for tab in tabs:
                expect(tab).to_be_visible()
            for label in ("ブロッキング起動で分離して再実行", "コピー用のレポート",
                          "再現ノートブックを書き出す"):
                expect(panel.get_by_role("button", name=label)).to_be_visible()
            expect(panel).to_contain_text("すべての系統")
            tabs[2].click()
            expect(panel.locator(".cd-avoid")).to_be_visible()
            # drawn with a CJK font: the tab's label is as wide as its glyphs in one
            assert _drawn_by_a_cjk_font(tabs[1]), "the Japanese labels have no CJK font"
            PANEL_JA.parent.mkdir(exist_ok=True)
            panel.screenshot(path=str(PANEL_JA))
        finally:
            browser.close()
    assert PANEL_JA.stat().st_size > 10_000


def _drawn_by_a_cjk_font(element) -> bool:
    """True when the page's fonts draw the element's text with a CJK font: the widths of its
    text in the element's font and in Noto Sans CJK JP are the same, and differ from a
    font that has no such glyphs (each would fall back to the same font otherwise)."""
    widths = element.evaluate("""(e) => {
      const canvas = document.createElement('canvas').getContext('2d');
      const style = getComputedStyle(e);
      const width = (family) => {
        canvas.font = `${style.fontSize} ${family}`;
        return canvas.measureText(e.textContent.trim()).width;
      };
      return {page: width(style.fontFamily), cjk: width('"Noto Sans CJK JP"'),
              fonts: document.fonts.check(`${style.fontSize} "Noto Sans CJK JP"`, 'バッチ')};
    }""")
    return bool(widths["fonts"]) and abs(widths["page"] - widths["cjk"]) < 0.5
