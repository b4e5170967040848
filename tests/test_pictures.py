"""The Batch section's picture: the offending tensor's values against the valid range, as
inline SVG that stays readable without widgets and in a dark theme."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import torch

from cudadiag.batch import summarize
from cudadiag.classification import classify
from cudadiag.incident import BatchInfo, ErrorInfo, Incident, RunInfo
from cudadiag.ui import render
from cudadiag.ui.pictures import values_picture

SVG = "{http://www.w3.org/2000/svg}"


def incident_with(target, valid=(0, 4), value=4, position=(2,)):
    diagnosis = classify("RuntimeError: CUDA error: device-side assert triggered")
    if valid is not None:
        diagnosis.details.update(op="aten::nll_loss_forward", argument="target", value=value,
                                 position=list(position), valid_range=list(valid))
    batch = BatchInfo(**vars(summarize((torch.randn(len(target), 3), target))))
    return Incident(error=ErrorInfo(type="PrecheckError", message="target out of range",
                                     text="target out of range"),
                    diagnosis=diagnosis, run=RunInfo(mode="isolated"), batch=batch)


def texts(svg):
    return [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_targets_become_a_histogram_with_the_out_of_range_bar_in_red():
    picture = values_picture(incident_with(torch.tensor([0, 1, 4, 2, 3, 1])))
    root = ET.fromstring(picture.svg)  # well-formed, self-contained
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class", "").startswith("cd-bar")]
    red = [r for r in bars if r.get("class") == "cd-bar-out"]
    assert len(bars) == 5 and len(red) == 1
    assert red[0].find(f"{SVG}title").text == "value 4: 1"
    labels = texts(picture.svg)
    assert "batch[1]: values against the valid range [0, 4)" in labels
    assert "valid [0, 4)" in labels
    assert ("4 at position 2 is outside the valid range (aten::nll_loss_forward, argument "
            "target)") in labels
    assert [t for t in labels if t in {"0", "1", "2", "3", "4"}] == ["1", "2", "1", "1", "1",
                                                                      "0", "1", "2", "3", "4"]
    assert 'fill="currentColor"' in picture.svg  # text follows the theme's foreground
    caption = next(t for t in ET.fromstring(picture.svg).iter(f"{SVG}text")
                   if t.text.startswith("4 at position 2"))
    assert caption.get("style") == "fill: var(--jp-error-color1, #d62728)"  # the theme's red
    assert picture.text.endswith("outside: 4 ×1; 4 at position 2 is outside the valid range "
                                 "(aten::nll_loss_forward, argument target)")


def test_many_distinct_values_are_drawn_as_their_span_on_a_number_line():
    ids = torch.arange(100)
    picture = values_picture(incident_with(ids, valid=(0, 90), value=95, position=(95,)))
    root = ET.fromstring(picture.svg)
    red = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "#d62728"]
    assert len(red) == 1 and root.find(f"{SVG}circle") is not None
    assert {"0", "89", "99"} <= set(texts(picture.svg))
    assert "values span 0..99" in picture.text


def test_no_picture_without_an_offending_tensor_or_of_a_family_without_index_values():
    assert values_picture(incident_with(torch.tensor([0, 1, 2]))) is None
    oom = incident_with(torch.tensor([0, 1, 4]), valid=None)
    oom.diagnosis = classify("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    assert values_picture(oom) is None
    floats_only = incident_with(torch.tensor([0.5, 1.5]), valid=None)
    assert values_picture(floats_only) is None


def test_without_a_valid_range_the_values_are_drawn_alone_saying_where_the_range_comes_from():
    picture = values_picture(incident_with(torch.tensor([0, 1, 4, 2, 4]), valid=None))
    root = ET.fromstring(picture.svg)
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class", "").startswith("cd-bar")]
    assert [b.find(f"{SVG}title").text for b in bars] == [
        "value 0: 1", "value 1: 1", "value 2: 1", "value 4: 2"]
    assert not [r for r in root.iter(f"{SVG}rect")
                if r.get("class") in ("cd-bar-out", "cd-valid-range")]  # nothing judged
    assert "valid range not known here: %cuda_isolate re-runs the cell and names it" in texts(
        picture.svg)
    assert picture.text.startswith("batch[1]: values in the batch: 0 ×1, 1 ×1, 2 ×1, 4 ×2")


def test_under_the_failing_cell_the_batch_tab_draws_the_values_before_the_range_is_known(
        shell):
    from cudadiag import incidents
    from scenarios import WALK_DATA, WALK_SETUP, run

    run(shell, "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, WALK_SETUP)
    run(shell, WALK_DATA + "\nmodel = model.cuda()")
    result, _ = run(shell, "for features, target in cudadiag.watch(loader, name='train'):\n"
                           "    loss = F.cross_entropy(model(features.cuda()), target.cuda())\n"
                           "    print('loss', loss.item())")
    assert result.error_in_exec is not None
    (incident,) = incidents()
    assert incident.run.mode == "kernel" and "valid_range" not in incident.diagnosis.details
    html = render.render_html(incident)
    batch = html[html.index('<section class="cd-batch">'):]
    assert '<div class="cd-picture"><svg' in batch
    assert "values in the batch" in batch and "valid range not known here" in batch


def test_batch_section_carries_the_picture_in_html_and_its_line_in_text():
    incident = incident_with(torch.tensor([0, 1, 4, 2, 3, 1]))
    html = render.render_html(incident)
    assert '<div class="cd-picture"><svg' in html and "cd-bar-out" in html
    assert "picture: batch[1]: values against the valid range [0, 4)" in \
        render.render_text(incident)
