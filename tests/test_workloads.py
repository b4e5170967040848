"""Realistic workloads, run the way users run them (issue 10, item 8): two scripts through
`cudadiag run` and `cudadiag export`, two notebooks in a real kernel with `%cuda_isolate` and
`%cudadiag export`, all on the simulated device. Each must name the operator, the offending
value and the iteration, and give a repro that reproduces from another directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from tests.workloads.notebooks import CHAR_MLP, CURRICULUM, notebook, write_labels, write_names

from cudadiag import incidents

WORKLOADS = Path(__file__).parent / "workloads"
pytestmark = pytest.mark.slow


def cudadiag(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def run_script(tmp_path: Path, script: str, *args: str) -> tuple[str, object, Path]:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(WORKLOADS / script, project / script)
    ran = cudadiag("run", "--", sys.executable, script, "--simulated", *args, cwd=project)
    assert ran.returncode == 1, ran.stderr[-2000:]
    (incident,) = incidents()
    return ran.stderr, incident, project


def export_and_run_elsewhere(incident_id: str, tmp_path: Path, cwd: Path) -> str:
    """Export a .py repro (data bundled), then run it from yet another folder; return what
    the repro printed on stderr."""
    out = tmp_path / "out"
    out.mkdir()
    done = cudadiag("export", incident_id, str(out / "repro.py"), "--bundle", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduces: yes" in done.stdout
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    ran = subprocess.run([sys.executable, "repro.py"], cwd=moved, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode != 0
    return ran.stderr


def test_an_image_classifier_script_with_a_dataloader(tmp_path):
    err, incident, project = run_script(tmp_path, "train_classifier.py")
    # the script's own traceback, as Python prints it, then the diagnosis
    assert err.index("Traceback (most recent call last):") < err.index("cudadiag [")
    assert "aten::nll_loss_forward: target 10 at position 9 outside [0, 10)" in err
    assert "loop: epoch=1 (train_classifier.py in main) › batch_idx=3" in err
    assert incident.diagnosis.family == "device_assert" and incident.run.simulated
    repro = export_and_run_elsewhere(incident.id, tmp_path, project)
    assert "device-side assert triggered" in repro or "target 10" in repro


def test_a_language_model_script_slicing_a_token_stream(tmp_path):
    err, incident, project = run_script(tmp_path, "word_lm.py")
    assert "aten::embedding: indices values [25, 25, 25, 25]" in err
    assert "outside [0, 25)" in err
    assert "loop: epoch=1, batch=2, i=10 (word_lm.py in main)" in err
    assert "a token id equals the vocabulary size (25)" in err
    repro = export_and_run_elsewhere(incident.id, tmp_path, project)
    assert "device-side assert triggered" in repro or "outside [0, 25)" in repro


def execute(nb: nbformat.NotebookNode, folder: Path) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def text_of(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            parts.append(output.data.get("text/plain", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "".join(parts)


def run_notebook(tmp_path: Path, cells: list[str], write_data) -> tuple[list[str], Path]:
    """Run the notebook, then `%cuda_isolate` and an export (in the foreground: nbclient
    ends with the last cell); return each cell's text output and the project folder."""
    project = tmp_path / "project"
    project.mkdir()
    write_data(project)
    nb = execute(notebook([*cells, "%cuda_isolate",
                           "%cudadiag export repro.ipynb --bundle --wait"]), project)
    return [text_of(c) for c in nb.cells], project


def reproduces_elsewhere(tmp_path: Path, project: Path) -> str:
    """Run the exported notebook (with its side files) from another folder; return the error
    it ends with."""
    moved = tmp_path / "moved"
    moved.mkdir()
    for path in project.iterdir():
        if path.name.startswith("repro"):
            (shutil.copytree if path.is_dir() else shutil.copy)(path, moved / path.name)
    nb = execute(nbformat.read(moved / "repro.ipynb", as_version=4), moved)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert errors, "the repro notebook ran without error"
    return f"{errors[0].ename}: {errors[0].evalue}"


def test_a_character_mlp_notebook_with_unseeded_minibatches(tmp_path):
    outputs, project = run_notebook(tmp_path, CHAR_MLP, write_names)
    failing, isolated, exported = outputs[-3:]
    assert "device-side assert triggered" in failing
    assert "loop when the error was noticed" in failing and "i=" in failing
    assert isolated.count("hidden; --show-replay to see them") >= 2  # replayed output folded
    assert "reproduced: same failure (device_assert)" in isolated
    assert "aten::nll_loss_forward: target 26" in isolated and "outside [0, 26)" in isolated
    # the minibatch is unseeded: with or without a '.' (class 0), both readings are named
    assert "check first: target 26 for 26 output columns (valid [0, 26)" in isolated
    assert "a class the model was not built for" in isolated
    assert "labels numbered 1..26" in isolated
    assert "reproduces: yes" in exported
    assert "device-side assert triggered" in reproduces_elsewhere(tmp_path, project)


def test_a_full_batch_notebook_that_redraws_its_output(tmp_path):
    outputs, project = run_notebook(tmp_path, CURRICULUM, write_labels)
    failing, isolated, exported = outputs[-3:]
    assert "step=116" in failing
    assert "reproduced: same failure (device_assert)" in isolated
    assert "aten::nll_loss_forward: target 2 at position 17 outside [0, 2)" in isolated
    assert "loop: step=116" in isolated
    # the cell's clear_output() redraws stay redraws: no line per step piles up
    assert "\x1b[2K" not in isolated and "step 3: 29 samples" in isolated
    assert "\nstep 3:" not in isolated
    assert "reproduces: yes" in exported
    assert "device-side assert triggered" in reproduces_elsewhere(tmp_path, project)
