"""The bad-case set: keep_case / load_cases."""

from __future__ import annotations

import json

import pytest
import torch

from cudadiag import GuardError, check_class_targets, keep_case, load_cases


def test_keep_and_load_a_case(tmp_path):
    batch = {"x": torch.randn(3, 8), "y": torch.tensor([0, 2, 4])}
    try:
        check_class_targets(batch["y"], 4)
    except GuardError as exc:
        verdict = str(exc)
    path = keep_case(batch, "label-4-in-4-classes", reason="label 4 in a 4-class task",
                     directory=tmp_path, verdict=verdict)
    assert path == tmp_path / "label-4-in-4-classes.pt"
    meta = json.loads((tmp_path / "label-4-in-4-classes.json").read_text())
    assert meta["summary"]["tensors"][1]["max"] == 4 and meta["created"]
    (case,) = load_cases(tmp_path)
    assert case.name == "label-4-in-4-classes" and case.verdict == verdict
    assert torch.equal(case.batch["y"], batch["y"])
    assert repr(case) == "Case('label-4-in-4-classes')"


def test_refuses_to_overwrite_unless_asked(tmp_path):
    keep_case([torch.zeros(1)], "a", reason="r", directory=tmp_path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        keep_case([torch.ones(1)], "a", reason="r", directory=tmp_path)
    keep_case([torch.ones(1)], "a", reason="r", directory=tmp_path, overwrite=True)
    assert load_cases(tmp_path)[0].batch[0].item() == 1.0


def test_bad_names_and_missing_files_are_clear(tmp_path):
    with pytest.raises(ValueError, match="no path"):
        keep_case([], "../escape", reason="r", directory=tmp_path)
    with pytest.raises(ValueError, match="say why"):
        keep_case([], "ok", reason=" ", directory=tmp_path)
    keep_case([torch.zeros(1)], "lonely", reason="r", directory=tmp_path)
    (tmp_path / "lonely.pt").unlink()
    with pytest.raises(FileNotFoundError, match="lonely"):
        load_cases(tmp_path)
    assert load_cases(tmp_path / "nowhere") == []


def test_a_failed_overwrite_leaves_the_old_case_whole_and_says_what_to_do(tmp_path,
                                                                          monkeypatch):
    import errno
    import os

    keep_case({"y": torch.tensor([0, 1])}, "a", reason="old", directory=tmp_path)

    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError, match=r"could not write a\.pt in .*: No space left on device; "
                                      r"free some space"):
        keep_case({"y": torch.tensor([0, 4])}, "a", reason="new", directory=tmp_path,
                  overwrite=True)
    monkeypatch.undo()
    (case,) = load_cases(tmp_path)
    assert case.reason == "old" and case.batch["y"].tolist() == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.pt"]


def test_case_files_are_the_projects_readable_as_the_umask_allows(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        keep_case([torch.zeros(1)], "shared", reason="r", directory=tmp_path)
    finally:
        os.umask(old)
    assert {oct((tmp_path / f).stat().st_mode & 0o777)
            for f in ("shared.pt", "shared.json")} == {"0o644"}
