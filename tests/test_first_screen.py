"""What a user sees first under a failing cell: the lead (at most render.LEAD_BUDGET lines in
the text, HTML and widget forms), then PyTorch's traceback folded to three lines through
IPython's own hook for custom tracebacks, with `%tb` and `sys.last_value` still working."""

from __future__ import annotations

import re
import sys

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from cudadiag import incidents
from cudadiag.capture.folded_traceback import UNFOLD
from cudadiag.ui.render import LEAD_BUDGET, render_html, render_short
from scenarios import MODEL, SETUP, fail_with_device_assert, run

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_the_text_form_is_the_lead_within_its_budget_in_order(shell, capsys):
    cell = fail_with_device_assert(shell)
    printed = ANSI.sub("", capsys.readouterr().err + "")
    (incident,) = incidents()
    short = render_short(incident, show="%cudadiag show")
    lines = short.splitlines()
    assert len(lines) <= LEAD_BUDGET and all(len(line) <= 100 for line in lines), short
    order = ["device_assert — Device-side assertion", "noticed (not", "Restart required",
             "next: %cuda_isolate", "details: %cudadiag show"]
    at = [short.index(part) for part in order]
    assert at == sorted(at), short
    assert short in printed
    assert ("noticed (not necessarily the cause) at "
            f"In[{cell}], line 1: print('loss', loss.item())") in " ".join(short.split())


def test_the_html_form_holds_the_lead_before_its_first_section(shell):
    fail_with_device_assert(shell)
    (incident,) = incidents()
    html = render_html(incident)
    lead = html.split('<div class="cd-lead"', 1)[1].split("</div></div>", 1)[0]
    assert html.index('class="cd-lead"') < html.index("<section") or "<section" not in html
    assert 0 < lead.count("<div") <= LEAD_BUDGET
    assert 'class="cd-headline"' in lead and 'class="cd-restart-line"' in lead


def test_the_traceback_follows_the_diagnosis_folded_and_tb_still_unfolds_it(
        shell, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", sys.stdout)  # one stream, in the order a terminal shows
    shell.InteractiveTB.set_mode("Context")  # IPython's default (a test may have left Minimal)
    cell = fail_with_device_assert(shell)
    shown = ANSI.sub("", capsys.readouterr().out)
    assert shown.index("cudadiag [") < shown.index(UNFOLD)
    folded = shown[shown.index(UNFOLD):].splitlines()[:3]
    assert folded[1] == f"In[{cell}], line 1: print('loss', loss.item())"
    assert folded[2] == "SimulatedAcceleratorError: CUDA error: device-side assert triggered"
    assert "testing.py" not in shown and "Traceback (most recent call last)" not in shown
    # IPython's own tools still see the error
    assert type(sys.last_value).__name__ == "SimulatedAcceleratorError"
    run(shell, "%tb")
    full = ANSI.sub("", capsys.readouterr().out)
    assert "Traceback (most recent call last)" in full and "loss.item()" in full
    assert "CUDA kernel errors might be asynchronously reported" in full
    assert "testing.py" not in full  # cudadiag's own frames are not the user's


def test_an_error_cudadiag_does_not_diagnose_keeps_its_full_traceback(shell, capfd):
    shell.InteractiveTB.set_mode("Context")  # IPython's default (a test may have left Minimal)
    run(shell, "def f():\n    return {}['missing']")
    run(shell, "f()")
    shown = ANSI.sub("", "".join(capfd.readouterr()))
    assert UNFOLD not in shown and "Traceback (most recent call last)" in shown
    assert "KeyError: 'missing'" in shown
    assert isinstance(sys.last_value, KeyError)


def test_a_handler_of_the_users_own_stays_and_cudadiag_shows_after_the_traceback(shell):
    shell.run_cell("%unload_ext cudadiag")
    seen = []
    shell.set_custom_exc((RuntimeError,), lambda *args, **kw: seen.append(args[2]))
    try:
        shell.run_cell("%load_ext cudadiag")
        run(shell, "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
        assert len(seen) == 1  # the user's handler ran, not cudadiag's
        assert incidents()[0].diagnosis.family == "illegal_memory"  # still diagnosed
    finally:
        shell.set_custom_exc((), None)


@pytest.mark.slow
def test_in_a_notebook_the_panel_comes_before_a_three_line_traceback(tmp_path, monkeypatch):
    cells = ["%load_ext cudadiag", SETUP, MODEL + "\nloss.item()"]
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    monkeypatch.setenv("CUDADIAG_HOME", str(tmp_path / "home"))
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    kinds = [o.output_type for o in nb.cells[2].outputs if o.output_type != "stream"]
    assert kinds == ["display_data", "error"], kinds
    shown = next(o for o in nb.cells[2].outputs if o.output_type == "display_data")
    plain = shown.data["text/plain"]
    assert len(plain.splitlines()) <= LEAD_BUDGET, plain
    assert plain.splitlines()[0].startswith("cudadiag [") and "Restart required" in plain
    error = next(o for o in nb.cells[2].outputs if o.output_type == "error")
    lines = ANSI.sub("", "\n".join(error.traceback)).splitlines()
    assert len(lines) == 3 and lines[0] == UNFOLD, lines
    assert lines[1] == "In[3], line 6: loss.item()"
    assert error.ename == "SimulatedAcceleratorError"  # the error itself is kept whole
    assert "CUDA kernel errors might be asynchronously reported" in error.evalue


def test_cudadiags_own_commands_get_no_restart_reminder_other_cells_do(shell, capsys):
    fail_with_device_assert(shell)
    capsys.readouterr()
    run(shell, "%cudadiag incidents")
    assert "has been unusable since" not in capsys.readouterr().err
    run(shell, "y = 1")
    assert "has been unusable since" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.isolates
def test_a_replayed_batch_keeps_its_dataset_indices_and_names_the_offending_sample(
        shell, capsys):
    """`%cuda_isolate --batch last` on the demo: the replayed step is still the last
    incomplete batch, and the offending target's position is turned into its dataset index,
    the tensor named as the loop names it (`target`)."""
    import nbformat

    from scenarios import unwrapped

    demo = nbformat.read("notebooks/device_assert_demo.ipynb", as_version=4)
    for source in [c.source for c in demo.cells if c.cell_type == "code"][1:4]:
        run(shell, source)
    run(shell, "%cuda_isolate --batch last")
    isolated = next(i for i in incidents() if i.run.mode == "isolated")
    assert isolated.batch.indices == [24, 25, 26, 27, 28, 29]
    assert isolated.step.last_incomplete
    short = unwrapped(render_short(isolated, show=None))
    assert ("position 2 is target[2] (batch[1][2], row 2: dataset index 26)"
            in short.splitlines()[0] + " " + short)  # the headline names it
    assert "target (batch[1])" in render_html(isolated)  # the Batch table too
    assert "last incomplete batch" in short and len(short.splitlines()) <= LEAD_BUDGET


def test_a_cell_that_does_not_compile_shows_only_its_syntax_error(shell, capsys):
    run(shell, "x = (")
    shown = ANSI.sub("", "".join(capsys.readouterr()))
    assert "SyntaxError: incomplete input" in shown and "Cell In[" in shown
    assert "Traceback (most recent call last)" not in shown  # no frames of IPython's parser
    assert "ast_parse" not in shown and "interactiveshell.py" not in shown
    assert incidents() == []


def test_debug_opens_the_users_line_not_cudadiags_frames(shell, capsys, monkeypatch):
    import io

    cell = fail_with_device_assert(shell)
    capsys.readouterr()
    monkeypatch.setattr(shell.InteractiveTB, "pdb", None)  # a debugger reading this stdin
    monkeypatch.setattr(sys, "stdin", io.StringIO("where\nq\n"))
    run(shell, "%debug")
    shown = ANSI.sub("", capsys.readouterr().out)
    assert f"<ipython-input-{cell}-" in shown and "print('loss', loss.item())" in shown
    assert "testing.py" not in shown, shown  # the simulated device's raise is cudadiag's


def test_the_folded_frame_is_the_users_line_not_pytorchs(shell, capsys, monkeypatch):
    """The walk's loop fails inside F.cross_entropy (an IndexError on CPU tensors): the
    folded traceback names the loop's line, the last frame of the user's code."""
    from scenarios import WALK_DATA, WALK_LOOP, WALK_SETUP

    monkeypatch.setattr(sys, "stderr", sys.stdout)
    run(shell, WALK_SETUP)
    run(shell, WALK_DATA)
    result, cell = run(shell, WALK_LOOP)
    assert isinstance(result.error_in_exec, IndexError)
    shown = ANSI.sub("", capsys.readouterr().out)
    folded = shown[shown.index(UNFOLD):].splitlines()[:3]
    assert folded[1] == (f"In[{cell}], line 2: "
                         "loss = F.cross_entropy(model(features), target)"), folded
    assert folded[2] == "IndexError: Target 4 is out of bounds."


def test_under_colors_nocolor_the_folded_traceback_has_no_colour_codes(shell, capsys):
    colors = shell.colors
    try:
        run(shell, "%colors nocolor")
        fail_with_device_assert(shell)
    finally:
        shell.colors = colors
    shown = capsys.readouterr().out
    assert UNFOLD in shown and "\x1b[" not in shown, shown  # the folded traceback is on stdout


def test_in_a_time_cell_the_lead_and_the_fold_name_the_cells_line(shell, capsys, monkeypatch):
    """`%%time` runs the cell's body as `<timed exec>`: both forms name the cell and its line
    (the body's line 4 is the cell's line 5) and show its code."""
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    run(shell, SETUP)
    result, cell = run(shell, "%%time\n" + MODEL + "\nloss.item()")
    assert result.error_in_exec is not None
    shown = ANSI.sub("", capsys.readouterr().out)
    assert f"not necessarily the cause) at In[{cell}], line 7: loss.item()" in shown, shown
    folded = shown[shown.index(UNFOLD):].splitlines()[:3]
    assert folded[1] == f"In[{cell}], line 7: loss.item()", folded
    assert "<timed exec>" not in shown


def test_a_later_error_of_the_unusable_context_is_folded_under_its_reminder(
        shell, capsys, monkeypatch):
    """The second failure: the cell's reminder says the context is unusable, and the
    traceback is folded (its asynchronous-error advice would send the user hunting); an
    error the context does not explain keeps its full traceback."""
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    shell.InteractiveTB.set_mode("Context")
    fail_with_device_assert(shell)
    capsys.readouterr()
    _, cell = run(shell, "y = torch.ones(2).cuda() + 1")
    shown = ANSI.sub("", capsys.readouterr().out)
    assert shown.index("has been unusable since") < shown.index(UNFOLD), shown
    assert f"In[{cell}], line 1: y = torch.ones(2).cuda() + 1" in shown
    assert "CUDA_LAUNCH_BLOCKING" not in shown and "cudadiag [" not in shown
    assert incidents()[0].error.later[-1].cell == cell
    run(shell, "raise ValueError('mine')")
    shown = ANSI.sub("", capsys.readouterr().out)
    assert UNFOLD not in shown and "Traceback (most recent call last)" in shown
