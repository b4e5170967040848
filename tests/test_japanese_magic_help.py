"""The magics' help (`%cuda_isolate?`, `%%blocking_launch?`, `%cuda_compare?`,
`%cudadiag?`, the tooltip of Shift+Tab) follows the language of the moment, through a real
IPython shell: Japanese after `%cudadiag lang ja`, option names and values verbatim, no
English sentence left; after `%cudadiag lang en`, IPython's own English help again."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys

import pytest

from cudadiag.comparison.variants import VARIANTS
from scenarios import run
from untranslated import english_left

MAGICS = {  # what the user types before `?`, the magic's kind and name, its first line in ja
    "%cuda_isolate": ("line", "cuda_isolate",
                      "疑わしいセルを、ブロッキング起動で新しいプロセスで再実行します。"),
    "%%blocking_launch": ("cell", "blocking_launch",
                          "このセルの本体を、ブロッキング起動で新しいプロセスで実行します。"),
    "%cuda_compare": ("line", "cuda_compare", "セルを、そのままで 1 回、バリアントごとに"),
    "%%cuda_compare": ("cell", "cuda_compare", "セルを、そのままで 1 回、バリアントごとに"),
    "%cudadiag": ("line", "cudadiag", "インシデントログを閲覧します。"),
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _help(shell, capsys, typed: str) -> str:
    """What `typed?` prints in the shell, without its colours."""
    capsys.readouterr()
    run(shell, f"{typed}?")
    return _ANSI.sub("", capsys.readouterr().out)


def _english_help(shell, typed: str) -> str:
    """The help IPython wrote for the magic when it was defined: its docstring."""
    kind, name, _first = MAGICS[typed]
    return inspect.cleandoc(shell.magics_manager.magics[kind][name].__doc__)


def _option_names(shell, name: str) -> list[str]:
    """Every flag and metavar of the `@magic_arguments` magic `name`."""
    parser = shell.magics_manager.magics["line"][name].parser
    return [word for action in parser._actions
            for word in (*action.option_strings, action.metavar) if word]


@pytest.mark.parametrize("typed", list(MAGICS))
def test_a_magics_help_is_in_japanese_after_lang_ja_and_english_again_after_lang_en(
        shell, capsys, typed):
    run(shell, "%cudadiag lang ja")
    japanese = _help(shell, capsys, typed)
    assert MAGICS[typed][2] in japanese
    assert english_left(japanese, verbatim=tuple(VARIANTS)) == [], japanese

    run(shell, "%cudadiag lang en")
    english = _help(shell, capsys, typed)
    assert _english_help(shell, typed) in english
    assert MAGICS[typed][2] not in english


def test_cuda_isolate_help_in_japanese_keeps_its_usage_and_option_names(shell, capsys):
    english = _help(shell, capsys, "%cuda_isolate")
    run(shell, "%cudadiag lang ja")
    japanese = _help(shell, capsys, "%cuda_isolate")

    usage = english[english.index("::"):english.index("\n\nRe-run a suspect cell")]
    assert usage.startswith("::\n\n  %cuda_isolate [--no-blocking] [--timeout S]")
    assert usage in japanese  # the usage is code: the same in both languages
    for word in _option_names(shell, "cuda_isolate"):
        assert word in japanese, word
    assert "\n位置引数:\n  cell                  再実行するセルの実行番号" in japanese
    assert "\nオプション:\n  --no-blocking         " in japanese
    assert "  --dry-run             計画を表示するだけで、何も実行しません\n" in japanese
    # the options the runs share (options/runs.py) and the magic's own, in Japanese
    assert "  --timeout S           S 秒後に実行（そのプロセスグループ全体）を終了" in japanese
    unwrapped = re.sub(r"\n {24}", "", japanese)  # each argument's help on one line
    assert "（%cudadiag checkpoints を参照）\n" in unwrapped  # argparse's %% written once
    assert "positional arguments" not in japanese and "options:" not in japanese


def test_japanese_help_lines_fit_the_width_english_help_has(shell, capsys):
    from cudadiag.i18n.width import display_width

    run(shell, "%cudadiag lang ja")
    for typed in ("%cuda_isolate", "%cuda_compare"):
        lines = _help(shell, capsys, typed).splitlines()
        too_wide = [line for line in lines if display_width(line) > 80 and "[--" not in line]
        assert too_wide == [], too_wide


def test_the_tooltip_of_a_magic_follows_the_language(shell):
    run(shell, "%cudadiag lang ja")
    tooltip = shell.object_inspect_text("%%blocking_launch")
    assert MAGICS["%%blocking_launch"][2] in tooltip and "「すべて実行」" in tooltip
    assert english_left(_ANSI.sub("", tooltip)) == []

    run(shell, "%cudadiag lang auto")
    tooltip = _ANSI.sub("", shell.object_inspect_text("%%blocking_launch"))
    assert "Run this cell's body in a fresh process with blocking launches." in tooltip


SESSION = """\
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_cell("%load_ext cudadiag")
ip.run_cell("%cudadiag lang en")
print("HELP-STARTS")
ip.run_cell("%cuda_isolate?")
"""


@pytest.mark.slow
def test_a_kernel_started_in_japanese_shows_english_help_after_lang_en(shell, capsys,
                                                                        cudadiag_home):
    english = _help(shell, capsys, "%cuda_isolate")
    env = {**os.environ, "CUDADIAG_LANG": "ja", "CUDADIAG_HOME": str(cudadiag_home)}
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shown = _ANSI.sub("", done.stdout.split("HELP-STARTS\n", 1)[1])
    # the magic was defined while the session spoke Japanese: its English help is unchanged
    assert shown.split("File:")[0] == english.split("File:")[0]
