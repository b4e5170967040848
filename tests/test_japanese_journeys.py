"""The journeys of shared/journeys.md in Japanese, end to end, as a user walks them: every
sentence cudadiag writes is Japanese, PyTorch's own messages stay as they are
(docs/languages.md)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from test_cli import TRAIN
from untranslated import english_left

DEMO = Path(__file__).parent.parent / "notebooks" / "device_assert_demo.ipynb"
pytestmark = pytest.mark.slow

TORCH_MESSAGE = "CUDA error: device-side assert triggered"
QUOTED = re.compile(
    r"device-side assert triggered|Target -?\d+ is out of bounds\.?")
"""PyTorch's messages (and the simulated device's, which stand for them): quoted, verbatim."""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TAG = re.compile(r"<[^>]+>")
SPACES = re.compile(r"[ \t\xa0]+")


def _executed(home: Path, **language: str) -> nbformat.NotebookNode:
    """The demo notebook (the guide's example: class 4 in a 4-class problem), then `show`,
    `explain` and `%cudadiag lang`, in a real kernel whose environment names a language."""
    nb = nbformat.read(DEMO, as_version=4)
    nb.cells += [new_code_cell("%cudadiag show"), new_code_cell("%cudadiag explain"),
                 new_code_cell("%cudadiag lang")]
    env = {**os.environ, "CUDADIAG_HOME": str(home), **language}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        NotebookClient(nb, timeout=240, kernel_name="python3", allow_errors=True).execute()
    return nb


def _written_by_cudadiag(cell: nbformat.NotebookNode) -> str:
    """Everything under `cell` but the user's own prints, without the messages it quotes."""
    texts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            texts += [line for line in output.text.splitlines()
                      if not line.startswith("loss ")]
        elif output.output_type == "error":
            texts += [ANSI.sub("", line) for line in output.traceback]
        else:
            data = output.get("data", {})
            # each cell of a table, each block on a line of its own, as a reader sees them
            texts.append(html.unescape(TAG.sub("\n", data.get("text/html", "")))
                         or data.get("text/plain", ""))
    return QUOTED.sub(" ", SPACES.sub(" ", "\n".join(texts)))


def _code(nb: nbformat.NotebookNode) -> tuple[str, ...]:
    """The notebook's code as typed, line by line, and each run of a comment's words (a long
    line is wrapped or cut): quoted under a cell as it is."""
    lines = [SPACES.sub(" ", line.strip()) for cell in nb.cells if cell.cell_type == "code"
             for line in cell.source.splitlines() if line.strip()]
    comments = [line.partition("#")[2].split() for line in lines if "#" in line]
    runs = [" ".join(words[i:j]) for words in comments for i in range(len(words))
            for j in range(i + 3, len(words) + 1)]  # shorter runs are never flagged
    return tuple(sorted(lines + runs, key=len, reverse=True))


@pytest.fixture(scope="module")
def in_japanese(tmp_path_factory):
    return _executed(tmp_path_factory.mktemp("ja-home"), CUDADIAG_LANG="ja")


def _cell(nb: nbformat.NotebookNode, startswith: str) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(startswith)]
    return cell


def test_the_notebook_journey_leaves_no_english_sentence(in_japanese):
    for cell in in_japanese.cells:
        if cell.cell_type != "code":
            continue
        written = _written_by_cudadiag(cell)
        assert english_left(written, verbatim=_code(in_japanese)) == [], cell.source


def test_under_the_failing_cell_the_first_error_and_the_restart_are_japanese(in_japanese):
    failing = _cell(in_japanese, "for features, target in cudadiag.watch")
    (error,) = [o for o in failing.outputs if o.output_type == "error"]
    assert TORCH_MESSAGE in error.evalue  # PyTorch's message, verbatim
    written = _written_by_cudadiag(failing)
    assert "カーネルを再起動" in written
    assert re.search(r"[\u3040-\u30ff]", written)


def test_show_and_explain_are_japanese(in_japanese):
    for start in ("%cudadiag show", "%cudadiag explain"):
        written = _written_by_cudadiag(_cell(in_japanese, start))
        assert re.search(r"[\u3040-\u30ff]{4}", written), start
        assert english_left(written, verbatim=_code(in_japanese)) == [], start


def test_the_language_is_said_with_where_it_came_from(in_japanese):
    said = _written_by_cudadiag(_cell(in_japanese, "%cudadiag lang"))
    assert said.strip() == "cudadiag の表示言語は 日本語（ja）です。設定: CUDADIAG_LANG=ja。"


def test_a_japanese_locale_alone_gives_japanese_under_the_failing_cell(tmp_path):
    nb = _executed(tmp_path, LANG="ja_JP.UTF-8")
    written = _written_by_cudadiag(_cell(nb, "for features, target in cudadiag.watch"))
    assert "カーネルを再起動" in written
    assert english_left(written, verbatim=_code(nb)) == []


def _cudadiag(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_script_journey_in_japanese(tmp_path):
    """`cudadiag run`, then `report`, `report --lang en` and `explain` of the run's output."""
    (tmp_path / "train.py").write_text(TRAIN)
    run = _cudadiag("run", "--json", "incident.json", "--", sys.executable, "train.py",
                    "--bad", cwd=tmp_path, CUDADIAG_LANG="ja")
    assert run.returncode == 1
    traceback, _, diagnosis = run.stderr.partition("cudadiag [")
    assert traceback.startswith("Traceback (most recent call last):")
    assert english_left(QUOTED.sub(" ", diagnosis), verbatim=tuple(TRAIN.splitlines())) == []
    incident = json.loads((tmp_path / "incident.json").read_text())["id"]
    report = _cudadiag("report", incident, cwd=tmp_path, CUDADIAG_LANG="ja").stdout
    assert re.search(r"[\u3040-\u30ff]{4}", report)
    english = _cudadiag("report", incident, cwd=tmp_path).stdout
    asked = _cudadiag("report", incident, "--lang", "en", cwd=tmp_path,
                      CUDADIAG_LANG="ja").stdout
    assert asked == english
    (tmp_path / "job.log").write_text(run.stderr)
    explained = _cudadiag("explain", "job.log", cwd=tmp_path, CUDADIAG_LANG="ja").stdout
    assert english_left(QUOTED.sub(" ", explained), verbatim=tuple(TRAIN.splitlines())) == []
