"""One notation for a valid range wherever a person reads it: half-open `[0, 4)` (4 is not
valid) in `show`'s text, the HTML the panel and static views show, and the report (issue 21,
item 5)."""

from __future__ import annotations

import torch

from cudadiag import classify, summarize
from cudadiag.incident import BatchInfo, ErrorInfo, Incident, RunInfo
from cudadiag.repro.report import render_report
from cudadiag.ui.render import render_html, render_text

ASSERT = "CUDA error: device-side assert triggered"


def test_a_valid_range_reads_half_open_in_the_text_the_html_and_the_report():
    diagnosis = classify(ASSERT)
    diagnosis.details.update(op="aten::nll_loss_forward", argument="target", value=4,
                             position=[2], valid_range=[0, 4])
    incident = Incident(
        error=ErrorInfo(type="torch.AcceleratorError", message=ASSERT, text=ASSERT),
        diagnosis=diagnosis, run=RunInfo(mode="isolated", simulated=True),
        batch=BatchInfo(**vars(summarize([torch.zeros(3, 4), torch.tensor([0, 2, 4])]))))
    text, html, report = render_text(incident), render_html(incident), render_report(incident)
    assert "valid_range: [0, 4)" in text
    assert "valid_range</div><div>[0, 4)</div>" in html  # the First error tab's grid
    assert "values 0..4 outside [0, 4)" in text  # the batch's values against the range
    for shown in (text, html, report):
        assert "[0, 4]" not in shown
