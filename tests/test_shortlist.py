"""Lists cut for display say how many items were left out, wherever they are cut."""

from __future__ import annotations

import pytest
import torch

from cudadiag import (
    GuardError,
    check_class_targets,
    check_index_range,
    check_label_mapping,
    classify,
)
from cudadiag.batch import summarize
from cudadiag.incident import BatchInfo, ErrorInfo, Incident, RunInfo
from cudadiag.shortlist import cut_join, cut_list
from cudadiag.trace import describe_value
from cudadiag.ui.render import render_text


def test_a_cut_list_says_how_many_more():
    assert cut_list(range(64), 32) == "[" + ", ".join(map(str, range(32))) + \
        ", … and 32 more]"
    assert cut_list([1, 2], 5) == "[1, 2]"
    assert cut_join(["a", "b"], 1, omitted=3) == "a, … and 4 more"
    with pytest.raises(ValueError, match="at least 1 item"):
        cut_list([1], 0)


def test_guard_messages_count_the_values_they_do_not_list():
    with pytest.raises(GuardError, match=r"9 at position 9, … and 54 more\. Check"):
        check_class_targets(torch.full((64,), 9), 4)
    with pytest.raises(GuardError, match=r"and 20 more\. Check the vocabulary"):
        check_index_range(torch.arange(100, 130), 100)
    with pytest.raises(GuardError, match=r"class names without an index: \['c0', .*'c9', … "
                                         r"and 5 more\]"):
        check_label_mapping({}, [f"c{k}" for k in range(15)])


def test_a_long_batch_structure_and_a_list_argument_say_how_many_more():
    batch = [torch.zeros(1)] * 20
    assert summarize(batch).structure == (
        "list[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, … and 12 more]")
    assert describe_value("size", list(range(40))).value.endswith(", 15, … and 24 more]")


def test_show_cuts_dataset_indices_and_sequence_lengths_with_a_count():
    incident = Incident(
        error=ErrorInfo(type="RuntimeError", message="x", text="x"),
        diagnosis=classify("RuntimeError: x"),
        run=RunInfo(mode="kernel"),
        batch=BatchInfo(**vars(summarize({"input_ids": torch.zeros(100, 5, dtype=torch.long),
                                          "attention_mask": torch.ones(100, 5)})),
                        indices=list(range(64))),
    )
    text = render_text(incident)
    assert "dataset indices [0, 1, 2," in text and ", 31, … and 32 more]" in text
    assert "sequence lengths [5, 5," in text and "5, … and 36 more]" in text
