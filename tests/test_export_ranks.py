"""`cudadiag export` of a multi-rank job (issue 26, item 4): the job again, as the same number
of ranks under torchrun on one machine, checked by running it; or a plain refusal when a
re-run could not show the same failure (only collectives failed, a rank killed from outside),
never "reproduces: yes" for those. The run's working folder is recorded, so the export finds
the script from anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag import classify, incidents
from cudadiag.errors import ExportError
from cudadiag.incident import ErrorInfo, Incident, RankRecord, RunInfo
from cudadiag.repro.export import stored_inputs
from node_agents import AGENT_LIMIT_S, BAD_TARGET, two_nodes
from test_ranks import RANK0_HANGS, RANK1_KILLED

READS_DATA = "CLASSES = int(open('data/classes.txt').read())  # relative to the job's folder\n"
"""A first line for each job's script: it opens a file by a relative path."""


def cudadiag(*args: str, cwd: Path, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=AGENT_LIMIT_S * 2)


def failed_job(tmp_path: Path, script: str) -> Incident:
    """Run `script` as two ranks from tmp_path/job (its script in a sub-folder, reading
    data/classes.txt); return the incident."""
    (tmp_path / "job" / "src").mkdir(parents=True)
    (tmp_path / "job" / "data").mkdir()
    (tmp_path / "job" / "data" / "classes.txt").write_text("4\n")
    (tmp_path / "job" / "src" / "train.py").write_text(READS_DATA + script)
    ran = cudadiag("run", "--nproc-per-node", "2", "--", "src/train.py", cwd=tmp_path / "job",
                   env={**os.environ, "NODE": "1", "BAD_LOCAL": "1"})
    assert ran.returncode == 1, ran.stderr[-3000:]
    (incident,) = incidents()
    return incident


@pytest.mark.slow
def test_a_two_rank_job_is_exported_as_two_ranks_under_torchrun_and_reproduces(tmp_path):
    incident = failed_job(tmp_path, BAD_TARGET)
    assert incident.run.cwd == str(tmp_path / "job")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    exported = cudadiag("export", incident.id, str(elsewhere / "repro.py"), cwd=elsewhere)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "reproduces: yes (observed: rank 1 failed first" in exported.stdout
    assert "device_assert" in exported.stdout
    assert ("the job as 2 ranks under torchrun on this machine: torchrun --standalone "
            "--nproc-per-node 2 repro_program.py") in exported.stdout
    assert (elsewhere / "repro_program.py").read_text() == READS_DATA + BAD_TARGET
    (stored,) = incidents()
    assert stored.repro.reproduces is True and stored.repro.path == str(elsewhere / "repro.py")
    again = subprocess.run([sys.executable, str(elsewhere / "repro.py")], cwd=tmp_path / "job",
                           capture_output=True, text=True, timeout=AGENT_LIMIT_S)
    assert again.returncode == 1  # torchrun's status
    assert "device-side assert triggered" in again.stderr
    assert "[rank1]:" in again.stderr and "[rank0]:" in again.stderr


@pytest.mark.slow
def test_a_job_where_only_collectives_failed_is_refused_plainly(tmp_path):
    incident = failed_job(tmp_path, RANK0_HANGS)
    assert incident.diagnosis.family == "distributed"
    exported = cudadiag("export", incident.id, str(tmp_path / "repro.py"), cwd=tmp_path)
    assert exported.returncode == 1
    assert (f"cudadiag export: incident {incident.id} cannot be exported as a repro: its first "
            "failure is the job's communication") in exported.stderr
    assert "reproduces: yes" not in exported.stdout + exported.stderr
    assert not (tmp_path / "repro.py").exists()


@pytest.mark.slow
def test_a_rank_killed_from_outside_is_refused_plainly(tmp_path):
    incident = failed_job(tmp_path, RANK1_KILLED)
    assert incident.diagnosis.rank == 1
    exported = cudadiag("export", incident.id, str(tmp_path / "repro.py"), cwd=tmp_path)
    assert exported.returncode == 1
    assert ("cannot be exported as a repro: rank 1 ended without an error of its own "
            "(SIGKILL)") in exported.stderr
    assert not (tmp_path / "repro.py").exists()


@pytest.mark.slow
def test_a_job_across_two_nodes_is_exported_as_its_ranks_on_one_machine(tmp_path):
    node0, node1 = two_nodes(tmp_path, BAD_TARGET)
    assert (node0.wait(), node1.wait()) == (1, 1)
    env = {**os.environ, "CUDADIAG_HOME": str(node0.home)}
    incident_id = node0.summary()[0]
    exported = cudadiag("export", incident_id, str(tmp_path / "repro.py"), cwd=tmp_path,
                        env=env)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "torchrun --standalone --nproc-per-node 2 repro_program.py" in exported.stdout
    assert "reproduces: yes" in exported.stdout  # NODE=1, as rank 1 ran, for both ranks
    header = (tmp_path / "repro.py").read_text()
    assert "--nnodes 2" in header and "--node-rank 0" in header


def test_a_multi_rank_job_asks_for_a_script_and_is_never_minimized_as_one_process(
        tmp_path, capsys):
    from cudadiag import cli
    from cudadiag.log.store import IncidentStore

    incident = Incident(
        error=ErrorInfo(type="RuntimeError", message="CUDA error: device-side assert",
                        text="CUDA error: device-side assert triggered"),
        diagnosis=classify("RuntimeError: CUDA error: device-side assert triggered"),
        run=RunInfo(mode="cli", command=["train.py"], launcher=["--nproc-per-node", "2"],
                    ranks=[RankRecord(rank=0, local_rank=0, node="h", outcome="raised"),
                           RankRecord(rank=1, local_rank=1, node="h", outcome="raised")]))
    incident.diagnosis.rank = 1
    IncidentStore().append(incident)
    assert cli.main(["export", incident.id, str(tmp_path / "repro.ipynb")]) == 2
    assert "a multi-rank job is exported as a script that runs it under torchrun: give " \
           "PATH.py" in capsys.readouterr().err
    with pytest.raises(ExportError, match="is a multi-rank job's: export it as a job from a "
                                          "terminal: cudadiag export"):
        stored_inputs(incident)
