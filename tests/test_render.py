"""Text, Markdown and HTML renderings of an incident."""

from __future__ import annotations

from cudadiag import classify
from cudadiag.incident import ErrorInfo, Frame, Incident, LaterError, RunInfo, StepInfo
from cudadiag.ui.render import (
    SHOW_IN_IPYTHON,
    SHOW_IN_TERMINAL,
    render_html,
    render_short,
    render_text,
)

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
        batch={"structure": "list[Tensor, Tensor]", "indices": [24, 25],
               "tensors": [{"path": "batch[1]", "shape": [6], "dtype": "int64",
                            "device": "cpu", "stride": [1], "min": 0, "max": 4,
                            "negatives": 0, "distinct": 5, "nan": None, "inf": None,
                            "values_skipped": None},
                           {"path": "batch[0]", "shape": [6, 8], "dtype": "float32",
                            "device": "cuda:0", "stride": [8, 1],
                            "values_skipped": "on cuda:0: metadata only"}]},
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


def test_html_escapes_and_marks_its_parts():
    inc = incident()
    inc.error.message = "<script>alert(1)</script>"
    html = render_html(inc)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'class="cd-restart"' in html and 'class="cd-batch-table"' in html
    assert "<details><summary>Later errors" in html
    assert "on cuda:0: metadata only" in html


def test_short_text_points_at_the_full_report_with_the_readers_command():
    inc = incident()
    short = render_short(inc, show=SHOW_IN_IPYTHON)
    assert short.startswith("cudadiag [") and "Device-side assertion" in short
    assert short.endswith(f"details: %cudadiag show {inc.id}")
    assert render_short(inc, show=SHOW_IN_TERMINAL).endswith(f"details: cudadiag show {inc.id}")


def test_short_text_of_an_unsaved_incident_has_no_hint():
    assert "show" not in render_short(incident(), show=None)
