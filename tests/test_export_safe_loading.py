"""A shared repro is safe to open: its side files (the recorded batch, the RNG states, the
values shipped from the kernel) load with `torch.load(..., weights_only=True)`, a pickle
swapped in beside it runs nothing, and the header says how each file loads."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys

import nbformat
import numpy
import pytest
import torch
from nbclient import NotebookClient

from cudadiag import classify
from cudadiag.incident import ErrorInfo, Incident, RunInfo, Signature
from cudadiag.repro.document import Program
from cudadiag.repro.loops import current_states
from cudadiag.repro.notebook import export_notebook

SAFE = "load with `torch.load(..., weights_only=True)`"
LOAD = "{target} = torch.load(os.path.join(_repro_dir, '{name}'), weights_only=True)"


class _Swapped:
    """What a stranger could leave beside a shared repro: unpickling it writes a file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _incident() -> Incident:
    message = "CUDA error: device-side assert triggered"
    return Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                    diagnosis=classify(message), run=RunInfo(mode="isolated"))


def _export(tmp_path, cells, **program):
    incident = _incident()
    return export_notebook(incident, tmp_path / "r.ipynb", cells,
                           signature=Signature.of(incident), verify=False, **program)


def _executed(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def _outputs(nb) -> tuple[list, str]:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                   if o.output_type == "stream")
    return errors, text


def _code(path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code")


@pytest.mark.slow
def test_a_pickle_swapped_in_for_a_side_file_runs_nothing(tmp_path):
    batch = {"input_ids": torch.randint(0, 50, (64, 256)), "labels": torch.arange(64)}
    result = _export(tmp_path, {1: "print('program ran', batch['labels'][:3].tolist())"},
                     batch=(5, batch))
    code = _code(result.path)
    assert "weights_only=False" not in code
    assert LOAD.format(target="batch", name="r.batch.pt") in code
    header = nbformat.read(result.path, as_version=4).cells[0].source
    assert f"The files beside it (`r.batch.pt`) {SAFE}" in header
    errors, text = _outputs(_executed(result.path))
    assert not errors and "program ran [0, 1, 2]" in text  # the real file loads

    marker = tmp_path / "ran-the-pickle"
    torch.save(_Swapped(str(marker)), result.batch_file)
    errors, _ = _outputs(_executed(result.path))
    assert not marker.exists()
    assert errors[0].ename == "UnpicklingError", errors[0]


@pytest.mark.slow
def test_rng_states_with_numpy_load_safely_and_give_the_same_numbers(tmp_path):
    torch.manual_seed(3)
    random.seed(3)
    numpy.random.seed(3)
    states = current_states()  # as the loop probe and the kernel record them
    expected = (torch.rand(1).item(), random.random(), numpy.random.rand())
    cells = {1: "import numpy, random, torch\n"
                "print('drawn', (torch.rand(1).item(), random.random(), numpy.random.rand()))"}
    result = _export(tmp_path, cells, rng_states={1: states})
    assert LOAD.format(target="_rng", name="r.rng.pt") in _code(result.path)
    torch.load(tmp_path / "r.rng.pt", weights_only=True)
    errors, text = _outputs(_executed(result.path))
    assert not errors, errors
    assert f"drawn {expected!r}" in text


@pytest.mark.slow
def test_a_batch_with_numpy_arrays_names_the_types_it_needs_in_the_code(tmp_path):
    batch = {"pixels": torch.rand(64, 3, 32, 32), "ids": numpy.arange(64),
             "names": [f"img{i}.png" for i in range(64)]}
    result = _export(tmp_path, {1: "print('types', type(batch['ids']).__name__, "
                                   "batch['ids'][-1], batch['names'][1])"},
                     batch=(0, batch))
    code = _code(result.path)
    assert "torch.serialization.add_safe_globals([numpy." in code
    assert LOAD.format(target="batch", name="r.batch.pt") in code
    errors, text = _outputs(_executed(result.path))
    assert not errors, errors
    assert "types ndarray 63 img1.png" in text


def test_a_batch_of_a_class_the_program_defines_is_left_out_and_said_so(tmp_path,
                                                                         monkeypatch):
    class Pair:  # defined in the notebook: nothing can import it before the program runs
        def __init__(self, x, y):
            self.x, self.y = x, y

    Pair.__module__, Pair.__qualname__ = "__main__", "Pair"
    monkeypatch.setattr(sys.modules["__main__"], "Pair", Pair, raising=False)
    result = _export(tmp_path, {1: "pass"},
                     batch=(2, Pair(torch.rand(100, 200), torch.arange(100))))
    assert result.batch_file is None and not (tmp_path / "r.batch.pt").exists()
    header = nbformat.read(result.path, as_version=4).cells[0].source
    assert "The recorded batch of step 2 was left out: it holds Pair, defined by the " \
           "program itself" in header
    assert "torch.load" not in _code(result.path)


def test_shipped_values_that_are_tensors_load_safely(tmp_path):
    values = tmp_path / "shipped.pkl"
    values.write_bytes(pickle.dumps({"logits": torch.randn(200, 100), "step": 7}))
    result = _export(tmp_path, {1: "print(logits.shape)"},
                     program=Program(cells={}, values=values))
    code = _code(result.path)
    assert LOAD.format(target="_values", name="r.values.pt") in code
    assert "step = 7" in code and "pickle" not in code
    done = subprocess.run([sys.executable, "-c", "import torch; print(sorted(torch.load("
                           "'r.values.pt', weights_only=True)))"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "['logits']", done.stderr


def test_a_batch_that_needs_a_function_that_could_run_code_is_refused():
    import functools

    from cudadiag.repro.sidefiles import safe_file

    batch = {"x": torch.rand(3), "make": functools.partial(torch.zeros, 3)}
    assert safe_file(batch).refused == ("it needs builtins.getattr, functools.partial: "
                                        "allowing those could run code")


def test_torch_versions_without_the_safe_globals_api_are_told_apart(monkeypatch, tmp_path):
    import os

    from cudadiag.repro.sidefiles import load_lines, safe_file

    batch = {"ids": numpy.arange(64), "x": torch.rand(4)}
    listed = safe_file(batch)
    assert "numpy.ndarray" in listed.safe_globals
    (tmp_path / "r.batch.pt").write_bytes(listed.data)
    code = "\n".join(["import torch", *load_lines("r.batch.pt", "batch", listed.safe_globals)])
    # torch 2.3 loads with weights_only=True, but has no add_safe_globals
    monkeypatch.delattr(torch.serialization, "add_safe_globals")
    with pytest.raises(RuntimeError, match=r"r.batch.pt needs torch 2.4 or later"):
        exec(code, {"os": os, "_repro_dir": str(tmp_path)})
    # torch 2.4 cannot list what a file needs: the export leaves such a batch out
    monkeypatch.delattr(torch.serialization, "get_unsafe_globals_in_checkpoint")
    assert "cannot list them (torch 2.5 does)" in safe_file(batch).refused
    assert safe_file({"x": torch.rand(4)}).refused is None  # tensors alone: any version
