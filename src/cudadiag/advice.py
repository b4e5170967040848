"""First checks that fit the failing operator and its offending values.

Reads the tables at the end of knowledge.py. The operator's kind of index (class targets,
token ids, plain indices) comes from, in this order: the precheck violation, the operator
the tracer saw fail, the library function that raised (synchronous errors only: an
asynchronous one is raised by a later, unrelated call), the device's assertion line, the
message. The values come from the violation (op, argument, offending values, valid range,
ignore_index) and the whole index tensor's range from the tracer's record of the failing call
or from the batch in flight.
"""

from __future__ import annotations

import re
from typing import Any

from cudadiag import knowledge
from cudadiag.incident import Incident
from cudadiag.shortlist import cut_list

_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def add_fitting_checks(incident: Incident, violation: Any = None) -> None:
    """Put the checks that fit `incident`'s operator and values in front of its first checks
    (the family's general ones stay after them). `violation` is a contracts.Violation when a
    precheck (or a blocking simulated kernel) found one. An `op_unavailable` error gets the
    compatibility checks of `cudadiag env --check` too, their failures first."""
    fitting = fitting_checks(incident, violation)
    rest = [c for c in incident.diagnosis.first_checks if c not in fitting]
    incident.diagnosis.first_checks = fitting + rest
    if incident.diagnosis.family == "op_unavailable":
        from cudadiag.compat import attach_checks

        attach_checks(incident)


def fitting_checks(incident: Incident, violation: Any = None) -> list[str]:
    """Return the value patterns the offending values match (in words), then the first
    checks of the operator's kind of index; [] when neither operator nor values are known."""
    kinds = index_kinds(incident, violation)
    values = index_values(incident, violation)
    checks = pattern_words(kinds, values) if values is not None else []
    for kind in kinds:
        advice = knowledge.operator_advice(kind)
        checks += list(advice.checks) if advice else []
    return checks


def index_kinds(incident: Incident, violation: Any = None) -> tuple[str, ...]:
    """Return the kinds of index (`class_target`, `embedding`, `index`) the failing operator
    takes: one when it is known, two when the evidence names both, () when unknown."""
    for name in _operator_names(incident, violation):
        bare = name.replace("aten::", "").replace("aten.", "").split(".")[0]
        for advice in knowledge.OPERATOR_ADVICE:
            if bare in advice.ops:
                return (advice.kind,)
    for text in _hint_texts(incident):
        for pattern, kinds in knowledge.OPERATOR_HINTS:
            if pattern.search(text):
                return kinds
    return ()


def index_values(incident: Incident, violation: Any = None) -> knowledge.IndexValues | None:
    """Return what is known of the offending index argument, None without a valid range."""
    details = incident.diagnosis.details
    if violation is not None:
        low, high = violation.low, violation.high
        offending, ignore = tuple(violation.values), violation.ignore_index
        argument = violation.argument
    elif details.get("valid_range") and details.get("value") is not None:
        low, high = details["valid_range"]
        offending, ignore = (int(details["value"]),), details.get("ignore_index")
        argument = details.get("argument")
    else:
        return None
    low_seen, high_seen = _whole_range(incident, argument, low, high)
    return knowledge.IndexValues(low=low, high=high, offending=offending, min=low_seen,
                                 max=high_seen, ignore_index=ignore)


def pattern_words(kinds: tuple[str, ...], values: knowledge.IndexValues) -> list[str]:
    """Return the words of the value patterns that `values` match for these kinds, at most
    one per group."""
    words, groups = [], set()
    fields = {
        "low": values.low, "high": values.high, "last": values.high - 1,
        "wider": values.high + 1, "min": values.min,
        "max": values.max if values.max is not None else max(values.offending),
        "values": cut_list(values.offending, 5), "ignore_index": values.ignore_index,
    }
    for pattern in knowledge.VALUE_PATTERNS:
        if pattern.group in groups or not set(pattern.kinds) & set(kinds):
            continue
        if values.offending and pattern.matches(values):
            words.append(pattern.words.format(**fields))
            groups.add(pattern.group)
    return words


def _operator_names(incident: Incident, violation: Any) -> list[str]:
    names = [getattr(violation, "op", None), incident.op.name if incident.op else None,
             incident.diagnosis.details.get("op")]
    return [str(n) for n in names if n]


def _hint_texts(incident: Incident) -> list[str]:
    texts = []
    if not incident.diagnosis.asynchronous:
        frames = incident.error.traceback
        last_user = max((i for i, f in enumerate(frames) if f.user), default=-1)
        texts.append(" ".join(f.function for f in frames[last_user + 1:]))
    details = incident.diagnosis.details
    texts.append(" ".join(str(details.get(k, "")) for k in ("kernel", "assertion")))
    texts.append(incident.error.text)
    return [t for t in texts if t.strip()]


def _whole_range(incident: Incident, argument: str | None, low: int, high: int
                 ) -> tuple[int | None, int | None]:
    """(min, max) of the whole index tensor: the tracer's value range of the failing call's
    argument, else the batch tensor whose values leave [low, high)."""
    for arg in incident.op.args if incident.op else []:
        m = _RANGE.match(arg.value or "")
        if arg.name == argument and m:
            return int(m.group(1)), int(m.group(2))
    for tensor in (incident.batch or {}).get("tensors", []):
        seen_low, seen_high = tensor.get("min"), tensor.get("max")
        integer = str(tensor.get("dtype", "")).startswith(("int", "uint"))
        if integer and seen_low is not None and seen_high is not None and (
                seen_low < low or seen_high >= high):
            return int(seen_low), int(seen_high)
    return None, None
