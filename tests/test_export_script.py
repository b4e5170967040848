"""`cudadiag export` of a `cudadiag run` incident: the script's top-level statements and the
loop that failed are minimized; the repro keeps the command line and runs as a script or a
notebook."""

from __future__ import annotations

import re
import subprocess
import sys

import nbformat
import pytest

from cudadiag import incidents

pytestmark = pytest.mark.slow

TRAIN = """\
import argparse
import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--bad", action="store_true")
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()
print("starting")
with open("classes.txt") as f:
    classes = f.read().split()
model = torch.nn.Linear(8, len(classes))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    x = torch.randn(16, 8)  # unseeded: each step draws new numbers
    high = len(classes) + (1 if args.bad and step >= 30 else 0)
    y = torch.randint(0, high, (16,))
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("done")
"""


def _failing_step(incident) -> int:
    """The value of the loop variable `step` when the incident was raised."""
    (step,) = [int(loop.values["step"]) for frame in incident.loop.frames
               for loop in frame.loops if "step" in loop.values]
    return step


def cudadiag(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def script_incident(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "train.py").write_text(TRAIN)
    (project / "classes.txt").write_text("cat dog bird fish\n")
    ran = cudadiag("run", "--", sys.executable, "train.py", "--bad", cwd=project)
    assert ran.returncode == 1, ran.stderr
    (incident,) = incidents()
    assert incident.run.command == ["train.py", "--bad"]
    return incident, project, elsewhere


def test_a_script_exports_to_a_py_that_runs_anywhere(script_incident):
    incident, project, elsewhere = script_incident
    done = cudadiag("export", incident.id, "repro.py", "--bundle", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "cudadiag repro script:" in done.stdout and "reproduces: yes" in done.stdout
    assert incident.run.cwd == str(project)  # recorded: the trials and the check ran there
    # unseeded draws: the first bad step is 30 or, rarely (no label 4 drawn at step 30), a
    # later one, in the recorded run and again in the minimizer's own reference run, whose
    # random states the cut restores
    assert _failing_step(incident) >= 30
    cut = re.search(r"loop cut to step: only (\d+), from its random states", done.stdout)
    assert cut, done.stdout
    failing = int(cut.group(1))
    assert failing >= 30
    script = (elsewhere / "repro.py").read_text()
    assert "# Command line: `train.py --bad`" in script
    assert "sys.argv = ['train.py', '--bad']" in script
    assert f"for step in range({failing}, {failing + 1}):" in script
    assert f"restore_rng('In[1] step={failing}')" in script
    assert "open('repro.files/classes.txt')" in script
    assert 'print("starting")' not in script  # not needed to fail
    (project / "classes.txt").unlink()
    for cwd in (elsewhere, project, project.parent):  # its folder, the program's, another
        rerun = subprocess.run([sys.executable, str(elsewhere / "repro.py")], cwd=cwd,
                               capture_output=True, text=True, timeout=300)
        assert rerun.stderr.strip().splitlines()[-1] == "IndexError: Target 4 is out of bounds."


def test_a_script_exports_to_a_notebook(script_incident):
    incident, _, elsewhere = script_incident
    done = cudadiag("export", incident.id, str(elsewhere / "repro.ipynb"), "--timeout", "30",
                    cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "reproduces: yes" in done.stdout
    nb = nbformat.read(elsewhere / "repro.ipynb", as_version=4)
    assert nb.metadata["cudadiag"]["reproduces"] is True
    assert any("sys.argv = ['train.py', '--bad']" in c.source for c in nb.cells)
