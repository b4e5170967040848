"""Text, Markdown and HTML renderings of an incident."""

from __future__ import annotations

from dataclasses import replace

import torch

from cudadiag import classify, summarize
from cudadiag.incident import (
    BatchInfo,
    ErrorInfo,
    Frame,
    FrameContext,
    Incident,
    LaterError,
    LoopContext,
    LoopInfo,
    RunInfo,
    StepInfo,
)
from cudadiag.ui.render import (
    SHOW_IN_IPYTHON,
    SHOW_IN_TERMINAL,
    render_html,
    render_short,
    render_text,
)
from scenarios import unwrapped

ASSERT = "CUDA error: device-side assert triggered"


def incident() -> Incident:
    frame = Frame(file="<ipython-input-5-x>", line=3, function="<module>",
                  source="print(loss.item())", cell=5)
    return Incident(
        error=ErrorInfo(type="torch.AcceleratorError", message=ASSERT, text=ASSERT,
                        traceback=[frame], reported_at=frame,
                        later=[LaterError(type="RuntimeError", message=ASSERT,
                                          family="device_assert", at="t", cell=6)]),
        diagnosis=classify(ASSERT),
        run=RunInfo(mode="kernel", cells=[5], simulated=True),
        step=StepInfo(iteration=3, last_completed=2, last_incomplete=True, loader="train"),
        batch=BatchInfo(**vars(summarize([torch.zeros(6, 8, device="meta"),
                                          torch.tensor([0, 1, 2, 3, 4, 0])])),
                        indices=[24, 25]),
    )


def test_text_has_banner_error_batch_checks_and_later_errors():
    text = render_text(incident())
    assert "RESTART REQUIRED" in text
    assert "reported at In[5], line 3 in <module>: print(loss.item())" in text
    assert "observation point" in text
    assert "flags: last incomplete batch" in text
    assert "batch[1] | [6] | int64 | cpu | [1] | 0 | 4 | 0 | 5" in text
    assert "Later errors (1, probable consequences of the first)" in text
    assert "[simulated]" in text


def test_the_first_error_lists_what_the_message_says_not_how_it_was_worded():
    text = ("Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: "
            "[2,0,0] Assertion `t >= 0 && t < n_classes` failed.\n" + ASSERT + "\nCUDA kernel "
            "errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    shown = render_text(replace(incident(), diagnosis=classify(text)))
    assert "assertion: t >= 0 && t < n_classes" in shown
    assert not any(hint in shown for hint in ("async_hint", "blocking_hint", "dsa_hint"))


def test_html_escapes_and_marks_its_parts():
    inc = incident()
    inc.error.message = "<script>alert(1)</script>"
    html = render_html(inc)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'class="cd-restart"' in html and 'class="cd-batch-table"' in html
    assert "<details><summary>Later errors" in html
    assert "on meta: metadata only" in html


def test_short_text_points_at_the_full_report_with_the_readers_command():
    inc = incident()
    short = render_short(inc, show=SHOW_IN_IPYTHON)
    assert short.startswith("cudadiag [") and "Device-side assertion" in short
    assert short.endswith(f"details: %cudadiag show {inc.id}")
    assert render_short(inc, show=SHOW_IN_TERMINAL).endswith(f"details: cudadiag show {inc.id}")


def test_short_text_of_an_unsaved_incident_has_no_hint():
    assert "show" not in render_short(incident(), show=None)


def _with_loop() -> Incident:
    inc = incident()
    inc.loop = LoopContext([FrameContext(
        file="<ipython-input-4-x>", line=6, function="train", cell=4,
        statement="            running += loss.item()", statement_line=6,
        loops=[LoopInfo("for", 2, "    for epoch in range(2):", {"epoch": "1"}),
               LoopInfo("for", 3, "        for i, (x, y) in enumerate(loader):",
                        {"i": "23", "x": "<tensor float32[6, 8]>"})],
        scalars={"lr": "0.1", "bs": "32"})])
    return inc


def test_short_text_names_the_iteration_and_the_watch_step():
    short = unwrapped(render_short(_with_loop(), show=SHOW_IN_IPYTHON))
    assert ("  loop when the error was noticed: epoch=1, i=23, x=<tensor float32[6, 8]> "
            "(In[4] in train)") in short
    assert "  locals of In[4] in train: lr=0.1, bs=32" in short
    assert ("  watch(train): step 3, last completed 2; last incomplete batch; dataset indices "
            "[24, 25]") in short


def test_the_loop_section_keeps_the_code_as_written():
    inc = _with_loop()
    text = render_text(inc)
    assert ("Where in the loop\n"
            "  # In[4], line 6 in train\n"
            "  for epoch in range(2):  # epoch=1\n"
            "      for i, (x, y) in enumerate(loader):  # i=23, x=<tensor float32[6, 8]>\n"
            "          ...\n"
            "          running += loss.item()  # <- the error was noticed here\n"
            "  # locals: lr=0.1, bs=32") in text
    html = render_html(inc)
    assert "<pre># In[4], line 6 in train\nfor epoch in range(2):" in html


def test_with_blocking_launches_the_line_is_where_it_was_raised():
    inc = _with_loop()
    inc.run = RunInfo(mode="isolated", blocking=True, simulated=True)
    short = unwrapped(render_short(inc, show=SHOW_IN_IPYTHON))
    assert "  loop: epoch=1, i=23" in short
    assert "observation point" not in short and "noticed" not in short
    assert "running += loss.item()  # <- raised here" in render_text(inc)


def test_a_lead_over_its_budget_keeps_the_start_of_a_long_path_and_value():
    """A long file path shows its last two parts and line; a long unbroken offending value is
    cut within it, not left out whole (the headline then still names it)."""
    from cudadiag.ui.render import LEAD_BUDGET

    inc = _with_loop()
    folders = "/".join(f"a_long_directory_name_{n}" for n in range(14))
    inc.error.reported_at = Frame(file=f"/home/user/{folders}/train.py", line=7,
                                  function="train_step", source="return loss.item()")
    inc.diagnosis = replace(inc.diagnosis, summary="Target " + "1234567890" * 80
                            + " is out of bounds.")
    short = render_short(inc, show=SHOW_IN_IPYTHON)
    lines = short.splitlines()
    assert len(lines) <= LEAD_BUDGET and all(len(line) <= 100 for line in lines), short
    assert "Target 1234567890123" in lines[0], short
    assert ("  noticed (not necessarily the cause) at "
            "…/a_long_directory_name_13/train.py:7 in train_step") in short
