"""The export of a repro and the report for a tracker, in Japanese (docs/languages.md): the
repro's header and verdict in the user's language at export time, its code as in English;
`report` in Japanese, and `report --lang en` from a Japanese session the English report."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cudadiag import classify, i18n, incidents
from cudadiag.incident import (
    BatchInfo,
    ErrorInfo,
    Frame,
    Incident,
    OpInfo,
    RunInfo,
    StepInfo,
    TensorSummary,
)
from cudadiag.log.store import IncidentStore
from cudadiag.ui.render import environment_lines, frame_text
from scenarios import run
from untranslated import english_left

TRAIN = """\
import torch
import torch.nn.functional as F

scale = 2.0
logits = torch.zeros(4, 3) * scale
unused = torch.ones(5).sum()
target = torch.tensor([0, 1, 2, 3])
loss = F.cross_entropy(logits, target)
"""
MESSAGE = "Target 3 is out of bounds."


def cudadiag(*args: str, cwd: Path, lang: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"CUDADIAG_LANG": lang} if lang else {})}
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _others(incident: Incident) -> tuple[str, ...]:
    """What the report quotes (the error's own lines) and the sentences other areas write in
    it (the diagnosis, its first checks and conclusions to avoid, the precheck, the
    environment's lines, where the error was reported), as Japanese shows them: their own
    tests check them; these tests check what the export and the report write around them."""
    with i18n.using("ja"):
        d = incident.diagnosis
        frame = incident.error.reported_at
        precheck = incident.op.precheck if incident.op else None
        return (*incident.error.text.splitlines(), i18n.localize(d.summary),
                *i18n.localize_all([*d.first_checks, *d.avoid]),
                *([i18n.localize(precheck)] if precheck else []),
                *environment_lines(incident.env), *([frame_text(frame)] if frame else []))


@pytest.mark.slow
def test_a_repro_exported_in_japanese_has_its_header_and_verdict_in_japanese(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    ran = cudadiag("run", "--", sys.executable, "train.py", cwd=project)
    assert ran.returncode == 1, ran.stderr
    (incident,) = incidents()
    folders = {name: tmp_path / name for name in ("en", "ja")}
    for name, folder in folders.items():
        folder.mkdir()
        done = cudadiag("export", incident.id, "repro.ipynb", cwd=folder,
                        lang=name if name == "ja" else None)
        assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout[done.stdout.index("cudadiag の再現"):]
    assert "cudadiag の再現ノートブック: " in printed and "再現: はい" in printed, printed
    assert "7 文中 6 文を残しました" in printed, printed
    assert english_left(printed) == [], printed

    english, japanese = (nbformat.read(f / "repro.ipynb", as_version=4) for f in
                         folders.values())
    assert [c.source for c in japanese.cells if c.cell_type == "code"] == \
        [c.source for c in english.cells if c.cell_type == "code"]
    assert japanese.metadata["cudadiag"] == english.metadata["cudadiag"]
    header, closing = (c.source for c in japanese.cells if c.cell_type == "markdown")
    assert header.startswith("# 縮小した再現\n")
    assert "新しいプロセスで確認しました（再現: はい）" in header, header
    assert MESSAGE in header  # PyTorch's message, verbatim
    assert "## 最初の確認" in closing and "## 避けるべき結論" in closing
    others = _others(incident)
    assert english_left(header, verbatim=others) == [], header
    assert english_left(closing, verbatim=others) == [], closing

    done = cudadiag("export", incident.id, "repro.py", cwd=folders["ja"], lang="ja")
    assert "cudadiag の再現スクリプト: " in done.stdout, done.stdout + done.stderr
    script = (folders["ja"] / "repro.py").read_text()
    assert script.startswith("# # 縮小した再現\n")
    assert "から生成しました。新しいプロセスで確認しました（再現: はい）。" in script
    code = [line for line in script.splitlines() if not line.startswith("#")]
    assert "loss = F.cross_entropy(logits, target)" in code and "unused = " not in script


def _incident() -> Incident:
    message = "CUDA error: device-side assert triggered"
    frame = Frame(file="<ipython-input-3-x>", line=2, function="<module>", cell=3,
                  source="loss = F.cross_entropy(logits, target)")
    target = TensorSummary(path="batch['labels']", dtype="torch.int64", shape=[4],
                           device="cuda:0", stride=[1], contiguous=True, numel=4, min=0,
                           max=7)
    return Incident(
        error=ErrorInfo(type="RuntimeError", message=message, text=message,
                        traceback=[frame], reported_at=frame),
        diagnosis=classify(message),
        op=OpInfo(name="aten::nll_loss_forward", args=[]),
        step=StepInfo(iteration=12, last_completed=11, last_incomplete=True),
        batch=BatchInfo(structure="dict", tensors=[target]),
        run=RunInfo(mode="kernel", cells=[3], simulated=True,
                    sources={"3": "loss = F.cross_entropy(logits, target)\n"}))


def test_the_report_command_writes_japanese_and_english_on_request(tmp_path):
    incident = _incident()
    IncidentStore().append(incident)
    english = cudadiag("report", incident.id, cwd=tmp_path)
    japanese = cudadiag("report", incident.id, cwd=tmp_path, lang="ja")
    asked = cudadiag("report", incident.id, "--lang", "en", cwd=tmp_path, lang="ja")
    assert english.returncode == japanese.returncode == asked.returncode == 0, asked.stderr
    assert asked.stdout == english.stdout
    assert "**First relevant message** (later errors are its consequences):" in english.stdout
    report = japanese.stdout
    for line in ("**演算子：** `aten::nll_loss_forward()`",
                 "**最初の該当メッセージ**（後のエラーはその結果です）：",
                 "**ステップ：** 12（最後に完了したステップは 11、最後の不完全なバッチ）",
                 "- `batch['labels']`: torch.int64 [4]、デバイス cuda:0、ストライド [1]、値 0..7",
                 "**実行：** kernel、ブロッキング起動オフ"):
        assert line in report, report
    assert "CUDA error: device-side assert triggered" in report  # verbatim
    assert english_left(report, verbatim=_others(incident)) == [], report


def test_the_report_magic_takes_lang(shell, capsys):
    incident = dataclasses.replace(_incident(), step=None, batch=None)
    IncidentStore().append(incident)
    run(shell, "%cudadiag lang ja")
    capsys.readouterr()
    run(shell, f"%cudadiag report {incident.id}")
    japanese = capsys.readouterr().out
    run(shell, f"%cudadiag report {incident.id} --lang en")
    english = capsys.readouterr().out
    with i18n.using("en"):
        from cudadiag.repro.report import render_report

        assert english.rstrip("\n") == render_report(incident).rstrip("\n")
    assert re.search(r"^\*\*実行：\*\* kernel", japanese, re.MULTILINE), japanese
    assert "**Run:** kernel" in english
