"""Minimizer, repro notebook export and its verification."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

from cudadiag import classify, incidents
from cudadiag.incident import ErrorInfo, Incident, OpInfo, RunInfo
from cudadiag.repro.minimize import MinimizeError, Signature, minimize
from cudadiag.repro.notebook import export_notebook
from cudadiag.repro.staging import ExportError

_SPEC = importlib.util.spec_from_file_location(
    "history20", Path(__file__).parent.parent / "bench" / "history20.py")
_HISTORY = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_HISTORY)
history = _HISTORY.history  # the 20-cell case the minimizer benchmark measures too


def _incident(message: str, error_type: str = "RuntimeError", op: str | None = None):
    return Incident(error=ErrorInfo(type=error_type, message=message, text=message),
                    diagnosis=classify(message), run=RunInfo(mode="isolated"),
                    op=OpInfo(name=op) if op else None)


def test_signature_needs_family_type_and_known_op():
    sig = Signature("device_assert", "cudadiag.trace.PrecheckError", "aten::nll_loss_forward")
    same = _incident("CUDA error: device-side assert triggered",
                     "cudadiag.trace.PrecheckError", "aten::nll_loss_forward")
    assert sig.matches(same)
    assert not sig.matches(_incident("CUDA error: device-side assert triggered",
                                     "cudadiag.trace.PrecheckError", "aten::embedding"))
    assert not sig.matches(_incident("name 'x' is not defined", "NameError"))
    assert not sig.matches(None)


@pytest.mark.slow
def test_a_candidate_that_fails_differently_is_not_accepted():
    cells = {1: "import torch", 2: "target = torch.tensor([0, 2, 4])",
             3: "torch.nn.functional.cross_entropy(torch.randn(3, 4), target)"}
    result = minimize(cells)
    # without cell 2 the program fails too, but with a NameError: not the same failure
    assert list(result.cells) == [1, 2, 3]
    assert result.signature.op == "aten::nll_loss_forward"


@pytest.mark.slow
def test_a_program_that_does_not_fail_is_refused():
    with pytest.raises(MinimizeError, match="does not fail"):
        minimize({1: "x = 1"})
    with pytest.raises(MinimizeError, match="not as oom"):
        minimize({1: "raise RuntimeError('CUDA error: device-side assert triggered')"},
                 expected_family="oom")


@pytest.mark.slow
def test_the_trial_budget_keeps_the_best_candidate_so_far():
    result = minimize(history(False), max_trials=4)
    assert result.stopped == "max trials" and result.trials == 4
    assert 17 in result.cells  # whatever was kept still holds the faulty cell


@pytest.mark.slow
@pytest.mark.parametrize("simulated", [True, False], ids=["simulated_cuda", "cpu_twin"])
def test_twenty_cells_minimize_to_three_and_the_notebook_reproduces(shell, tmp_path,
                                                                    simulated, capsys):
    for source in history(simulated).values():
        shell.run_cell(source, store_history=True)
    path = tmp_path / "repro.ipynb"
    shell.run_cell(f"%cudadiag export {path}", store_history=True)
    out = capsys.readouterr().out
    assert "reproduces: yes" in out
    incident = next(i for i in reversed(incidents()) if i.repro)
    assert len(incident.repro.cells) <= 3
    assert any("cross_entropy" in src for src in incident.repro.cells.values())
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    meta = nb.metadata["cudadiag"]
    assert meta["reproduces"] is True and meta["incident"] == incident.id
    assert meta["signature"]["op"] == "aten::nll_loss_forward"
    assert nb.cells[1].source.splitlines()[-1] == 'os.environ["CUDA_LAUNCH_BLOCKING"] = "1"'
    assert "Diagnostic only" in nb.cells[1].source


def _run_batch_cell(source: str) -> object:
    namespace: dict = {}
    exec(source.replace("replay_batch(", "(lambda *a: None)("), namespace)
    return namespace["batch"]


def test_small_batches_are_inlined_with_dtype_shape_and_strides(tmp_path):
    features = torch.arange(12, dtype=torch.float16).reshape(3, 4).t()  # non-contiguous
    batch = {"x": features, "y": torch.tensor([0, 2, 4])}
    incident = _incident("CUDA error: device-side assert triggered")
    result = export_notebook(incident, tmp_path / "r.ipynb", {1: "pass"},
                             signature=Signature.of(incident), batch=(3, batch), verify=False)
    assert result.batch_file is None and result.reproduces is None
    cell = nbformat.read(result.path, as_version=4).cells[2].source
    assert "torch.empty_strided([4, 3], [1, 4], dtype=torch.float16)" in cell
    assert "replay_batch(3, batch)" in cell
    rebuilt = _run_batch_cell(cell)
    assert rebuilt["x"].stride() == features.stride() and rebuilt["x"].dtype == torch.float16
    assert torch.equal(rebuilt["x"], features) and torch.equal(rebuilt["y"], batch["y"])


def test_large_batches_are_saved_beside_the_notebook(tmp_path):
    batch = [torch.randn(200, 100)]
    incident = _incident("CUDA error: device-side assert triggered")
    result = export_notebook(incident, tmp_path / "r.ipynb", {1: "pass"},
                             signature=Signature.of(incident), batch=(0, batch), verify=False)
    assert result.batch_file == tmp_path / "r.batch.pt"
    (cell,) = [c.source for c in nbformat.read(result.path, as_version=4).cells
               if "replay_batch(" in c.source]
    assert "torch.load(os.path.join(_repro_dir, 'r.batch.pt'), weights_only=True)" in cell
    assert torch.equal(torch.load(result.batch_file, weights_only=True)[0], batch[0])


def test_export_refuses_a_path_that_is_not_a_notebook(tmp_path):
    incident = _incident("CUDA error: device-side assert triggered")
    with pytest.raises(ExportError, match=r"must end in \.ipynb"):
        export_notebook(incident, tmp_path / "r.txt", {1: "pass"},
                        signature=Signature.of(incident), verify=False)


@pytest.mark.slow
def test_an_interrupted_minimization_keeps_the_best_candidate():
    def ctrl_c_at_trial_10(trials: int, best: int, phase: str) -> None:
        if trials == 10:
            raise KeyboardInterrupt  # what Ctrl-C does between two trials

    result = minimize(history(False), progress=ctrl_c_at_trial_10)
    assert result.stopped == "interrupted" and result.trials == 11
    assert 17 in result.cells and len(result.cells) < 20


@pytest.mark.slow
def test_progress_counts_cells_while_removing_cells_and_statements_after():
    shown: list[tuple[str, int]] = []
    cells = history(False)
    result = minimize(cells, progress=lambda trials, best, phase: shown.append((phase, best)))
    by_phase = {phase: [best for p, best in shown if p == phase] for phase, _ in shown}
    assert max(by_phase["cells"]) <= len(cells) and by_phase["cells"][-1] == len(result.cells)
    assert by_phase["statements"][-1] == result.statements


def test_the_variables_a_program_read_are_set_unset_or_left_to_the_reader(tmp_path,
                                                                          monkeypatch):
    from cudadiag.repro.document import Program, build_document
    from cudadiag.repro.notebook import check_environment

    incident = _incident("CUDA error: device-side assert triggered")
    environ = {"GPT_SMALL": "1", "FAULT": None, "HF_TOKEN": "[REDACTED:HF_TOKEN]"}
    program = Program(cells={1: "pass"}, environ=environ)
    doc = build_document(incident, program, "r", signature={})
    (block,) = [b for b in doc.setup if "variables the program reads" in b]
    assert block.splitlines()[-3:] == [
        "os.environ['GPT_SMALL'] = '1'",
        "os.environ.pop('FAULT', None)  # not set in the original run",
        "os.environ.setdefault('HF_TOKEN', '[REDACTED:HF_TOKEN]')  # a secret: set your own"]
    assert ("`GPT_SMALL=1`, `FAULT unset`, `HF_TOKEN (a secret: not copied, set your own)`"
            in doc.header())
    # the check starts without the variables the repro sets: a shell's own value for one
    # cannot hide a repro that forgot it; a secret stays the user's
    for name in ("GPT_SMALL", "FAULT", "HF_TOKEN"):
        monkeypatch.setenv(name, "from the shell")
    monkeypatch.setattr("cudadiag.repro.notebook.startup_environment",
                        lambda: dict(__import__("os").environ))
    env = check_environment(doc)
    assert "GPT_SMALL" not in env and "FAULT" not in env and env["HF_TOKEN"] == "from the shell"


def test_a_search_cut_by_its_time_budget_says_how_much_to_ask_for():
    from cudadiag.repro.minimize import MinimizeResult

    result = MinimizeResult(cells={1: "pass"}, signature=Signature("oom", "X"), trials=9,
                            wall_s=60.2, original_cells=3, original_statements=9,
                            statements=4, stopped="timeout", timeout=60)
    assert result.stopped_text() == ("stopped early (timeout): the best candidate so far was "
                                     "kept (more time may make it smaller: --timeout 240)")
    result.stopped = "max trials"
    assert result.stopped_text() == "stopped early (max trials): the best candidate so far " \
                                    "was kept"
