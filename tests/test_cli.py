"""The `cudadiag` command, through subprocess calls as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRAIN = """\
import argparse
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import cudadiag

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--bad", action="store_true")
args = parser.parse_args()
labels = torch.tensor([i % 4 for i in range(40)])
if args.bad:
    labels[27] = 4  # only in the 4th batch
loader = DataLoader(TensorDataset(torch.randn(40, 8), labels), batch_size=8)
model = torch.nn.Linear(8, 4)
for epoch in range(args.epochs):
    for x, y in cudadiag.watch(loader):
        loss = F.cross_entropy(model(x), y)
        print("loss", round(loss.item(), 3))
"""


def cudadiag(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(TRAIN)
    return tmp_path


def test_a_script_that_fails_on_its_fourth_batch(project):
    run = cudadiag("run", "--json", "incident.json", "--", sys.executable, "train.py",
                   "--epochs", "1", "--bad", cwd=project)
    assert run.returncode == 1
    assert run.stdout.count("loss ") == 3  # three good batches, streamed
    assert "cudadiag [" in run.stderr and "target 4 at position 3" in run.stderr
    incident = json.loads((project / "incident.json").read_text())
    assert incident["run"]["mode"] == "cli" and incident["diagnosis"]["family"] == (
        "index_out_of_bounds")
    assert incident["step"]["iteration"] == 3 and incident["op"]["name"] == (
        "aten::nll_loss_forward")
    assert incident["error"]["reported_at"]["file"].endswith("train.py")
    assert incident["run"]["command"] == ["train.py", "--epochs", "1", "--bad"]
    listing = cudadiag("incidents", "--family", "index_out_of_bounds").stdout
    assert incident["id"] in listing
    shown = cudadiag("show", incident["id"][:6])
    assert shown.returncode == 0 and "aten::nll_loss_forward" in shown.stdout
    report = cudadiag("report", incident["id"])
    assert report.returncode == 0 and report.stdout.startswith("## index_out_of_bounds")


def test_a_script_that_succeeds_keeps_its_exit_code(project):
    run = cudadiag("run", "train.py", cwd=project)
    assert run.returncode == 0 and run.stdout.count("loss ") == 5
    assert "finished without error" in run.stderr
    (project / "exits.py").write_text("import sys\nsys.exit(3)\n")
    assert cudadiag("run", "exits.py", cwd=project).returncode == 3


def test_python_dash_m_module_as_typed(project):
    run = cudadiag("run", "--", sys.executable, "-m", "trainer.main", "--bad", cwd=project)
    assert run.returncode == 1 and "target 4 at position 3" in run.stderr


@pytest.mark.parametrize("args", [["run"], ["run", "missing.py"], ["frobnicate"],
                                  ["run", "--timeout", "soon", "train.py"], ["show", "a", "b"],
                                  ["export", "abc"]])
def test_bad_arguments_exit_2_with_usage(project, args):
    result = cudadiag(*args, cwd=project)
    assert result.returncode == 2
    assert "usage:" in result.stderr or "no such script" in result.stderr


@pytest.mark.parametrize("command", ["run", "env", "incidents", "show", "report", "export",
                                     "demo"])
def test_help_on_each_command(command):
    result = cudadiag(command, "--help")
    assert result.returncode == 0 and f"usage: cudadiag {command}" in result.stdout


def test_unknown_incident_is_a_clear_error():
    result = cudadiag("report", "nope")
    assert result.returncode == 1 and "holds no incident yet" in result.stderr


def test_export_of_a_module_incident_says_what_to_do(project):
    cudadiag("run", "--", sys.executable, "-m", "trainer.main", "--bad", cwd=project)
    incident_id = cudadiag("incidents").stdout.splitlines()[-1].split()[0]
    result = cudadiag("export", incident_id, "out.ipynb", cwd=project)
    assert result.returncode == 1 and "only scripts can be exported" in result.stderr


def test_export_of_an_isolated_incident_from_the_shell(project):
    from cudadiag import run_isolated

    run_isolated("F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))",
                 cells=["import torch\nimport torch.nn.functional as F", "unrelated = 1"],
                 stream=False)
    incident_id = cudadiag("incidents").stdout.splitlines()[-1].split()[0]
    result = cudadiag("export", incident_id, "out.ipynb", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "reproduces: yes" in result.stdout and "kept 2 of 3 cells" in result.stdout
    assert (project / "out.ipynb").exists()


def test_demo_prints_the_diagnosis():
    result = cudadiag("demo")
    assert result.returncode == 0
    assert "Device-side assertion" in result.stdout + result.stderr
    assert "RESTART REQUIRED" in result.stdout


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("RuntimeError: CUDA error: device-side assert triggered\n")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`| head -1`) is gone before the first line comes
    try:
        result = subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", str(log)],
                                stdout=write_end, stderr=subprocess.PIPE, text=True,
                                timeout=300)
    finally:
        os.close(write_end)
    assert result.returncode == 141
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
