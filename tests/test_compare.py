"""%cuda_compare: the cell as it is and once per variant, each alone in a fresh process; a
table of outcomes and output differences (method point 9)."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag.comparison.run import CompareError, output_diff, parse_variants
from cudadiag.comparison.variants import VARIANTS
from cudadiag.comparison.view import render_comparison_html
from cudadiag.own_work import outside_user_modes
from cudadiag.panel.widget import Panel

SETUP = ("import torch\nimport torch.nn.functional as F\nimport cudadiag\n"
         "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
DATA = ("torch.manual_seed(0)\nx = torch.randn(6, 4)\nmodel = torch.nn.Linear(4, 4)\n"
        "y = torch.tensor([0, 1, 2, 4, 1, 0])  # 4 is outside the 4 classes")


def run(shell, source):
    result = shell.run_cell(source, store_history=True)
    return result


def test_child_copies_assigned_values_within_budget_and_names_the_rest(tmp_path, monkeypatch):
    import json

    from cudadiag.comparison import variants

    monkeypatch.setattr(variants, "OUTPUT_MAX_BYTES", 1024)
    variants.setup(json.dumps({"dir": str(tmp_path), "outputs": ["big", "small", "n", "m"]}))
    variants.start()
    variants.finish({"big": torch.zeros(1024), "small": torch.ones(3), "n": 2.5,
                     "m": torch.nn.Linear(2, 2)})
    info = json.loads((tmp_path / variants.INFO_FILE).read_text())
    assert info["unsaved"] == {"big": "4,096 bytes, above the comparison's budget of 1,024"}
    assert info["device"] == "cpu" and info["wall_s"] >= 0 and info["changes"] == {}
    saved = torch.load(tmp_path / variants.OUTPUTS_FILE)
    assert sorted(saved) == ["n", "small"] and saved["n"].item() == 2.5


def test_unknown_variant_names_the_known_ones():
    with pytest.raises(CompareError, match="unknown variant fp8; choose among cpu, fp32"):
        parse_variants("cpu,fp8")


def test_half_against_float_is_close_at_half_tolerance_only():
    reference = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
    value = torch.tensor([1.0, 2.0005, 3.0])
    diff = output_diff("logits", reference, value)
    assert diff.allclose is True  # fp16's rtol 1e-3 applies: the looser dtype decides
    assert diff.max_abs == pytest.approx(0.0005, rel=1e-2)
    strict = output_diff("logits", reference.float(), value)
    assert strict.allclose is False and strict.max_rel == pytest.approx(0.00025, rel=1e-2)


def test_integer_outputs_must_be_equal_and_shapes_must_match():
    assert output_diff("idx", torch.tensor([1, 2]), torch.tensor([1, 3])).allclose is False
    shaped = output_diff("idx", torch.tensor([1, 2]), torch.tensor([[1, 2]]))
    assert shaped.allclose is None and shaped.note == "shape [1, 2], baseline [2]"
    assert output_diff("nan", torch.tensor([1.0]), torch.tensor([float("nan")])).note == \
        "1 NaN/Inf"


@pytest.mark.slow
def test_failing_cell_rows_name_the_failure_and_the_cpu_warning(shell):
    run(shell, SETUP)
    run(shell, DATA)
    run(shell, "loss = F.cross_entropy(model(x), y)\nprint(loss.item())")  # In[4] fails
    with outside_user_modes():
        rng_before = torch.get_rng_state()
    out = run(shell, "%cuda_compare --variants cpu,no_cudnn")
    table = out.result
    assert [r.variant for r in table.rows] == ["reference", "cpu", "no_cudnn"]
    reference, cpu, no_cudnn = table.rows
    assert (reference.outcome, reference.family, reference.op) == (
        "failed", "device_assert", "aten::nll_loss_forward")
    assert (cpu.outcome, cpu.family) == ("failed", "index_out_of_bounds")
    assert cpu.changes == {"simulated device entries skipped": 1}
    text = str(table)
    if torch.backends.cudnn.is_available():  # a CUDA build: cuDNN ships with it
        assert (no_cudnn.outcome, no_cudnn.family) == ("failed", "device_assert")
        assert "torch.backends.cudnn.enabled = False" in text
    else:
        assert no_cudnn.outcome == "not applicable"
        assert no_cudnn.reason == "this PyTorch build has no cuDNN"
        assert "not applicable: this PyTorch build has no cuDNN" in text
    assert table.baseline is None
    assert "failed: device_assert at aten::nll_loss_forward" in text
    assert "no baseline" in text
    panel = Panel(shell=shell)  # the newest incident: the failing In[4]
    assert panel.tabs.titles[-1] == "Compare"
    assert "failed: device_assert at aten::nll_loss_forward" in panel.tabs.children[-1].value
    assert "Compare In[4]: one change at a time" in panel._repr_mimebundle_()["text/html"]
    with outside_user_modes():  # the test's own reads, not the (poisoned) simulated device's
        assert torch.equal(torch.get_rng_state(), rng_before)  # the kernel's RNG is untouched
        assert shell.user_ns["y"].tolist() == [0, 1, 2, 4, 1, 0]


@pytest.mark.slow
def test_cell_magic_measures_each_change_and_counts_it(shell):
    run(shell, SETUP)
    run(shell, "torch.manual_seed(0)\nx = torch.randn(4, 6)\nw = torch.randn(4, 4)")
    out = run(shell, "%%cuda_compare --variants fp32,contiguous\n"
                     "h = (w.half() @ x.half()).float()\n"
                     "flat = x.t().view(-1)  # a view of a transposed tensor fails\n")
    table = out.result
    reference, fp32, contiguous = table.rows
    assert reference.outcome == "failed" and "view" in reference.reason
    assert fp32.outcome == "failed"  # fp32 alone does not fix the layout
    assert fp32.changes == {"fp16/bf16 casts made fp32": 2}
    assert contiguous.ok and contiguous.changes == {"non-contiguous inputs copied": 1}
    assert table.baseline is None  # no cpu row: nothing to measure from
    assert "Passed with one change each: contiguous" in " ".join(table.warnings)


@pytest.mark.slow
def test_python_api_returns_the_table_with_differences_from_the_reference(shell):
    run(shell, SETUP)
    run(shell, "torch.manual_seed(0)\nx = torch.randn(4, 6)\nw = torch.randn(4, 4)")
    run(shell, "h = (w.half() @ x.half()).float()\ntotal = float(h.sum())")  # In[4]
    out = run(shell, "c = cudadiag.compare(4, variants=['fp32', 'cpu'])")
    assert out.error_in_exec is None
    table = shell.user_ns["c"]
    assert table.baseline == "reference" and table.outputs == ["h", "total"]
    fp32 = table.row("fp32")
    h = next(d for d in fp32.diffs if d.name == "h")
    assert h.shape == [4, 6] and h.max_abs is not None and 0 < h.max_abs < 0.05
    assert h.allclose is False  # fp16 products are not within fp32's tolerance
    cpu = table.row("cpu")
    assert cpu.ok and all(d.max_abs == 0 for d in cpu.diffs)
    assert any("CPU success is a clue, not a CUDA validation" in w for w in table.warnings)
    html = render_comparison_html(table)
    assert "<table" in html and "differences (from reference)" in html


def test_bad_variant_in_magic_is_a_usage_error(shell):
    run(shell, "x = 1")
    with pytest.raises(UsageError, match="unknown variant"):
        shell.run_line_magic("cuda_compare", "1 --variants gpu")


def test_no_incident_and_no_cell_says_what_to_type(shell):
    with pytest.raises(UsageError, match=r"name the cell to compare, e\.g\. %cuda_compare 12"):
        shell.run_line_magic("cuda_compare", "")


@pytest.mark.slow
def test_cpu_twin_marks_cpu_not_applicable_and_names_the_cpu_error(shell):
    run(shell, "import torch\nimport torch.nn.functional as F")  # no simulated device
    run(shell, DATA)
    run(shell, "loss = F.cross_entropy(model(x), y)")  # In[3]: Target 4 is out of bounds
    table = run(shell, "%cuda_compare --variants cpu,deterministic").result
    reference, cpu, deterministic = table.rows
    assert (reference.outcome, reference.family) == ("failed", "index_out_of_bounds")
    assert cpu.outcome == "not applicable"
    assert cpu.reason == "the cell used no CUDA device: it ran on the CPU already"
    assert deterministic.outcome == "failed"
    assert not any("CPU success" in w for w in table.warnings)


@pytest.mark.slow
def test_a_cell_that_appends_to_a_file_runs_once_per_row_only_when_allowed(
        shell, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(shell, "import torch")
    cell = len(shell.user_ns["In"])
    run(shell, "x = torch.ones(3)\nwith open('log.txt', 'a') as log:\n    log.write('ran\\n')\n"
               "y = x * 2")
    capsys.readouterr()

    result = run(shell, f"%cuda_compare {cell} --variants fp32,deterministic")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == (
        f"not run: In[{cell}] would run once per row (the reference and 2 variants), each "
        "time doing again what it does to this machine:\n"
        f"  In[{cell}] writes a file: open('log.txt', 'a')\n"
        f"Add --allow-side-effects to run In[{cell}] once per row (the reference and 2 "
        "variants) anyway.")
    out = capsys.readouterr().out
    assert (f"  side effect: In[{cell}] (the cell re-run) writes a file: "
            "open('log.txt', 'a')") in out
    assert "reference:" not in out  # nothing ran
    assert (tmp_path / "log.txt").read_text() == "ran\n"

    table = run(shell, f"%cuda_compare {cell} --variants fp32,deterministic "
                       "--allow-side-effects").result
    out = capsys.readouterr().out
    assert out.index("side effect: In[") < out.index("  reference: ok")  # named first
    assert [r.outcome for r in table.rows] == ["ok", "ok", "ok"]
    assert (tmp_path / "log.txt").read_text() == "ran\n" * 4


@pytest.mark.slow
def test_the_table_folds_rows_that_changed_nothing_and_aligns_its_figures(shell):
    """Every variant on a float32 model on the CPU: the ones that change nothing here fold
    into one line; no column is empty in every row; the wall times are right-aligned and
    never wrapped."""
    import re

    run(shell, SETUP)
    run(shell, DATA)
    run(shell, "loss = F.cross_entropy(model(x), y)\nprint(loss.item())")
    table = run(shell, "%cuda_compare").result
    html = render_comparison_html(table)
    nothing = [r.variant for r in table.rows if r.variant != "reference"
               and not r.changes and r.outcome == table.rows[0].outcome
               and not VARIANTS[r.variant].sets_flag]
    assert nothing, [(r.variant, r.outcome, r.changes) for r in table.rows]
    assert f"Changed nothing in this cell: {', '.join(nothing)} (the same program" in html
    body = html.split("<tbody>")[1]
    for variant in nothing:
        assert f">{variant}<" not in body  # folded: not a row of its own
    rows = re.findall(r"<tr>(.*?)</tr>", body)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    assert all(any(row[n] for row in cells) for n in range(len(cells[0])))
    assert re.search(r'<td style="text-align: right; white-space: nowrap[^"]*">\d+ ms</td>',
                     body)
    assert re.search(r'<td style="text-align: left[^"]*">reference</td>', body)
