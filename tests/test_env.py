"""collect_env(): fields, no CUDA initialisation, poisoned contexts, git revision, speed."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from cudadiag import collect_env
from cudadiag.env import code_revision, detect_backend


def test_versions_and_backend_on_this_machine():
    env = collect_env()
    assert env.torch == torch.__version__
    assert env.python.count(".") == 2
    assert env.backend in ("cuda", "rocm", "mps", "cpu")
    # the backend is the build's, whether or not a device is present (a CUDA build on a
    # machine without a GPU is still a CUDA build: its errors speak CUDA)
    if getattr(torch.version, "hip", None):
        assert env.backend == "rocm"
    elif torch.version.cuda:
        assert env.backend == "cuda"
    elif not torch.backends.mps.is_available():
        assert env.backend == "cpu"


def test_never_initialises_cuda(monkeypatch):
    def refuse():
        raise AssertionError("collect_env initialised CUDA")

    monkeypatch.setattr(torch.cuda, "_lazy_init", refuse)
    monkeypatch.setattr(torch.cuda, "init", refuse)
    collect_env()
    assert not torch.cuda.is_initialized()


def test_rocm_is_recognised_by_torch_version_hip(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "_device_count_amdsmi", lambda: 1, raising=False)
    assert detect_backend(torch) == "rocm"
    env = collect_env()
    assert env.hip == "6.2.41133" and env.backend == "rocm"
    assert env.device_name.startswith("unavailable: CUDA not initialised")


def test_poisoned_context_gives_unavailable_fields(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def poisoned(*_):
        raise RuntimeError("CUDA error: device-side assert triggered\nmore")

    monkeypatch.setattr(torch.cuda, "get_device_name", poisoned)
    env = collect_env()
    assert env.backend == "cuda"
    assert env.device_name == "unavailable: CUDA error: device-side assert triggered"


def test_loaded_binary_extensions_are_listed(monkeypatch):
    import sys
    import types

    fake = types.ModuleType("xformers")
    fake.__version__ = "0.0.99"
    monkeypatch.setitem(sys.modules, "xformers", fake)
    assert collect_env().extensions["xformers"] == "0.0.99"


def test_code_revision_and_dirty_flag(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    assert code_revision(str(tmp_path)) == (None, None)
    repo = tmp_path / "repo"
    repo.mkdir()
    tmp_path = repo
    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    commit, dirty = code_revision(str(repo))
    assert len(commit) == 40 and dirty is False
    (repo / "a.py").write_text("x = 2\n")
    from cudadiag import env as env_module

    env_module._git_cache.clear()
    assert code_revision(str(repo))[1] is True


def test_a_second_incident_within_seconds_does_not_run_git_again(monkeypatch, tmp_path):
    """The revision is cached per folder (an error cascade files incidents quickly); how
    long collect_env() takes is bench/env_cost.py's to measure, not a test's."""
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        calls.append(args[0])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    monkeypatch.chdir(tmp_path)
    first = collect_env()
    git_calls = len(calls)
    assert collect_env().code_revision == first.code_revision
    assert git_calls > 0 and len(calls) == git_calls


@pytest.mark.slow
def test_cli_env_prints_the_environment():
    out = subprocess.run(["cudadiag", "env"], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"^torch: +{re.escape(torch.__version__)}$", out, re.M)
    assert re.search(r"^backend: +(cuda|rocm|mps|cpu)$", out, re.M)
