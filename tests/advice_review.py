"""What a reviewer holding docs/method.md checks in a case's advice, as functions the tests
share: no check proposes what a conclusion to avoid beside it forbids, and the check lines are
few, distinct and fitted."""

from __future__ import annotations

from cudadiag import knowledge
from cudadiag.knowledge import Advice


def avoid_rows() -> list[Advice]:
    """Every conclusion to avoid in knowledge.py: the families', the pitfalls', the kinds'."""
    rows = [a for f in knowledge.FAMILIES.values() for a in f.avoid]
    rows += [a for p in knowledge.PITFALLS.values() for a in p.avoid]
    rows += [a for o in knowledge.OPERATOR_ADVICE for a in o.avoid]
    return rows


def row_of(line: str) -> Advice:
    """The conclusion to avoid that `line` is, in the words of any surface."""
    for row in avoid_rows():
        for words in knowledge.SURFACES.values():
            text = row.text
            for name, value in words.items():
                text = text.replace("{" + name + "}", value)
            if text == line:
                return row
    raise AssertionError(f"no conclusion to avoid reads {line!r}")


def contradictions(checks: list[str], avoid: list[str]) -> list[tuple[str, str]]:
    """The (check, conclusion to avoid) pairs where the check proposes what the conclusion
    forbids."""
    found = []
    for line in avoid:
        forbids = row_of(line).forbids
        assert forbids is not None, f"{line!r} says nothing of what it forbids"
        found += [(check, line) for check in checks if forbids.search(check)]
    return found


def assert_fitted(checks: list[str]) -> None:
    """At most MAX_FIRST_CHECKS lines, none twice, none saying the same rule twice."""
    assert 0 < len(checks) <= knowledge.MAX_FIRST_CHECKS, checks
    assert len(set(checks)) == len(checks), checks
    assert sum("must lie in [0, C)" in c for c in checks) <= 1, checks


def assert_class_target_readings(checks: list[str], high: int) -> None:
    """Guide point 7 for a target equal to the class count: both readings, the evidence that
    separates them, the mapping checked against the class names, the case kept — and neither
    a wider output nor a 1 subtracted everywhere."""
    first = checks[0]
    assert f"target {high} for {high} output columns" in first, checks
    assert f"labels numbered 1..{high}" in first and "a class the model was not built for" in first
    assert "Over the whole dataset" in first and "0 never a label" in first
    assert f"{high + 1} distinct values" in first
    text = " ".join(checks)
    assert "cudadiag.check_label_mapping(" in text and "class names" in text
    assert "cudadiag.keep_case(" in text
    for forbidden in (knowledge.WIDENING_AVOID, knowledge.SUBTRACTING_AVOID):
        assert forbidden.forbids is not None
        assert not [c for c in checks if forbidden.forbids.search(c)], checks
