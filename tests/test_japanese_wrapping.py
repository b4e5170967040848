"""Japanese lines break between phrases: the summary under a failing cell and `show`, in
Japanese (`%cudadiag lang ja`), on the method's worked example in a real IPython shell. No
line ends inside a word (演算子, カーネル, 再起動, a katakana or kanji run, a word and the
particle after it), and every line fits its columns (a wide character taking two)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from cudadiag import incidents
from cudadiag.i18n.width import NO_LINE_START, display_width
from cudadiag.ui.render import LEAD_WIDTH, render_short
from scenarios import run
from test_japanese_screen import ANSI, fail_in_japanese

WORDS = ("演算子", "カーネル", "再起動", "インデックス", "ターゲット", "コンテキスト", "プロセス",
         "ノートブック", "ブロッキング", "シミュレーション", "デバイス", "確認", "実行", "最初",
         "修正", "特定", "使えなく", "してください")
"""Words the summary and `show` hold, that no line may end inside."""
CONTINUED = "      "
"""The indent of a lead line's continuation."""


def _kind(char: str) -> str:
    if "\u3041" <= char <= "\u309f":
        return "hiragana"
    if "\u30a1" <= char <= "\u30ff":
        return "katakana"
    return "kanji" if "\u4e00" <= char <= "\u9fff" else "other"


def _breaks(lines: list[str]) -> list[tuple[str, str]]:
    """(the end of a line, the start of the next) for each pair of non-empty lines."""
    shown = [line for line in lines if line.strip()]
    return [(a.rstrip(), b.strip()) for a, b in pairwise(shown)]


def _words_cut(lines: list[str]) -> list[str]:
    """The lines' breaks that fall inside one of WORDS."""
    return [f"{end[-6:]}|{start[:6]}" for end, start in _breaks(lines)
            for word in WORDS if word in end[-6:] + start[:6]
            and word not in end[-6:] and word not in start[:6]]


def _runs_cut(lines: list[str]) -> list[str]:
    """The continuation lines that start inside a kanji or katakana run, or with the
    hiragana that follows one (カーネル|を)."""
    cut = []
    for line, after in pairwise(lines):
        if not (after.startswith(CONTINUED) and line.strip() and after.strip()):
            continue
        last, first = _kind(line.rstrip()[-1]), _kind(after.strip()[0])
        inside = last == first != "other" or (last in ("kanji", "katakana")
                                              and first == "hiragana")
        if inside:
            cut.append(f"{line.rstrip()[-4:]}|{after.strip()[:4]}")
    return cut


@pytest.fixture
def japanese_failure(shell, capsys, monkeypatch):
    """The worked example's loop failed in Japanese; (the shell, what it printed)."""
    return shell, fail_in_japanese(shell, capsys, monkeypatch)[1]


def test_the_summary_under_the_cell_breaks_between_phrases(japanese_failure):
    _, printed = japanese_failure
    (incident,) = incidents()
    lead = render_short(incident, show="%cudadiag show")
    assert lead in printed
    lines = lead.splitlines()
    assert any(line.startswith(CONTINUED) for line in lines)  # something was wrapped
    assert all(display_width(line) <= LEAD_WIDTH for line in lines), lines
    assert _words_cut(lines) == [] and _runs_cut(lines) == [], lines
    assert not any(line.strip()[:1] in NO_LINE_START for line in lines)


@pytest.mark.parametrize("width", [30, 44, 60, 72, 88])
def test_the_summary_at_any_width_keeps_its_words_whole_and_fits(japanese_failure, width):
    (incident,) = incidents()
    lines = render_short(incident, show="%cudadiag show", width=width).splitlines()
    assert all(display_width(line) <= width for line in lines), lines
    assert _words_cut(lines) == [], lines
    assert not any(line.strip()[:1] in NO_LINE_START for line in lines), lines


def test_show_breaks_its_japanese_between_phrases_within_its_columns(japanese_failure,
                                                                      capsys):
    shell, _ = japanese_failure
    (incident,) = incidents()
    run(shell, f"%cudadiag show {incident.id}")
    shown = ANSI.sub("", capsys.readouterr().out)
    body = shown.split("\n\n", 1)[1].splitlines()  # the header's lines are never wrapped
    wrapped = [line for line in body if display_width(line) > len(line) and "|" not in line]
    assert wrapped and all(display_width(line) <= 100 for line in wrapped)
    assert any(display_width(line) > 80 for line in wrapped)  # lines are filled
    assert _words_cut(wrapped) == [], wrapped
    assert not any(line.strip()[:1] in NO_LINE_START for line in wrapped)

