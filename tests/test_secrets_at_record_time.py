"""A secret of the environment that reaches an error message is masked when the incident is
recorded, by the process that knows it: a report printed later, from a shell that does not
know the secret, cannot show it (the `cudadiag run` parent, the kernel)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from scenarios import run

pytestmark = pytest.mark.slow

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"
UPLOADS = """\
import os
import torch

bucket_key = os.environ["AWS_SECRET_ACCESS_KEY"]
torch.ones(2).sum()
raise RuntimeError(f"CUDA error: an illegal memory access was encountered (upload {bucket_key})")
"""


def _elsewhere(*args: str) -> str:
    """What `cudadiag ARGS` prints from a shell whose environment lacks the secret."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_SECRET_ACCESS_KEY"}
    done = subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _every_later_output(cudadiag_home) -> dict[str, str]:
    outputs = {" ".join(words): _elsewhere(*words) for words in (
        ["report"], ["show"], ["show", "--json"], ["incidents"])}
    with sqlite3.connect(cudadiag_home / "incidents.sqlite3") as db:
        outputs["the log"] = "\n".join(row for (row,) in db.execute(
            "SELECT summary || coalesce(script, '') || record FROM incidents"))
    outputs["the log's files"] = "".join(p.read_bytes().decode("utf-8", "replace")
                                         for p in cudadiag_home.glob("incidents.*"))
    return outputs


def test_a_secret_in_a_scripts_error_never_reaches_a_later_report(tmp_path, cudadiag_home):
    (tmp_path / "uploads.py").write_text(UPLOADS)
    ran = subprocess.run([sys.executable, "-m", "cudadiag.cli", "run", "--", "python",
                          "uploads.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "AWS_SECRET_ACCESS_KEY": SECRET})
    assert ran.returncode == 1 and "illegal memory access" in ran.stderr, ran.stderr
    outputs = _every_later_output(cudadiag_home)
    assert {name: SECRET in text for name, text in outputs.items()} == dict.fromkeys(
        outputs, False)
    assert "(upload [REDACTED:AWS_SECRET_ACCESS_KEY])" in outputs["show"]


def test_a_secret_in_a_cells_error_never_reaches_a_later_report(shell, monkeypatch,
                                                                cudadiag_home):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # the kernel's os.environ
    result, _ = run(shell, UPLOADS.replace("import torch", "import torch  # the cell"))
    assert result.error_in_exec is not None
    outputs = _every_later_output(cudadiag_home)
    assert {name: SECRET in text for name, text in outputs.items()} == dict.fromkeys(
        outputs, False)
    assert "(upload [REDACTED:AWS_SECRET_ACCESS_KEY])" in outputs["report"]
