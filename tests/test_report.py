"""One report renderer, scrubbed, behind the panel, `%cudadiag report` and `cudadiag report`."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from cudadiag import Panel, classify
from cudadiag.incident import ErrorInfo, Frame, Incident, RunInfo
from cudadiag.log.store import IncidentStore
from cudadiag.repro.report import render_report
from scenarios import run

HOME = str(Path.home())
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"
CELL = (f'token = "{HF}"\n'
        f'data = "{HOME}/private/train.pt"\n'
        'x = load(data, password="hunter22")  # see ' + HOME + "/notes.txt\n"
        f"secret = {AWS_SECRET!r}\n")


def _incident() -> Incident:
    message = f"CUDA error: device-side assert triggered ({HOME}/private/train.pt, {HF})"
    frame = Frame(file="<ipython-input-3-x>", line=3, function="<module>", cell=3,
                  source='x = load(data, password="hunter22")')
    return Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message,
                                    traceback=[frame], reported_at=frame),
                    diagnosis=classify(message),
                    run=RunInfo(mode="kernel", cells=[3], sources={"3": CELL}))


@pytest.fixture
def stored(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    incident = _incident()
    IncidentStore().append(incident)
    return incident


def _assert_scrubbed(report: str) -> None:
    for secret in (HF, AWS_SECRET, "hunter22", f"{HOME}/"):
        assert secret not in report, secret
    assert report.startswith("## device_assert: ")
    assert "[REDACTED:AWS_SECRET_ACCESS_KEY]" in report
    assert "~/private/train.pt" in report
    (code,) = re.findall(r"```python\n(.*?)```", report, re.DOTALL)
    ast.parse(code)


def test_the_panels_report_to_copy_is_the_scrubbed_report_under_a_line_naming_it(stored):
    panel = Panel(stored.id, store=IncidentStore())
    panel.copy.click()
    first, blank, report = panel.report.value.split("\n", 2)
    assert first.startswith(f"**cudadiag incident** `{stored.id}` (")
    assert "In[3]" in first and blank == ""
    _assert_scrubbed(report)
    assert report == render_report(stored)


def test_the_report_magic_prints_the_scrubbed_report(shell, stored, capsys):
    capsys.readouterr()
    run(shell, f"%cudadiag report {stored.id}")
    out = capsys.readouterr().out
    _assert_scrubbed(out)
    assert out.rstrip("\n") == render_report(stored).rstrip("\n")


def test_the_report_command_prints_the_scrubbed_report(stored, capsys):
    from cudadiag import cli

    assert cli.main(["report", stored.id[:6]]) == 0
    out = capsys.readouterr().out
    _assert_scrubbed(out)
    assert out.rstrip("\n") == render_report(stored).rstrip("\n")


def test_there_is_one_markdown_renderer():
    from cudadiag.ui import render

    assert not [name for name in dir(render) if "markdown" in name.lower()]


def test_the_batch_values_are_shown_to_four_significant_digits():
    import torch

    from cudadiag import summarize
    from cudadiag.incident import BatchInfo

    batch = BatchInfo(**vars(summarize({"x": torch.tensor([-2.7184, 2.2496])})))
    report = render_report(dataclasses.replace(_incident(), batch=batch))
    assert "values -2.718..2.25" in report
