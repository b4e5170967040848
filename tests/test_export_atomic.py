"""Exports are all or nothing: a full disk, a failing write, a read-only or missing target
directory leave no partial file behind and say in one line what failed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from IPython.core.error import UsageError

from cudadiag import incidents
from scenarios import run

pytestmark = pytest.mark.slow


def cudadiag(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def isolated_id(shell):
    """An isolated incident with RNG states kept beside it (so the repro has side files)."""
    run(shell, "import torch, torch.nn.functional as F")
    run(shell, "torch.manual_seed(1)\nlogits = torch.randn(3, 4)")
    _, failing = run(shell, "loss = F.cross_entropy(logits, torch.tensor([0, 2, 4]))")
    run(shell, f"%cuda_isolate {failing} --ship none")
    (isolated,) = [i for i in incidents() if i.run.mode == "isolated"]
    return isolated.id


def test_a_missing_directory_is_an_error_and_is_not_created(isolated_id, tmp_path, shell):
    target = tmp_path / "nonexistent" / "dir" / "x.ipynb"
    result = cudadiag("export", isolated_id, str(target))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "nonexistent").exists()
    with pytest.raises(UsageError, match="does not exist"):
        shell.run_line_magic("cudadiag", f"export {isolated_id} {target}")


def test_a_failing_write_leaves_nothing_and_says_what_failed(isolated_id, tmp_path, shell,
                                                             monkeypatch):
    target = tmp_path / "out"
    target.mkdir()
    real_fsync = os.fsync
    calls = []

    def disk_full_on_second_file(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full_on_second_file)
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("cudadiag", f"export {isolated_id} {target / 'repro.ipynb'}")
    message = str(raised.value)
    assert "could not write" in message and "No space left on device" in message
    assert "nothing was written" in message
    assert list(target.iterdir()) == []


def _mount_tmpfs(folder, options) -> bool:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def tiny_disk(tmp_path):
    """A tmpfs with a few KiB free (and a read-only one); skipped where mounting is not
    allowed."""
    full, read_only = tmp_path / "full", tmp_path / "ro"
    if os.geteuid() != 0 or not _mount_tmpfs(full, "size=64k"):
        pytest.skip("mounting a tmpfs needs root with CAP_SYS_ADMIN")
    _mount_tmpfs(read_only, "size=64k,ro")
    (full / "filler").write_bytes(b"x" * 52 * 1024)
    yield full, read_only
    for folder in (full, read_only):
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_full_disk_leaves_nothing_and_a_read_only_one_is_refused(isolated_id, tiny_disk):
    full, read_only = tiny_disk
    result = cudadiag("export", isolated_id, str(full / "repro.ipynb"), "--no-verify")
    assert result.returncode == 1
    assert "No space left on device" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in full.iterdir()) == ["filler"]
    refused = cudadiag("export", isolated_id, str(read_only / "repro.ipynb"))
    assert refused.returncode == 2 and "is not writable" in refused.stderr


def test_an_export_left_by_a_killed_process_is_removed_by_the_next(isolated_id, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = tmp_path / f".repro.ipynb.{dead}.k1ll3d.partial"  # a kernel killed mid-export
    left.mkdir()
    (left / "repro.ipynb").write_text("{}")
    running = tmp_path / f".repro.ipynb.{os.getpid()}.st1ll.partial"  # one still running
    running.mkdir()
    exported = cudadiag("export", isolated_id, str(tmp_path / "repro.ipynb"), "--no-verify")
    assert exported.returncode == 0, exported.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == [
        running.name]
    assert (tmp_path / "repro.ipynb").is_file()


SHUT_DOWN_WHILE_EXPORTING = """\
import os, sys, time
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3", cwd=sys.argv[1])
for code in ["%load_ext cudadiag",
             "import torch, torch.nn.functional as F\\n"
             "from cudadiag.testing import simulated_cuda\\nsim = simulated_cuda().start()",
             "w = torch.randn(5, 3)\\nfor i in range(60):\\n"
             "    y = torch.tensor([i % 3, 1, 2 if i < 50 else 3])\\n"
             "    v = F.cross_entropy(w[:3], y).item()",
             "%cudadiag export repro.ipynb"]:
    kc.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
time.sleep(float(sys.argv[2]))
km.shutdown_kernel(now=False)
"""


@pytest.mark.parametrize("after_s", [1.0, 3.0])
def test_a_kernel_shut_down_during_a_background_export_leaves_no_partial_folder(
        tmp_path, after_s):
    driver = tmp_path / "driver.py"
    driver.write_text(SHUT_DOWN_WHILE_EXPORTING)
    done = subprocess.run([sys.executable, str(driver), str(tmp_path), str(after_s)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]
