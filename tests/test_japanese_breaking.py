"""Breaking it in Japanese (journeys.md, "Breaking it", with CUDADIAG_LANG=ja or
`%cudadiag lang ja`): a full disk, a read-only home, Ctrl-C during `cudadiag run` and
during `%cuda_isolate`, secrets in environment variables and in the source during an
export. Every message cudadiag writes there is Japanese; the system's and PyTorch's own
words (`No space left on device`, the script's traceback) are quoted as they are. Each
case is provoked the way the English tests provoke it."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag import incidents
from cudadiag.log.store import IncidentStore
from log_helpers import close_connections, mounted_tmpfs
from scenarios import run
from test_cli_run import run_a_loop_with_a_grandchild
from test_export_environment import _code, _fail_reading_ids, project  # noqa: F401
from test_isolate_magics import _alive
from test_isolated_cell_outcome import GRANDCHILD, _pids, interrupt_on  # noqa: F401
from test_store_durability import _fill, fail_on_a_full_disk
from untranslated import english_left

pytestmark = pytest.mark.slow
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FAILS = ("import torch, torch.nn.functional as F\n"
         "F.cross_entropy(torch.randn(3, 4), torch.tensor([0, 2, 4]))\n")
EROFS = os.strerror(errno.EROFS)  # the system's words, quoted as they are
ENOSPC = os.strerror(errno.ENOSPC)
API_KEY = "s3cr3tAPIkeyValue987654321xyz"
TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123"
SECRETS = f"""\
import argparse, os
import torch, torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--api-key")
key = parser.parse_args().api_key
os.environ["HF_TOKEN"] = "{TOKEN}"
headers = {{"Authorization": os.environ["HF_TOKEN"]}}
F.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))
"""


def cudadiag_ja(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The `cudadiag` command in Japanese (CUDADIAG_LANG=ja), with `env` added."""
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          env={**os.environ, "CUDADIAG_LANG": "ja", **env},
                          capture_output=True, text=True, timeout=300)


def _diagnosis(stderr: str) -> str:
    """What cudadiag wrote after the script's own traceback (from its first `cudadiag:` or
    `cudadiag [ID]` line)."""
    lines = stderr.splitlines()
    first = next(n for n, line in enumerate(lines) if line.startswith(("cudadiag:",
                                                                        "cudadiag [")))
    return "\n".join(lines[first:])


def _not_saved_line(text: str, incident_id: str) -> str:
    (line,) = [x for x in text.splitlines() if incident_id in x and "cudadiag [" not in x]
    return line


@pytest.fixture
def disk(tmp_path):
    """A 4 MiB tmpfs (needs mount rights: root in a container that allows it)."""
    with mounted_tmpfs(tmp_path / "disk", "4m") as mount_point:
        yield mount_point


def test_a_full_disk_under_a_failing_cell_says_in_japanese_the_incident_is_kept(
        shell, capsys, monkeypatch):
    run(shell, "%cudadiag lang ja")
    err, incident = fail_on_a_full_disk(shell, capsys, monkeypatch)
    line = _not_saved_line(err, incident.id)
    assert f"インシデント {incident.id} を {IncidentStore().path} に保存できませんでした" in line
    assert english_left(line) == []
    assert english_left(err, verbatim=("device-side assert triggered",)) == []


def test_cudadiag_run_on_a_full_disk_says_so_in_japanese(tmp_path, disk):
    (tmp_path / "train.py").write_text(FAILS)
    filler = _fill(disk)
    ran = cudadiag_ja("run", "train.py", cwd=tmp_path, CUDADIAG_HOME=str(disk / "home"))
    filler.unlink()
    assert ran.returncode == 1, ran.stderr
    said = _diagnosis(ran.stderr)
    assert "に保存できませんでした（デバイスに空き容量がありません）" in said, said
    assert english_left(said) == [], said


def test_a_read_only_home_is_explained_in_japanese(tmp_path, disk):
    home = disk / "home"
    (tmp_path / "train.py").write_text(FAILS)
    for _ in range(2):
        assert cudadiag_ja("run", "train.py", cwd=tmp_path, CUDADIAG_HOME=str(home)).returncode == 1
    close_connections()
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    pruned = cudadiag_ja("incidents", "--prune", "--keep", "1", cwd=tmp_path,
                         CUDADIAG_HOME=str(home))
    assert pruned.returncode == 2
    assert pruned.stderr.count("\n") == 1 and str(home) in pruned.stderr
    assert english_left(pruned.stderr, verbatim=(EROFS,)) == [], pruned.stderr
    ran = cudadiag_ja("run", "train.py", cwd=tmp_path, CUDADIAG_HOME=str(home))
    assert ran.returncode == 1
    said = _diagnosis(ran.stderr)
    assert english_left(said, verbatim=(EROFS,)) == [], said
    listed = cudadiag_ja("incidents", cwd=tmp_path, CUDADIAG_HOME=str(home))
    assert listed.returncode == 0 and english_left(listed.stdout) == [], listed.stdout


def test_ctrl_c_during_cudadiag_run_says_in_japanese_what_was_killed(
        tmp_path, ctrl_c_as_in_a_terminal):
    process, seen = run_a_loop_with_a_grandchild(
        tmp_path, ctrl_c_as_in_a_terminal, env={**os.environ, "CUDADIAG_LANG": "ja"})
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.startswith("cudadiag: 中断"), err
    assert english_left(err) == [], err
    assert not _alive(int(seen[0].split()[1]))


@pytest.mark.isolates
def test_ctrl_c_during_cuda_isolate_says_in_japanese_what_was_killed(
        shell, capsys, interrupt_on):  # noqa: F811
    run(shell, "%cudadiag lang ja")
    _, cell = run(shell, "import time\n_ = 'long cell'")
    shell.history_manager.input_hist_raw[cell] = (
        GRANDCHILD + "\nprint('started', flush=True)\nimport time\ntime.sleep(60)")
    capsys.readouterr()
    interrupt_on(b"started")
    result, _ = run(shell, f"%cuda_isolate {cell}")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    everything = ANSI.sub("", capsys.readouterr().out)
    out = everything.split("-" * 20)[0]  # before IPython's traceback
    (grandchild,) = _pids(out, "grandchild")
    assert not _alive(grandchild)
    # the child's own lines taken out as words: a line it left unended can precede ours
    said = re.sub(r"grandchild \d+|started", " ", out)
    assert "cudadiag: 中断" in said, everything
    assert english_left(said) == [], said
    assert incidents() == []


def test_secrets_in_the_environment_and_the_source_stay_out_of_a_japanese_export(tmp_path):
    (tmp_path / "train.py").write_text(SECRETS)
    ran = cudadiag_ja("run", "train.py", "--api-key", API_KEY, cwd=tmp_path,
                      OPENAI_API_KEY=API_KEY)
    assert ran.returncode == 1, ran.stderr
    (incident,) = incidents()
    exported = cudadiag_ja("export", incident.id, "repro.py", cwd=tmp_path,
                           OPENAI_API_KEY=API_KEY)
    assert exported.returncode == 0, exported.stderr
    said = {"run": _diagnosis(ran.stderr), "export": exported.stdout + exported.stderr,
            "report": cudadiag_ja("report", incident.id, cwd=tmp_path).stdout}
    repro = (tmp_path / "repro.py").read_text()
    for text in (*said.values(), repro):
        assert API_KEY not in text and TOKEN not in text
    assert "[REDACTED" in repro
    quoted = (*incident.error.message.splitlines(), *SECRETS.splitlines())  # its error, code
    assert {name: english_left(text, verbatim=quoted)
            for name, text in said.items()} == {name: [] for name in said}


def test_an_incident_cudadiag_run_filed_in_english_shows_in_japanese_later(tmp_path):
    # found breaking it: the log's records kept no message ids, so `incidents` and `show`
    # read back every sentence with arguments in English
    (tmp_path / "train.py").write_text(FAILS)
    ran = subprocess.run([sys.executable, "-m", "cudadiag.cli", "run", "train.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "Index or target out of range" in ran.stderr
    (incident,) = incidents()
    listed = cudadiag_ja("incidents", cwd=tmp_path).stdout
    assert "インデックスまたはターゲットが範囲外：aten::nll_loss_forward: 位置 2 の" in listed
    shown = cudadiag_ja("show", incident.id, cwd=tmp_path).stdout
    checks = shown.split("最初の確認\n", 1)[1].split("\n\n", 1)[0]
    assert checks.startswith("- 4 クラス問題におけるクラス 4"), checks
    assert english_left(checks) == [], checks


def _run_incident(folder: Path) -> str:
    """The id of the incident `cudadiag run` (in Japanese) filed for FAILS in `folder`."""
    (folder / "train.py").write_text(FAILS)
    assert cudadiag_ja("run", "train.py", cwd=folder).returncode == 1
    (incident,) = incidents()
    return incident.id


def test_an_export_onto_a_full_or_read_only_disk_says_why_in_japanese(tmp_path):
    incident_id = _run_incident(tmp_path)
    full, read_only = tmp_path / "full", tmp_path / "ro"
    with mounted_tmpfs(full, "64k"), mounted_tmpfs(read_only, "64k"):
        _fill(full)
        subprocess.run(["mount", "-o", "remount,ro", str(read_only)], check=True)
        failed = cudadiag_ja("export", incident_id, str(full / "repro.py"), "--no-verify",
                             cwd=tmp_path)
        refused = cudadiag_ja("export", incident_id, str(read_only / "repro.py"),
                              cwd=tmp_path)
        assert sorted(p.name for p in full.iterdir()) == ["filler"]
    assert failed.returncode == 1 and ENOSPC in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr
    assert english_left(failed.stdout + failed.stderr, verbatim=(ENOSPC,)) == [], failed.stderr
    assert refused.returncode == 2 and str(read_only) in refused.stderr
    assert english_left(refused.stderr) == [], refused.stderr


def test_ctrl_c_during_an_export_says_in_japanese_that_nothing_was_written(
        tmp_path, ctrl_c_as_in_a_terminal):
    incident_id = _run_incident(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "cudadiag.cli", "export", incident_id, "repro.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDADIAG_LANG": "ja"}, **ctrl_c_as_in_a_terminal)
    first = process.stdout.readline()  # "縮小しています…": the first run is starting
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, first + out + err
    assert "Traceback" not in err and not (tmp_path / "repro.py").exists()
    assert "何も書き込んでいません" in out + err, first + out + err  # "nothing was written"
    assert english_left(first + out + err) == [], first + out + err


def test_a_secret_set_in_a_cell_stays_out_of_a_notebook_exported_in_japanese(
        shell, capsys, project):  # noqa: F811
    run(shell, "%cudadiag lang ja")
    _fail_reading_ids(shell, capsys, f"os.environ['HF_TOKEN'] = '{TOKEN}'",
                      "headers = {'Authorization': os.environ['HF_TOKEN']}")
    run(shell, f"%cudadiag export {project / 'r.ipynb'}")
    said = ANSI.sub("", capsys.readouterr().out)
    assert "再現: はい" in said, said
    assert english_left(said) == [], said
    code = _code(project / "r.ipynb")
    assert "os.environ['HF_TOKEN'] = '[REDACTED:HF_TOKEN]'" in code and TOKEN not in code
