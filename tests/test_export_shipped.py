"""%cuda_isolate then %cudadiag export, for every plan %cuda_isolate accepts: the values the
kernel shipped to the isolated run are kept with its incident and reach every candidate and
the exported notebook."""

from __future__ import annotations

import stat

import nbformat
import pytest
from IPython.core.error import UsageError

from cudadiag import incidents
from cudadiag.log import runfiles as runfiles_module
from cudadiag.log.store import IncidentStore
from scenarios import run

pytestmark = pytest.mark.slow

IMPORTS = "import torch, torch.nn.functional as F"


def _isolated():
    return [i for i in incidents() if i.run.mode == "isolated"]


def _export(shell, capsys, incident_id, path):
    capsys.readouterr()
    run(shell, f"%cudadiag export {incident_id} {path}")
    return capsys.readouterr().out


def _code(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_default_plan_ships_values_and_the_export_carries_them(shell, capsys, tmp_path):
    run(shell, IMPORTS)
    _, logits_cell = run(shell, "logits = torch.randn(200, 100)  # too large to inline")
    run(shell, "target = torch.arange(200) % 100\ntarget[7] = 100")
    run(shell, "unrelated = [1, 2, 3]")
    _, failing = run(shell, "loss = F.cross_entropy(logits, target)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {failing}")
    assert "ship logits, target" in capsys.readouterr().out
    (isolated,) = _isolated()
    assert isolated.run.shipped == ["logits", "target"]

    out = _export(shell, capsys, isolated.id, tmp_path / "repro.ipynb")
    assert "reproduces: yes" in out, out
    code = _code(tmp_path / "repro.ipynb")
    assert "target = torch.tensor([0, 1, 2, 3, 4, 5, 6, 100, 8" in code  # small: inlined
    # large: beside it, loaded with weights_only=True (a tensor)
    assert ("_values = torch.load(os.path.join(_repro_dir, 'repro.values.pt'), "
            "weights_only=True)") in code
    assert "globals().update(_values)  # logits" in code
    assert (tmp_path / "repro.values.pt").exists()
    assert f"In[{logits_cell}]" not in code  # shipped, not replayed


def test_shipped_values_are_private_and_stored_once(shell, capsys, cudadiag_home):
    run(shell, IMPORTS)
    run(shell, "logits = torch.randn(3, 4)\ntarget = torch.tensor([0, 2, 4])")
    _, failing = run(shell, "loss = F.cross_entropy(logits, target)")
    run(shell, f"%cuda_isolate {failing}")
    run(shell, f"%cuda_isolate {failing}")
    first, second = _isolated()
    blobs = list((cudadiag_home / "shipped").iterdir())
    assert len(blobs) == 1  # the same values, kept once
    for incident in (first, second):
        folder = cudadiag_home / "runs" / incident.id
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "shipped.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((cudadiag_home / "runs").stat().st_mode) == 0o700
    assert stat.S_IMODE((cudadiag_home / "shipped").stat().st_mode) == 0o700
    assert stat.S_IMODE(blobs[0].stat().st_mode) == 0o600


def test_explicit_ship_list(shell, capsys, tmp_path):
    run(shell, IMPORTS)
    run(shell, "logits = torch.randn(3, 4)")
    run(shell, "target = torch.tensor([0, 2, 4])")
    _, failing = run(shell, "loss = F.cross_entropy(logits, target)")
    run(shell, f"%cuda_isolate {failing} --ship logits,target")
    (isolated,) = _isolated()
    out = _export(shell, capsys, isolated.id, tmp_path / "shipped.ipynb")
    assert "reproduces: yes" in out, out
    assert "logits = torch.tensor([" in _code(tmp_path / "shipped.ipynb")


def test_explicit_cells_with_a_shipped_value(shell, capsys, tmp_path):
    _, imports = run(shell, IMPORTS)
    run(shell, "target = torch.tensor([0, 2, 4])")
    _, logits = run(shell, "logits = torch.randn(3, 4)")
    _, failing = run(shell, "loss = F.cross_entropy(logits, target)")
    run(shell, f"%cuda_isolate {failing} --cells {imports},{logits} --ship target")
    (isolated,) = _isolated()
    out = _export(shell, capsys, isolated.id, tmp_path / "cells.ipynb")
    assert "reproduces: yes" in out, out
    code = _code(tmp_path / "cells.ipynb")
    assert "target = torch.tensor([0, 2, 4]" in code and f"# In[{logits}]" in code


def test_replayed_batch_of_watch(shell, capsys, tmp_path):
    run(shell, IMPORTS + "\nimport cudadiag\nfrom torch.utils.data import DataLoader, "
                         "TensorDataset")
    run(shell, "labels = torch.arange(40) % 4\nlabels[27] = 4\n"
               "loader = DataLoader(TensorDataset(torch.randn(40, 8), labels), batch_size=8)\n"
               "model = torch.nn.Linear(8, 4)")
    _, failing = run(shell, "for x, y in cudadiag.watch(loader):\n"
                            "    loss = F.cross_entropy(model(x), y)")
    run(shell, f"%cuda_isolate {failing} --batch last")
    (isolated,) = _isolated()
    assert isolated.run.batch_replay == 3
    out = _export(shell, capsys, isolated.id, tmp_path / "batch.ipynb")
    assert "reproduces: yes" in out, out
    assert "replay_batch(3, batch)" in _code(tmp_path / "batch.ipynb")


def test_values_too_large_to_keep_are_refused_with_what_to_do(shell, capsys, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr(runfiles_module, "SHIPPED_KEPT_MAX_BYTES", 100)
    run(shell, IMPORTS)
    run(shell, "logits = torch.randn(3, 4)\ntarget = torch.tensor([0, 2, 4])")
    _, failing = run(shell, "loss = F.cross_entropy(logits, target)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {failing}")
    assert "the shipped values were not kept" in capsys.readouterr().err
    (isolated,) = _isolated()
    with pytest.raises(UsageError, match=r"were not kept .* --ship none"):
        shell.run_line_magic("cudadiag", f"export {isolated.id} {tmp_path / 'x.ipynb'}")


def test_the_least_recently_used_values_make_room(tmp_path, monkeypatch):
    monkeypatch.setattr(runfiles_module, "SHIPPED_TOTAL_MAX_BYTES", 2500)
    store = IncidentStore(tmp_path / "home")
    for number in range(3):
        values = tmp_path / f"values{number}.pkl"
        values.write_bytes(bytes([number]) * 1000)
        assert store.keep_shipped(f"incident{number}", values) is None
    assert store.shipped_file("incident0") is None  # dropped: three would not fit
    assert store.shipped_file("incident1").read_bytes() == bytes([1]) * 1000
    assert store.shipped_file("incident2") is not None
