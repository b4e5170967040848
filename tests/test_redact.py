"""Redaction: nothing personal survives a report or an exported notebook."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import nbformat
import pytest

from cudadiag import classify
from cudadiag.incident import EnvInfo, ErrorInfo, Frame, Incident, RunInfo
from cudadiag.repro.minimize import Signature
from cudadiag.repro.notebook import export_notebook
from cudadiag.repro.redact import Redactor, redact
from cudadiag.repro.report import render_report

USER = getpass.getuser()
HOST = socket.gethostname()
HOME = str(Path.home())

SECRETS = {
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWx",
    "openai": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "github": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "email": "jane.doe+ml@example-corp.com",
    "ipv4": "192.168.17.42",
    "ipv6": "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "password": "password=hunter2hunter2",
}

SAMPLE = "\n".join([
    f"Traceback: File \"{HOME}/projects/secret-model/train.py\", line 3",
    f"host {HOST} user {USER} at {USER}@{HOST}:~$",
    f"data from /mnt/{USER}/datasets/private/images/batch_0001.pt",
    "docs at https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    *SECRETS.values(),
    "HF_TOKEN='hf_ZZZZZZZZZZZZZZZZZZZZZZZZ' api_key: abcdef123456",
])


def test_nothing_personal_survives():
    out = Redactor(project=None)(SAMPLE)
    for name, secret in SECRETS.items():
        assert secret not in out, name
    assert HOME not in out and "hf_ZZZZ" not in out and "abcdef123456" not in out
    for word in (USER, HOST):
        if len(word) >= 2 and word != "localhost":
            assert not any(part == word for part in _words(out)), word
    assert "~/projects/secret-model/train.py" in out
    assert ".../images/batch_0001.pt" in out  # absolute paths outside the project shortened
    assert "https://docs.nvidia.com/cuda/cuda-runtime-api" in out  # URLs stay usable


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[\w-]+", text)


def test_paths_inside_the_project_become_relative(tmp_path):
    scrub = Redactor(project=str(tmp_path))
    assert scrub(f"{tmp_path}/src/model.py:12") == "./src/model.py:12"


def test_timestamps_and_versions_are_not_mistaken_for_addresses():
    assert redact("at 12:44:31 torch 2.13.0") == "at 12:44:31 torch 2.13.0"
    assert Redactor(addresses=False)("cuDNN 9.1.0.70") == "cuDNN 9.1.0.70"


def _incident(text: str) -> Incident:
    frame = Frame(file=f"{HOME}/work/train.py", line=3, function="<module>",
                  source=f"token = '{SECRETS['hf']}'")
    return Incident(
        error=ErrorInfo(type="RuntimeError", message=text.splitlines()[0], text=text,
                        traceback=[frame], reported_at=frame),
        diagnosis=classify(text),
        run=RunInfo(mode="isolated", sources={"1": f"print('{SECRETS['email']}')\n"
                                                    f"x = '{HOME}/data'"}),
        env=EnvInfo(torch="2.13.0", python="3.11.7", cudnn="9.1.0.70", backend="cuda"),
    )


@pytest.mark.parametrize("render", ["report", "notebook"])
def test_reports_and_notebooks_carry_no_secrets(tmp_path, render):
    incident = _incident(f"CUDA error: device-side assert triggered\n{SAMPLE}")
    if render == "report":
        text = render_report(incident)
        assert "cuDNN 9.1.0.70" in text  # versions survive
    else:
        path = tmp_path / "r.ipynb"
        export_notebook(incident, path, {1: incident.run.sources["1"]},
                        signature=Signature.of(incident), verify=False)
        text = path.read_text()
        nbformat.validate(nbformat.read(path, as_version=4))
    for name, secret in SECRETS.items():
        assert secret not in text, name
    assert HOME not in text
