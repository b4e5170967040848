"""Repros of ordinary programs stand alone: the environment variables the program read are
set at the repro's top, its own package travels with `--bundle` (and the check runs where
its imports resolve without it), a failure that takes a while is given the time `--timeout`
allows, and the minimized program still defines every option and keeps every setting the
kept code depends on. Each repro is then run again from another folder, in a fresh process
or kernel that has none of the program's variables."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from tests.workloads.notebooks import notebook
from tests.workloads.sorting import SORT_GPT, copy_mingpt

from cudadiag import incidents

WORKLOADS = Path(__file__).parent / "workloads"
PROGRAM_VARIABLES = ("GPT_SMALL", "FAULT", "HF_TOKEN", "SORT_SEP")
HUB_TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm"
pytestmark = pytest.mark.slow


def _shell(**variables: str) -> dict[str, str]:
    """This process's environment without the programs' variables, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in PROGRAM_VARIABLES}
    return {**env, **variables}


def cudadiag(*args: str, cwd: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, env=_shell(**variables))


def python(script: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python script` in a fresh process, none of the programs' variables set."""
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=_shell())


def _project(tmp_path: Path, *scripts: str) -> tuple[Path, Path]:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    for script in scripts:
        shutil.copy(WORKLOADS / script, project / script)
    return project, elsewhere


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1] if stderr.strip() else ""


def test_the_variables_a_script_read_are_set_at_the_top_of_its_repro(tmp_path, cudadiag_home):
    project, elsewhere = _project(tmp_path, "gpt_env.py")
    shell = {"GPT_SMALL": "1", "FAULT": "token", "HF_TOKEN": HUB_TOKEN}
    ran = cudadiag("run", "--", sys.executable, "gpt_env.py", cwd=project, **shell)
    assert ran.returncode == 1, ran.stderr[-2000:]
    (incident,) = incidents()

    done = cudadiag("export", incident.id, str(elsewhere / "repro.py"), cwd=project, **shell)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduces: yes" in done.stdout, done.stdout
    script = (elsewhere / "repro.py").read_text()
    assert "os.environ['GPT_SMALL'] = '1'" in script
    assert "os.environ['FAULT'] = 'token'" in script
    assert ("Environment variables the program reads, set at the top of this repro as its "
            "run had them: `GPT_SMALL=1`, `FAULT=token`.") in script
    assert HUB_TOKEN not in script
    rerun = python(elsewhere / "repro.py", tmp_path)  # no GPT_SMALL, no FAULT here
    assert _last_line(rerun.stderr) == "IndexError: index out of range in self", rerun.stderr
    # recorded with the incident: the token read, never its value
    assert incident.run.environ == {"GPT_SMALL": "1", "FAULT": "token",
                                    "HF_TOKEN": "[REDACTED:HF_TOKEN]"}
    with sqlite3.connect(cudadiag_home / "incidents.sqlite3") as db:
        assert all(HUB_TOKEN not in record for (record,) in db.execute(
            "SELECT record FROM incidents"))


def test_a_script_exported_from_another_shell_is_minimized_under_the_variables_it_read(
        tmp_path):
    project, elsewhere = _project(tmp_path, "gpt_env.py")
    ran = cudadiag("run", "--", sys.executable, "gpt_env.py", cwd=project, GPT_SMALL="1",
                   FAULT="token")
    assert ran.returncode == 1, ran.stderr[-2000:]
    (incident,) = incidents()
    done = cudadiag("export", incident.id, str(elsewhere / "repro.py"), cwd=elsewhere)
    assert "reproduces: yes" in done.stdout, done.stdout + done.stderr
    rerun = python(elsewhere / "repro.py", elsewhere)
    assert _last_line(rerun.stderr) == "IndexError: index out of range in self", rerun.stderr


def _execute(nb: nbformat.NotebookNode, folder: Path, **variables: str) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute(
        env=_shell(**variables))
    return nb


def _errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.outputs)


def _code(path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code")


def test_a_notebook_with_its_own_package_reproduces_where_its_imports_resolve(tmp_path):
    project, elsewhere = _project(tmp_path)
    copy_mingpt(project)
    nb = _execute(notebook([*SORT_GPT, "%cudadiag export repro.ipynb --wait",
                            "%cudadiag export bundled.ipynb --bundle --wait"]),
                  project, SORT_SEP="1")
    failing, plain, bundled = (_text(c) for c in nb.cells[-3:])
    assert "index out of range in self" in "".join(_errors(nb)), failing
    for exported in (plain, bundled):
        assert "reproduces: yes" in exported, exported
    for name in ("repro.ipynb", "bundled.ipynb"):
        code = _code(project / name)
        assert "os.environ['SORT_SEP'] = '1'" in code
        # the Trainer reads it: without it the repro starts 4 DataLoader workers
        assert "train_config.num_workers = 0" in code
    header = nbformat.read(project / "repro.ipynb", as_version=4).cells[0].source
    assert "Modules of its own the program imported: `mingpt`" in header
    assert "run this from the program's working directory" in header

    # the plain repro runs where the header says: the program's folder, a fresh kernel
    assert _errors(_execute(nbformat.read(project / "repro.ipynb", as_version=4),
                            project)) == ["IndexError: index out of range in self"]
    # the bundled one anywhere: it carries the package
    for path in project.iterdir():
        if path.name.startswith("bundled"):
            (shutil.copytree if path.is_dir() else shutil.copy)(path, elsewhere / path.name)
    assert (elsewhere / "bundled.files" / "mingpt" / "model.py").exists()
    shutil.rmtree(project / "mingpt")
    assert _errors(_execute(nbformat.read(elsewhere / "bundled.ipynb", as_version=4),
                            elsewhere)) == ["IndexError: index out of range in self"]


def test_a_failure_that_takes_a_while_exports_within_the_timeout_given(tmp_path):
    project, elsewhere = _project(tmp_path, "slow_failure.py")
    ran = cudadiag("run", "--", sys.executable, "slow_failure.py", cwd=project)
    assert ran.returncode == 1, ran.stderr[-2000:]
    (incident,) = incidents()
    assert incident.run.wall_s and incident.run.wall_s > 3  # six shards of 0.6 s first

    short = cudadiag("export", incident.id, str(elsewhere / "repro.py"), "--timeout", "2",
                     cwd=project)
    assert short.returncode == 1
    assert "the program did not fail within 2 s, the export's time budget (--timeout 2)" \
        in short.stderr, short.stderr
    assert "export again with more time, e.g. --timeout 60" in short.stderr
    assert not (elsewhere / "repro.py").exists()  # nothing written

    done = cudadiag("export", incident.id, str(elsewhere / "repro.py"), "--timeout", "90",
                    cwd=project)
    assert "reproduces: yes" in done.stdout, done.stdout + done.stderr
    rerun = python(elsewhere / "repro.py", tmp_path)
    assert _last_line(rerun.stderr) == "IndexError: Target 4 is out of bounds.", rerun.stderr


def test_a_candidate_that_hangs_is_stopped_and_the_search_goes_on():
    from cudadiag.repro.minimize import minimize

    cells = {
        1: "import time\nimport torch",
        2: "print('loading')",
        3: "ready = True  # set by the loader thread, in the real program",
        4: "while not globals().get('ready'):\n    time.sleep(0.1)\n"
           "targets = torch.tensor([4])",
        5: "print('ready')",
        6: "steps = 3",
        7: "torch.nn.functional.cross_entropy(torch.zeros(1, 4), targets)",
    }
    # a candidate that keeps the wait but not the flag waits forever: under a fixed cap
    # longer than the budget, the first one takes what is left of it and the search stops
    result = minimize(cells, timeout=120)
    assert result.stopped is None, result.stopped
    assert result.cells == {1: "import torch", 4: "targets = torch.tensor([4])",
                            7: cells[7]}, result.cells


def test_an_option_the_kept_code_reads_stays_defined(tmp_path):
    project, elsewhere = _project(tmp_path, "train_options.py")
    rows = [f"{i % 7 / 7:.3f},{i % 5 / 5:.3f},{i % 3}" for i in range(64)]
    rows[43] = rows[43][:-1] + "3"  # a label past the last of 3 classes
    (project / "rows.csv").write_text("\n".join(rows) + "\n")
    ran = cudadiag("run", "--", sys.executable, "train_options.py", "--data", "rows.csv",
                   "--save", "linear.pt", cwd=project)
    assert ran.returncode == 1, ran.stderr[-2000:]
    (incident,) = incidents()
    done = cudadiag("export", incident.id, str(elsewhere / "repro.py"), "--bundle",
                    cwd=project)
    assert "reproduces: yes" in done.stdout, done.stdout + done.stderr
    script = (elsewhere / "repro.py").read_text()
    # the epoch loop saves after its batches: never reached before the failure, and kept
    assert "open(args.save, \"wb\")" in script
    assert 'parser.add_argument("--save"' in script
    rerun = python(elsewhere / "repro.py", tmp_path)
    assert _last_line(rerun.stderr) == "IndexError: Target 3 is out of bounds.", rerun.stderr

    copy = elsewhere / "repro.files" / "rows.csv"  # the data fixed: the program runs on
    copy.write_text(copy.read_text().replace(rows[43], rows[43][:-1] + "2"))
    fixed = python(elsewhere / "repro.py", tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert "weights saved to linear.pt" in fixed.stdout
