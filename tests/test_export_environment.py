"""Repros start from the environment a fresh process gets: the minimizer's trials and the
verification run do not inherit what the user's cells set in os.environ, so a statement that
sets a variable the program reads stays in the repro; the repro's header states the verdict
and the places where a value was redacted."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from cudadiag import incidents
from scenarios import run

pytestmark = pytest.mark.slow

SETUP = ("import os, torch\n"
         "from cudadiag.testing import simulated_cuda; sim = simulated_cuda().start()")
READ_IDS = (
    "rows = [list(map(int, l.split())) for l in open(os.path.join(os.environ['DATA_DIR'], "
    "'ids.txt'))]\n"
    "table = torch.randn(10, 4); acc = torch.zeros(4)\n"
    "for r, row in enumerate(rows): acc += table[torch.tensor(row)].sum(0)\n"
    "acc.sum().item()"
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A notebook's folder whose data (inputs/ids.txt) holds an index past the table's end;
    variables the cells set are taken out of this process again afterwards."""
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "ids.txt").write_text("1 2 3\n4 12 5\n")
    monkeypatch.chdir(tmp_path)
    for name in ("DATA_DIR", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    for name in ("DATA_DIR", "HF_TOKEN"):
        os.environ.pop(name, None)


def _code(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def _fail_reading_ids(shell, capsys, setup: str, in_loop: str) -> None:
    """Run SETUP plus `setup`, then READ_IDS from './inputs' with `in_loop` as the loop's
    first statement (the table lookup fails after it); forget the output."""
    run(shell, f"{SETUP}\n{setup}")
    run(shell, READ_IDS.replace("os.environ['DATA_DIR']", "'inputs'").replace(
        "for r, row in enumerate(rows): acc",
        f"for r, row in enumerate(rows):\n    {in_loop}\n    acc"))
    capsys.readouterr()


def _first_error(path, cwd):
    """The first error of the notebook run in a fresh kernel started in `cwd`, from the
    environment this test process started with (nothing a cell set)."""
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "HF_TOKEN")}
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    return next(o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error")


def _assert_redacted_at(nb, line: str) -> None:
    """The header names the cell and line (counted in the repro's cell) where `line` is."""
    found = re.search(r"In\[(\d+)\] line (\d+): a value was redacted \(`(.*)`\)",
                      nb.cells[0].source)
    assert found and found.group(3) == line, nb.cells[0].source
    (cell,) = [c for c in nb.cells if c.source.startswith(f"# In[{found.group(1)}]\n")]
    assert cell.source.splitlines()[int(found.group(2)) - 1] == line


@pytest.mark.parametrize(("sets", "kept"), [
    ("os.environ['DATA_DIR'] = 'inputs'", "os.environ['DATA_DIR'] = 'inputs'"),
    ("%env DATA_DIR=inputs", "import os; os.environ['DATA_DIR'] = 'inputs'"),
])
def test_a_variable_set_in_a_cell_and_read_later_stays_in_the_repro(shell, capsys, project,
                                                                     sets, kept):
    run(shell, SETUP)
    run(shell, sets)
    run(shell, READ_IDS)
    capsys.readouterr()
    run(shell, f"%cudadiag export {project / 'r7.ipynb'}")
    out = capsys.readouterr().out
    assert "reproduces: yes" in out, out
    assert kept in _code(project / "r7.ipynb")
    error = _first_error(project / "r7.ipynb", project)
    assert error.ename == "SimulatedAcceleratorError", error  # not KeyError: 'DATA_DIR'
    assert "device-side assert" in error.evalue


def test_a_secret_variable_stays_redacted_and_the_repro_still_fails_the_same_way(
        shell, capsys, project):
    _fail_reading_ids(shell, capsys, "os.environ['HF_TOKEN'] = 'hf_abcdefghijklmnopqrstuvwxyz'",
                      "headers = {'Authorization': os.environ['HF_TOKEN']}  # as a download would")
    run(shell, f"%cudadiag export {project / 'r8.ipynb'}")
    out = capsys.readouterr().out
    assert "reproduces: yes" in out, out
    code = _code(project / "r8.ipynb")
    line = "os.environ['HF_TOKEN'] = '[REDACTED:HF_TOKEN]'"  # masked by its name
    assert line in code and "hf_abc" not in code
    nb = nbformat.read(project / "r8.ipynb", as_version=4)
    assert "(reproduces: yes)" in nb.cells[0].source
    _assert_redacted_at(nb, line)
    error = _first_error(project / "r8.ipynb", project)
    assert error.ename == "SimulatedAcceleratorError", error


SCRIPT = """\
import os
import torch

os.environ["DATA_DIR"] = "inputs"
rows = [list(map(int, l.split())) for l in open(os.path.join(os.environ["DATA_DIR"], "ids.txt"))]
table = torch.randn(10, 4)
for row in rows:
    print(table[torch.tensor(row)].sum())
"""


def test_a_script_that_sets_a_variable_it_reads_keeps_the_line(project):
    (project / "train.py").write_text(SCRIPT)
    cli = [sys.executable, "-m", "cudadiag.cli"]
    ran = subprocess.run([*cli, "run", "--", sys.executable, "train.py"], cwd=project,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 1, ran.stderr
    (incident,) = incidents()
    done = subprocess.run([*cli, "export", incident.id, "repro.py"], cwd=project,
                          capture_output=True, text=True, timeout=600)
    assert "reproduces: yes" in done.stdout, done.stdout + done.stderr
    assert 'os.environ["DATA_DIR"] = "inputs"' in (project / "repro.py").read_text()
    rerun = subprocess.run([sys.executable, "repro.py"], cwd=project, capture_output=True,
                           text=True, timeout=300)
    assert rerun.stderr.strip().splitlines()[-1].startswith("IndexError: index 12"), \
        rerun.stderr


def test_a_repro_that_does_not_reproduce_says_so_and_names_the_redacted_values(
        shell, capsys, project):
    _fail_reading_ids(shell, capsys,
                      'API_KEY = "AKIAIOSFODNN7EXAMPLE"\nheaders = {"X-Api-Key": API_KEY}',
                      "assert headers['X-Api-Key'].startswith('AKIA')")
    for name in ("r9.ipynb", "r9.py"):
        run(shell, f"%cudadiag export {project / name}")
        out = capsys.readouterr().out
        assert "reproduces: no (observed: AssertionError, unknown)" in out, out
    nb = nbformat.read(project / "r9.ipynb", as_version=4)
    header = nb.cells[0].source
    assert "fail as below" not in header.replace("does **not** fail as below", ""), header
    assert "(reproduces: no; observed: AssertionError (unknown))" in header, header
    _assert_redacted_at(nb, 'API_KEY = "[REDACTED]"')
    script = (project / "r9.py").read_text()
    assert "# Generated by cudadiag from incident" in script
    assert "(reproduces: no; observed: AssertionError (unknown))" in script
    assert 'a value was redacted (`API_KEY = "[REDACTED]"`)' in script
