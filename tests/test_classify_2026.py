"""classify() on the 2026 classes (tests/data/messages-2026.jsonl, see tests/data/README.md):
CUDA graphs, ROCm and torch.AcceleratorError wordings, extension binaries. The messages were
split by thread before any row was written; the held-out threads' figures are the blind ones."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from cudadiag import classify
from cudadiag.knowledge import FAMILY_NAMES
from test_classify_corpus import HOME, records_2026

TOPICS = ("cuda_graph", "rocm_accelerator", "extension_binary")
MIN_HELD_OUT_ACCURACY = 0.9


def test_every_topic_has_fifteen_sourced_messages_from_distinct_threads():
    corpus = records_2026()
    assert len({r["source"] for r in corpus}) == len(corpus)
    for topic in TOPICS:
        rows = [r for r in corpus if r["topic"] == topic]
        assert len(rows) >= 15, topic
        assert {r["split"] for r in rows} == {"train", "heldout"}, topic
    for r in corpus:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", r["source"]), r["id"]
        assert r["family"] in FAMILY_NAMES and r["reason"], r["id"]
        assert not HOME.search(r["text"]), f"{r['id']} holds a home directory"


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_family_and_stickiness_per_topic(split, capsys):
    right: dict[str, list[bool]] = defaultdict(list)
    wrong = []
    for r in (r for r in records_2026() if r["split"] == split):
        d = classify(r["text"])
        ok = d.family == r["family"] and (d.sticky or not r["sticky"])
        right[r["topic"]].append(ok)
        if not ok:
            wrong.append((r["id"], r["family"], d.family, d.sticky))
    figures = {t: f"{sum(right[t])}/{len(right[t])}" for t in TOPICS}
    with capsys.disabled():
        print(f"\n[2026 {split}] family and stickiness right: {figures}; wrong: {wrong}")
    threshold = 1.0 if split == "train" else MIN_HELD_OUT_ACCURACY
    for topic in TOPICS:
        assert sum(right[topic]) / len(right[topic]) >= threshold, (topic, wrong)
