"""cudadiag.checkpoint: atomic saves with manifests; trusted = intact, finite, before the error."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
import torch

from cudadiag import checkpoint, cli
from cudadiag.classification import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log.store import IncidentStore
from scenarios import MODEL, SETUP, run


def _state(value: float = 1.0) -> dict[str, object]:
    return {"model": {"fc.weight": torch.full((2, 3), value), "fc.bias": torch.zeros(2)},
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}}


def _incident(message: str = "CUDA error: device-side assert triggered") -> Incident:
    return Incident(error=ErrorInfo(type="torch.AcceleratorError", message=message,
                                    text=message),
                    diagnosis=classify(message), run=RunInfo(mode="kernel"))


def test_save_writes_the_file_and_a_manifest_that_describes_it(tmp_path):
    target = tmp_path / "step-10.pt"
    verdict = checkpoint.save(_state(), target, step=10, extra={"epoch": 1})
    manifest = json.loads((tmp_path / "step-10.pt.manifest.json").read_text())
    assert verdict.trusted and verdict.reason == "ok" and verdict.step == 10
    assert manifest["step"] == 10 and manifest["finite"] is True
    assert manifest["torch"] == torch.__version__ and manifest["extra"] == {"epoch": 1}
    assert manifest["incident"] is None and manifest["during_error"] is None
    assert len(manifest["sha256"]) == 64 and manifest["bytes"] == target.stat().st_size
    loaded = torch.load(target)
    assert torch.equal(loaded["model"]["fc.weight"], torch.ones(2, 3))
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_saved_files_follow_the_umask_like_a_plain_save(tmp_path):
    old = os.umask(0o022)
    try:
        checkpoint.save(_state(), tmp_path / "a.pt", step=1)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.pt").stat().st_mode) == 0o644


def test_a_corrupted_file_is_rejected_for_its_hash_and_the_older_one_is_chosen(
        tmp_path, capsys):
    checkpoint.save(_state(1.0), tmp_path / "step-1.pt", step=1)
    checkpoint.save(_state(2.0), tmp_path / "step-2.pt", step=2)
    data = bytearray((tmp_path / "step-2.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "step-2.pt").write_bytes(bytes(data))

    chosen = checkpoint.latest_valid(tmp_path)

    assert chosen is not None and chosen.path == tmp_path / "step-1.pt" and chosen.step == 1
    assert "step-2.pt rejected: hash mismatch" in capsys.readouterr().err
    assert checkpoint.verify(tmp_path / "step-2.pt").reason.startswith("hash mismatch")


def test_a_checkpoint_with_a_nan_is_rejected_and_names_the_tensor(tmp_path):
    state = _state()
    state["model"]["fc.bias"][1] = float("nan")
    verdict = checkpoint.save(state, tmp_path / "nan.pt", step=5)
    assert not verdict.trusted
    assert verdict.reason == "non-finite tensor (NaN or Inf): model.fc.bias"


def test_a_file_without_manifest_is_listed_as_such(tmp_path):
    torch.save(_state(), tmp_path / "plain.pt")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    verdicts = checkpoint.review(tmp_path)
    assert [(v.path.name, v.trusted) for v in verdicts] == [("plain.pt", False)]
    assert verdicts[0].reason.startswith("no manifest")
    assert checkpoint.latest_valid(tmp_path) is None


def test_the_newest_trusted_checkpoint_wins_by_the_time_it_was_written(tmp_path):
    for step in (300, 100, 200):  # written in this order: a resumed run counts again
        checkpoint.save(_state(), tmp_path / f"step-{step}.pt", step=step)
    assert checkpoint.latest_valid(tmp_path).step == 200
    assert [v.step for v in checkpoint.review(tmp_path)] == [200, 100, 300]


def test_a_checkpoint_written_after_the_given_incident_is_rejected(tmp_path, capsys):
    checkpoint.save(_state(), tmp_path / "before.pt", step=1)
    incident = _incident()
    # an hour ago: inside the log's retention (180 days), before every file
    incident.created_at = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(
        timespec="seconds")
    time.sleep(0.01)
    checkpoint.save(_state(), tmp_path / "after.pt", step=2)
    IncidentStore().append(incident)

    assert checkpoint.latest_valid(tmp_path, before=incident) is None
    verdict = checkpoint.verify(tmp_path / "after.pt", before=incident.id[:6])
    assert verdict.reason.startswith("written after the error: saved at ")
    assert f"after incident {incident.id} (device_assert)" in verdict.reason
    assert checkpoint.latest_valid(tmp_path).step == 2  # no sticky incident in this process


def test_a_checkpoint_saved_while_handling_a_cuda_error_is_rejected(tmp_path):
    try:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    except RuntimeError:
        verdict = checkpoint.save(_state(), tmp_path / "crash.pt", step=7)
    assert not verdict.trusted
    assert verdict.reason == ("written after the error: saved while handling RuntimeError "
                              "(illegal_memory): CUDA error: an illegal memory access was "
                              "encountered")


def test_a_checkpoint_saved_on_ctrl_c_is_trusted(tmp_path):
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        verdict = checkpoint.save(_state(), tmp_path / "interrupted.pt", step=7)
    assert verdict.trusted


def test_a_failed_save_leaves_the_previous_checkpoint_whole(tmp_path):
    checkpoint.save(_state(), tmp_path / "ckpt.pt", step=1)
    with pytest.raises(Exception, match=r"lambda|pickle"):
        checkpoint.save({"fn": lambda: 0}, tmp_path / "ckpt.pt", step=2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt", "ckpt.pt.manifest.json"]
    assert checkpoint.verify(tmp_path / "ckpt.pt").trusted
    assert checkpoint.verify(tmp_path / "ckpt.pt").step == 1


@pytest.mark.slow
def test_a_file_that_cannot_be_written_says_why_and_leaves_the_previous_one(tmp_path):
    # a file-size limit makes the write fail as a full disk does (torch alone would say
    # "unexpected pos" and lose the reason)
    code = (
        "import resource, signal, sys, torch\n"
        "from cudadiag import checkpoint\n"
        "from cudadiag.errors import CheckpointNotSaved\n"
        "checkpoint.save({'w': torch.zeros(4)}, 'ckpt.pt', step=1)\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))\n"
        "try:\n"
        "    checkpoint.save({'w': torch.zeros(100_000)}, 'ckpt.pt', step=2)\n"
        "except CheckpointNotSaved as exc:\n"
        "    print(exc, isinstance(exc, OSError))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == (
        f"could not write ckpt.pt in {tmp_path.resolve()}: File too large; nothing was "
        "written, an earlier ckpt.pt is unchanged True"), done.stderr
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt", "ckpt.pt.manifest.json"]
    assert checkpoint.verify(tmp_path / "ckpt.pt").step == 1


def test_bad_arguments_say_what_was_wrong(tmp_path):
    with pytest.raises(TypeError, match="step must be an int"):
        checkpoint.save(_state(), tmp_path / "a.pt", step="10")
    with pytest.raises(ValueError, match="step must be 0 or more"):
        checkpoint.save(_state(), tmp_path / "a.pt", step=-1)
    with pytest.raises(TypeError, match="extra must be JSON-serialisable"):
        checkpoint.save(_state(), tmp_path / "a.pt", step=1, extra={"t": torch.ones(1)})
    with pytest.raises(FileNotFoundError, match="create it first"):
        checkpoint.save(_state(), tmp_path / "missing" / "a.pt", step=1)
    with pytest.raises(NotADirectoryError):
        checkpoint.latest_valid(tmp_path / "missing")
    assert os.listdir(tmp_path) == []


def test_a_checkpoint_saved_after_a_simulated_device_assert_is_rejected(
        shell, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the cells use a relative directory, as a notebook does
    os.mkdir("ckpts")
    run(shell, SETUP + "\nfrom cudadiag import checkpoint")
    # the state dict is taken before the error: after it, every device op fails
    run(shell, MODEL.replace("loss = ", "state = model.state_dict()\n"
                                        "checkpoint.save(state, 'ckpts/step-1.pt', step=1)\n"
                                        "loss = "))
    failed, _ = run(shell, "print(loss.item())")
    assert failed.error_in_exec is not None
    capsys.readouterr()

    run(shell, "late = checkpoint.save(state, 'ckpts/step-2.pt', step=2)")
    run(shell, "chosen = checkpoint.latest_valid('ckpts')")
    out = capsys.readouterr()
    run(shell, "%cudadiag checkpoints ckpts")
    listing = capsys.readouterr().out

    late = shell.user_ns["late"]
    assert not late.trusted
    assert late.reason.startswith("written after the error: saved when incident ")
    assert "(device_assert) at " in late.reason and "had already happened" in late.reason
    assert "rejected: written after the error" in out.err
    assert shell.user_ns["chosen"].path.name == "step-1.pt"
    assert "step-2.pt  step 2" in listing and "rejected: written after the error" in listing
    assert "step-1.pt  step 1" in listing and "trusted" in listing
    assert "resume from: ckpts/step-1.pt" in listing


def test_the_checkpoints_magic_refuses_a_missing_directory(shell, capsys):
    result, _ = run(shell, "%cudadiag checkpoints /nonexistent/ckpts")
    assert "/nonexistent/ckpts is not a directory" in str(result.error_in_exec)


def test_the_cli_lists_verdicts_and_exits_1_when_none_is_trusted(tmp_path, capsys):
    checkpoint.save(_state(), tmp_path / "good.pt", step=3)
    assert cli.main(["checkpoints", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["trusted"] is True and listed[0]["step"] == 3
    (tmp_path / "good.pt").write_bytes(b"truncated")
    assert cli.main(["checkpoints", str(tmp_path)]) == 1
    assert "rejected: hash mismatch" in capsys.readouterr().out
    assert cli.main(["checkpoints", str(tmp_path / "nope")]) == 2
    assert "cudadiag checkpoints:" in capsys.readouterr().err


def test_the_checkpoints_magic_lists_where_the_kernel_last_saved_by_default(
        shell, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(checkpoint, "_saved_to", [])  # a kernel that saved nothing yet
    monkeypatch.chdir(tmp_path)  # the notebook's folder holds no checkpoint
    refused, _ = run(shell, "%cudadiag checkpoints")
    assert str(refused.error_in_exec) == (
        "this kernel has saved no checkpoint with cudadiag.checkpoint.save: name the "
        "directory, e.g. %cudadiag checkpoints ckpts")
    for folder in ("runs/a", "runs/b"):
        os.makedirs(folder)
    run(shell, "import torch\nfrom cudadiag import checkpoint\n"
               "checkpoint.save({'w': torch.ones(2)}, 'runs/a/early.pt', step=1)\n"
               "checkpoint.save({'w': torch.ones(2)}, 'runs/b/late.pt', step=2)")
    capsys.readouterr()
    listed, _ = run(shell, "%cudadiag checkpoints")
    assert listed.success, listed.error_in_exec
    out = capsys.readouterr().out
    assert out.startswith(f"checkpoints in {tmp_path.resolve() / 'runs' / 'b'}, newest first:")
    assert "late.pt  step 2" in out and "early.pt" not in out


def test_the_cli_lists_the_current_directory_by_default(tmp_path):
    checkpoint.save(_state(), tmp_path / "here.pt", step=4)
    listed = subprocess.run([sys.executable, "-m", "cudadiag.cli", "checkpoints"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("checkpoints in ., newest first:")
    assert "here.pt  step 4" in listed.stdout and "trusted" in listed.stdout


WHOLE_OBJECTS = """\
import torch
from cudadiag import checkpoint

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
optimizer = torch.optim.Adam(model.parameters())
model(torch.randn(5, 4)).sum().backward()
optimizer.step()
checkpoint.save(model, "ckpts/step-1.pt", step=1)
model[1].running_var[2] = float("nan")  # a buffer, in the module saved whole
checkpoint.save(model, "ckpts/step-2.pt", step=2)
model[1].running_var[2] = 1.0
optimizer.state[model[0].weight]["exp_avg"][0, 1] = float("inf")
checkpoint.save({"model": model, "optimizer": optimizer}, "ckpts/step-3.pt", step=3)
optimizer.state[model[0].weight]["exp_avg"][0, 1] = 0.0
model.temperature = torch.tensor([1.0, float("nan")])  # a plain attribute of the module
checkpoint.save([model], "ckpts/step-4.pt", step=4)
"""


def test_a_nan_inside_a_saved_module_or_optimizer_is_never_trusted(tmp_path):
    (tmp_path / "ckpts").mkdir()
    (tmp_path / "train.py").write_text(WHOLE_OBJECTS)
    saved = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert saved.returncode == 0, saved.stderr
    listed = subprocess.run([sys.executable, "-m", "cudadiag.cli", "checkpoints", "ckpts"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = listed.stdout.splitlines()
    rejected = "rejected: non-finite tensor (NaN or Inf): "
    assert [line.split()[0] for line in lines[1:5]] == [
        "step-4.pt", "step-3.pt", "step-2.pt", "step-1.pt"]
    assert lines[1].endswith(rejected + "[0].temperature")
    assert lines[2].endswith(rejected + "optimizer.state.0.exp_avg")
    assert lines[3].endswith(rejected + "1.running_var")
    assert lines[4].endswith("trusted")
    assert lines[-1] == "resume from: ckpts/step-1.pt"
