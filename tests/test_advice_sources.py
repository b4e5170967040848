"""Every line of advice traces to a point of docs/method.md or to primary documentation
named beside it, and no "check first" line of any case proposes what a "do not conclude"
line beside it forbids: for every family (each real message of tests/data, classified, as a
kernel incident and as a log), every value pattern, every surface and every fact a case may
already answer (issue 21, item 1)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from advice_review import avoid_rows, contradictions
from cudadiag import classify, knowledge
from cudadiag.advice import Case, fitted
from cudadiag.explain import explain_text
from cudadiag.knowledge import Advice, IndexValues

MESSAGES = [json.loads(line) for name in ("messages.jsonl", "messages-2026.jsonl")
            for line in (Path(__file__).parent / "data" / name).read_text().splitlines()]
PRIMARY_HOSTS = ("pytorch.org", "docs.nvidia.com", "docs.python.org", "huggingface.co")

# one case per value pattern: the kind of index and values that match it
PATTERN_CASES: dict[str, tuple[str, IndexValues]] = {
    "labels_without_zero": ("class_target", IndexValues(0, 4, (4,), min=1, max=4)),
    "label_equals_classes": ("class_target", IndexValues(0, 4, (4,), min=0, max=4)),
    "targets_far_beyond": ("class_target", IndexValues(0, 4, (255,), min=0, max=255)),
    "padding_not_ignored": ("class_target",
                            IndexValues(0, 4, (-1, -1), min=-1, max=3, ignore_index=-100)),
    "target_id_is_vocabulary_size": ("token_target", IndexValues(0, 50, (50,), min=0, max=50)),
    "target_ids_beyond_vocabulary": ("token_target", IndexValues(0, 50, (30000,))),
    "id_is_vocabulary_size": ("embedding", IndexValues(0, 50, (50,), min=1, max=50)),
    "ids_beyond_vocabulary": ("embedding", IndexValues(0, 1000, (30000,))),
    "index_is_dimension_size": ("index", IndexValues(0, 27, (27,), min=0, max=27)),
    "indices_beyond": ("index", IndexValues(0, 27, (40,))),
    "negative_indices": ("index", IndexValues(0, 27, (-1,), min=-1, max=5)),
}
FAMILIES_OF_INDEX_ERRORS = ("device_assert", "index_out_of_bounds")


def every_advice_row() -> list[Advice]:
    rows = [a for f in knowledge.FAMILIES.values() for a in (*f.first_checks, *f.avoid)]
    rows += [a for p in knowledge.PITFALLS.values() for a in (*p.checks, *p.avoid)]
    rows += [a for o in knowledge.OPERATOR_ADVICE for a in (*o.checks, *o.avoid)]
    rows += [p.advice for p in knowledge.VALUE_PATTERNS]
    rows += [m.advice for m in knowledge.MODEL_FACT_ADVICE]
    rows += [knowledge.FRAGMENTATION_CHECK, knowledge.RUNTIME_OOM_CHECK, knowledge.ARCH_CHECK,
             knowledge.LOG_FILE_CHECK]
    return rows + list(knowledge.GUARD_ADVICE.values())


def every_case() -> list[Case]:
    facts = sorted(knowledge.CASE_FACTS)
    subsets = [frozenset(c) for n in range(len(facts) + 1)
               for c in itertools.combinations(facts, n)]
    return [Case(surface, subset) for surface in knowledge.SURFACES for subset in subsets]


def test_every_advice_line_names_a_method_point_or_the_documentation_it_comes_from():
    for row in every_advice_row():
        assert row.sources, row.text
        for source in row.sources:
            point = re.fullmatch(r"method (\d+)", source)
            assert (point and 1 <= int(point.group(1)) <= knowledge.METHOD_POINTS) or (
                source in knowledge.DOCS), f"{row.text!r}: unknown source {source!r}"


def test_the_documentation_named_is_the_vendors_own():
    for name, url in knowledge.DOCS.items():
        parsed = urlparse(url)
        assert parsed.scheme == "https" and parsed.netloc in PRIMARY_HOSTS, (name, url)


def test_what_a_line_may_be_answered_by_and_the_words_it_uses_are_known():
    words = {frozenset(w) for w in knowledge.SURFACES.values()}
    assert len(words) == 1, "every surface words the same commands"
    (names,) = words
    for row in every_advice_row():
        assert row.answered_by <= set(knowledge.CASE_FACTS), row.text
    for row in [*(a for f in knowledge.FAMILIES.values() for a in (*f.first_checks, *f.avoid)),
                *(a for p in knowledge.PITFALLS.values() for a in (*p.checks, *p.avoid)),
                *(a for o in knowledge.OPERATOR_ADVICE for a in (*o.checks, *o.avoid))]:
        assert set(re.findall(r"\{(\w+)\}", row.text)) <= names, row.text


def test_every_conclusion_to_avoid_says_what_a_check_must_not_propose():
    for row in avoid_rows():
        assert row.forbids is not None, row.text


@pytest.mark.parametrize("family", knowledge.FAMILY_NAMES)
def test_no_check_proposes_what_its_do_not_conclude_forbids_for_every_family(family):
    for case in every_case():
        checks, avoid = fitted(family, {}, case=case)
        assert checks and avoid
        assert contradictions(checks, avoid) == [], (case, checks)


def test_no_check_of_a_real_message_contradicts_its_do_not_conclude_as_incident_or_log():
    families = set()
    for message in MESSAGES:
        diagnosis = classify(message["text"])
        families.add(diagnosis.family)
        assert contradictions(diagnosis.first_checks, diagnosis.avoid) == [], message["id"]
        logged = explain_text(message["text"]).diagnosis
        assert contradictions(logged.first_checks, logged.avoid) == [], message["id"]
    assert families == set(knowledge.FAMILY_NAMES)


def test_every_value_pattern_has_a_case_here():
    assert set(PATTERN_CASES) == {p.name for p in knowledge.VALUE_PATTERNS}


@pytest.mark.parametrize("name", sorted(PATTERN_CASES))
def test_no_value_pattern_proposes_what_its_do_not_conclude_forbids(name):
    kind, values = PATTERN_CASES[name]
    pattern = next(p for p in knowledge.VALUE_PATTERNS if p.name == name)
    opening = pattern.advice.text.split("{")[0]
    for family, case in itertools.product(FAMILIES_OF_INDEX_ERRORS, every_case()):
        checks, avoid = fitted(family, {}, kinds=(kind,), values=values, case=case)
        assert checks[0].startswith(opening), (name, checks)  # the pattern applies
        assert contradictions(checks, avoid) == [], (name, case, checks)


@pytest.mark.parametrize(("check", "avoid"), [
    ("one class more than the output layer: target 4 needs 5 outputs, the layer has 4 — size "
     "the layer from the data (max label + 1) or fix the label", knowledge.WIDENING_AVOID),
    ("Labels numbered from 1 (1..C) need shifting by −1; a class the model was not built for "
     "needs a wider output layer, sized from the data (max label + 1), not a constant.",
     knowledge.WIDENING_AVOID),
    ("labels may be 1-based: the targets run 1..10 here, no 0, for 10 classes — if the whole "
     "label set is 1..10, shift it by −1 (target - 1); if 0 is a class too, the output needs "
     "11 classes.", knowledge.SUBTRACTING_AVOID),
    ("labels may be 1-based: if 0 is a class too, the output needs 11 classes",
     knowledge.WIDENING_AVOID),
])
def test_the_check_catches_the_advice_that_once_contradicted_the_method(check, avoid):
    assert contradictions([check], [avoid.text]) == [(check, avoid.text)]
