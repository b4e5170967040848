"""The advice a case gets: its first checks and its conclusions to avoid, picked from the
tables of knowledge.py and fitted to the case. Every incident, every classification and every
explained log gets its advice here, from `fitted()`.

The check lines come, most specific first, from: the pitfall the message gives away, the
compatibility checks that failed, the value patterns the offending values match, the checks
the family's details call for (fragmentation, CUDA's own out-of-memory, a missing
architecture), the checks of the operator's kind of index, then the family's own. Fitting
leaves out a line whose topic an earlier line covered and a line the case already answered
(knowledge.CASE_FACTS: an isolated run, a precheck at the operator, no assertion printed),
words commands for the surface the advice is read on (knowledge.SURFACES: a notebook, a
script run with `cudadiag run`, a log), and keeps at most knowledge.MAX_FIRST_CHECKS checks.

The operator's kind of index (class targets, token ids, plain indices) comes from, in this
order: the precheck violation, the operator the tracer saw fail, the library function that
raised (synchronous errors only: an asynchronous one is raised by a later, unrelated call),
the device's assertion line, the message. Class targets whose classes number as many as the
rows of the first embedding table the run looked up (the model's input vocabulary) are
token ids: a language model's targets. The values
come from the violation (op, argument, offending values, valid range, ignore_index) and the
whole index tensor's range from the tracer's record of the failing call or from the batch in
flight.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from cudadiag import knowledge
from cudadiag.batch.offending import offending_candidates, offending_tensor, value_range
from cudadiag.i18n import N_, Text, msg
from cudadiag.incident import Diagnosis, Incident, OpInfo, TensorArg, TensorSummary
from cudadiag.knowledge import Advice
from cudadiag.shortlist import cut_list

COMPAT_SOURCES = ("method 5", "method 12")
"""What a failed compatibility check's line traces to (versions, binary extensions)."""
_ORDINALS = {1: N_("{n}st"), 2: N_("{n}nd"), 3: N_("{n}rd")}
_ORDINAL = N_("{n}th")


@dataclass(frozen=True)
class Case:
    """What is known of a case beyond its error: where its advice is read and what it has
    already answered."""

    surface: str = "notebook"
    """A key of knowledge.SURFACES."""
    facts: frozenset[str] = frozenset()
    """Keys of knowledge.CASE_FACTS that hold for this case."""
    script: str = "your_script.py"
    """The script's name, for commands (`cudadiag run -- python train.py`)."""


def fitted(family: str, details: Mapping[str, Any], *, kinds: tuple[str, ...] = (),
           values: knowledge.IndexValues | None = None, case: Case = Case(),
           extra: Iterable[Advice] = ()) -> tuple[list[str], list[str]]:
    """Return (the first checks, the conclusions to avoid) for an error of `family` with
    `details`, the failing operator taking indices of `kinds`, its offending `values`, in
    `case`; `extra` are checks found elsewhere (failed compatibility checks), put after the
    pitfall's. Each line is a Text (i18n): its English, with its message id and words, so a
    record keeps them and shows them in the reader's language."""
    fam = knowledge.FAMILIES[family]
    pitfall = knowledge.PITFALLS.get(str(details.get("pitfall")))
    by_kind = [a for a in map(knowledge.operator_advice, kinds) if a is not None]
    checks = [*(pitfall.checks if pitfall else ()), *extra, *pattern_rows(kinds, values),
              *_detail_rows(family, details), *(c for a in by_kind for c in a.checks),
              *(fam.first_checks if pitfall is None or pitfall.family_checks else ())]
    avoid = [*(pitfall.avoid if pitfall and pitfall.avoid else fam.avoid),
             *(c for a in by_kind for c in a.avoid)]
    facts = case.facts | _detail_facts(details, kinds)
    words = {k: filled(v, {"script": case.script})
             for k, v in knowledge.SURFACES[case.surface].items()}
    return (_fit(checks, facts, words, knowledge.MAX_FIRST_CHECKS),
            _fit(avoid, facts, words, None))


def advise(incident: Incident, violation: Any = None) -> None:
    """Set `incident`'s first checks and conclusions to avoid to those that fit it.
    `violation` is a contracts.Violation when a precheck (or a blocking simulated kernel)
    found one. An `op_unavailable` error gets the compatibility checks of
    `cudadiag env --check` (kept in its env), their failures first."""
    d = incident.diagnosis
    values = index_values(incident, violation)
    kinds = _token_targets(index_kinds(incident, violation), values, incident.op)
    d.first_checks, d.avoid = fitted(d.family, d.details, kinds=kinds, values=values,
                                     case=case_of(incident, values, kinds),
                                     extra=[*model_rows(incident, kinds, values),
                                            *_compat_rows(incident)])


def advise_log(diagnosis: Diagnosis, text: str) -> None:
    """Set the advice of a log's first error (`cudadiag explain`), whose lines are `text`:
    the checks of the operator its evidence names, worded for a log."""
    texts = [str(diagnosis.details.get("fused_op", "")),
             " ".join(str(diagnosis.details.get(k, "")) for k in ("kernel", "assertion")),
             diagnosis.evidence, text]
    diagnosis.first_checks, diagnosis.avoid = fitted(
        diagnosis.family, diagnosis.details, kinds=_kinds_named(texts), case=Case("log"))


def case_of(incident: Incident, values: knowledge.IndexValues | None = None,
            kinds: tuple[str, ...] = ()) -> Case:
    """Return the case of `incident` (whose offending `values` and kinds of index are
    known): its surface (a `cudadiag run` script, else the notebook) and what it already
    answered."""
    run = incident.run
    facts = set()
    if run.mode != "kernel" and run.blocking:
        facts.add("isolated")
    if incident.op is not None and incident.op.precheck:
        facts.add("prechecked")
    if values is not None and values.offending and min(values.offending) >= 0:
        facts.add("no_negative_values")
    if kinds == ("class_target",) and "isolated" in facts and incident.op is not None:
        facts.add("no_vocabulary")  # the tracer saw the model: _token_targets found none
    script = Case.script
    if run.command:
        script = " ".join(run.command[:2]) if run.command[0] == "-m" else PurePath(
            run.command[0]).name
    return Case("script" if run.mode == "cli" else "notebook", frozenset(facts), script)


def index_kinds(incident: Incident, violation: Any = None) -> tuple[str, ...]:
    """Return the kinds of index (`class_target`, `embedding`, `index`) the failing operator
    takes: one when it is known, two when the evidence names both, () when unknown."""
    for name in _operator_names(incident, violation):
        bare = name.replace("aten::", "").replace("aten.", "").split(".")[0]
        for advice in knowledge.OPERATOR_ADVICE:
            if bare in advice.ops:
                return (advice.kind,)
    return _kinds_named(_hint_texts(incident))


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
    low_seen, high_seen = _whole_range(incident, violation, argument, low, high, offending[0])
    return knowledge.IndexValues(low=low, high=high, offending=offending, min=low_seen,
                                 max=high_seen, ignore_index=ignore)


def pattern_rows(kinds: tuple[str, ...], values: knowledge.IndexValues | None) -> list[Advice]:
    """Return the value patterns that `values` match for these kinds, their words filled in,
    at most one per group."""
    if values is None or not values.offending:
        return []
    rows, groups = [], set()
    seen = (msg("; these targets span {min}..{max}", min=values.min, max=values.max)
            if values.min is not None and values.max is not None else "")
    fields = {
        "low": values.low, "high": values.high, "last": values.high - 1,
        "wider": values.high + 1, "ordinal": ordinal(values.high + 1), "min": values.min,
        "max": values.largest, "values": cut_list(values.offending, 5),
        "ignore_index": values.ignore_index, "seen": seen,
    }
    for pattern in knowledge.VALUE_PATTERNS:
        if pattern.group in groups or not set(pattern.kinds) & set(kinds):
            continue
        if pattern.matches(values):
            rows.append(dataclasses.replace(pattern.advice,
                                            text=filled(pattern.advice.text, fields)))
            groups.add(pattern.group)
    return rows


def model_rows(incident: Incident, kinds: tuple[str, ...],
               values: knowledge.IndexValues | None) -> list[Advice]:
    """Return the checks worded with the model's configuration (knowledge.MODEL_FACT_ADVICE)
    that the offending `values` match, their words filled in: a library's trainer ran the
    step (incident.model), else none. Without a valid range (an error on the CPU names only
    the value), the fact is the range: [0, num_labels), [0, vocab_size)."""
    facts = incident.model
    if facts is None:
        return []
    rows = []
    for row in knowledge.MODEL_FACT_ADVICE:
        fact = getattr(facts, row.fact)
        if fact is None or not set(row.kinds) & set(kinds):
            continue
        tensor = index_tensor(incident, kinds, values)
        values = values or _values_in(incident, fact, tensor)
        if values is None or not values.offending or not row.matches(values, fact):
            continue
        fields = {
            "fact": fact, "num_labels_from": facts.num_labels_from, "last": values.high - 1,
            "max": values.largest,
            "values": cut_list(values.offending, 5),
            "where": _dataset_rows(tensor, values),
            "tokenizer": (msg(", len(tokenizer) = {length}", length=facts.tokenizer_length)
                          if facts.tokenizer_length is not None else ""),
        }
        rows.append(dataclasses.replace(row.advice, text=filled(row.advice.text, fields)))
    return rows


def index_tensors(incident: Incident, kinds: tuple[str, ...] | None = None,
                  values: knowledge.IndexValues | None = None) -> list[TensorSummary]:
    """Return the batch tensors the failing operator may have read its offending index from
    (batch.offending.offending_candidates): one where the incident's facts tell it, several
    where they tie, [] without a batch or where no integer tensor leaves the valid range.
    The facts: `values` (else the details' value and valid range), the operator's recorded
    argument, the keys the model reads indices of `kinds` from (else index_kinds())."""
    return offending_candidates(*_offending_facts(incident, kinds, values))


def index_tensor(incident: Incident, kinds: tuple[str, ...] | None = None,
                 values: knowledge.IndexValues | None = None) -> TensorSummary | None:
    """Return the batch tensor the failing operator read its offending index from, None
    where index_tensors() finds none or several (batch.offending.offending_tensor)."""
    return offending_tensor(*_offending_facts(incident, kinds, values))


def _offending_facts(incident: Incident, kinds: tuple[str, ...] | None,
                     values: knowledge.IndexValues | None
                     ) -> tuple[list[TensorSummary], object, list[int] | None,
                                TensorArg | None, list[str]]:
    """offending_candidates()'s arguments from the incident (see index_tensors())."""
    details = incident.diagnosis.details
    tensors = incident.batch.tensors if incident.batch else []
    value, valid = details.get("value"), details.get("valid_range")
    if values is not None:
        value = values.offending[0] if values.offending else None
        valid = [values.low, values.high]
    return (tensors, value, valid, _op_argument(incident.op, details.get("argument")),
            index_keys(incident, index_kinds(incident) if kinds is None else kinds))


def index_keys(incident: Incident, kinds: tuple[str, ...]) -> list[str]:
    """Return the batch keys the model reads indices of `kinds` from (knowledge.BATCH_KEYS),
    the Trainer's label names first for targets; a loss's target keys where no kind is
    known."""
    label_names = incident.model.label_names or [] if incident.model else []
    kinds = kinds or ("class_target",)
    targets = [*label_names] if {"class_target", "token_target"} & set(kinds) else []
    return [*targets, *(k for kind in kinds for k in knowledge.BATCH_KEYS.get(kind, ()))]


def _op_argument(op: OpInfo | None, name: object) -> TensorArg | None:
    """The failing operator's tensor argument called `name`, as the tracer recorded it."""
    return next((arg for arg in op.args if arg.name == name and arg.kind == "tensor"),
                None) if op is not None else None


def _values_in(incident: Incident, high: int, tensor: TensorSummary | None
               ) -> knowledge.IndexValues | None:
    """The offending value the message named, against [0, high); the tensor's range."""
    value = incident.diagnosis.details.get("value")
    if value is None:
        return None
    seen = (tensor.min, tensor.max) if tensor is not None else (None, None)
    return knowledge.IndexValues(low=0, high=high, offending=(int(value),),
                                 min=None if seen[0] is None else int(seen[0]),
                                 max=None if seen[1] is None else int(seen[1]))


def _dataset_rows(tensor: TensorSummary | None, values: knowledge.IndexValues) -> Text | str:
    """` (dataset index 45)`: the samples of the batch holding the offending extreme, when
    the batch's dataset indices are known; else ``."""
    if tensor is None:
        return ""
    rows = None
    if tensor.max == values.largest and values.largest >= values.high:
        rows = tensor.max_at
    elif tensor.min is not None and tensor.min == min(values.offending) < values.low:
        rows = tensor.min_at
    if not rows:
        return ""
    return (msg(" (dataset index {index})", index=rows[0]) if len(rows) == 1
            else msg(" (dataset indices {indices})", indices=cut_list(rows, 5)))


def ordinal(n: int) -> Text:
    """Return `n` as an ordinal in words kept with their message id: `1st`, `2nd`, `3rd`,
    `4th`, `11th`, `21st`, `28th`... in English (`28 番目` in Japanese)."""
    template = _ORDINAL if 10 <= n % 100 <= 20 else _ORDINALS.get(n % 10, _ORDINAL)
    return msg(template, n=n)


def filled(template: str, fields: Mapping[str, Any]) -> Text:
    """Return `template` (an English message kept in a table, N_) filled with those of
    `fields` it names, as a Text that keeps its id and those words (a value that is no str or
    number is kept as its str). A `template` that is already a Text keeps its own words.
    Raises KeyError when the template names a field `fields` lacks."""
    if isinstance(template, Text):
        fields = {**fields, **template.args}
        template = template.template
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    return msg(template, **{name: _argument(fields[name]) for name in names})


def _argument(value: Any) -> str | int | float:
    return value if isinstance(value, str | int | float) else str(value)


def _fit(rows: Iterable[Advice], facts: frozenset[str], words: Mapping[str, str],
         limit: int | None) -> list[str]:
    """The texts of `rows` in order, in the surface's `words`: without the rows `facts`
    answer, those whose topic an earlier row covered and repeated texts; at most `limit`."""
    lines: list[str] = []
    covered: set[str] = set()
    for row in rows:
        if row.answered_by & facts or covered & set(row.topics):
            continue
        text = filled(row.text, words)
        if text in lines:
            continue
        lines.append(text)
        covered.update(row.topics)
        if limit is not None and len(lines) == limit:
            break
    return lines


def _detail_facts(details: Mapping[str, Any], kinds: tuple[str, ...]) -> frozenset[str]:
    facts = set()
    if not details.get("assertion"):
        facts.add("no_assertion")
    if kinds:
        facts.add("kind_known")
    return frozenset(facts)


def _detail_rows(family: str, details: Mapping[str, Any]) -> list[Advice]:
    """The checks the family's details call for, their values filled in."""
    rows = []
    if family == "oom" and details.get("fragmentation_likely"):
        rows.append(knowledge.FRAGMENTATION_CHECK)
    if family == "oom" and details.get("oom_kind") == "runtime":
        rows.append(knowledge.RUNTIME_OOM_CHECK)
    if details.get("log_file_hint"):
        rows.append(knowledge.LOG_FILE_CHECK)
    if (family == "op_unavailable" and details.get("capability") and details.get("arch_list")
            and details.get("device_in_arch_list") is not True):
        rows.append(knowledge.ARCH_CHECK)
    return [dataclasses.replace(r, text=filled(r.text, details)) for r in rows]


def _compat_rows(incident: Incident) -> list[Advice]:
    """The failed compatibility checks of an `op_unavailable` incident, each with what to
    install (the checks are run once and kept in its env)."""
    if incident.diagnosis.family != "op_unavailable" or incident.env is None:
        return []
    if not incident.env.compat:
        from cudadiag.compat import attach_checks

        attach_checks(incident)
    return [Advice(msg("{name}: {reason} — {fix}", name=c.name, reason=c.reason, fix=c.fix)
                   if c.fix else msg("{name}: {reason}", name=c.name, reason=c.reason),
                   COMPAT_SOURCES)
            for c in incident.env.compat if c.status == "fail"]


def _token_targets(kinds: tuple[str, ...], values: knowledge.IndexValues | None,
                   op: OpInfo | None) -> tuple[str, ...]:
    """Class targets whose classes number as many as the rows of the first embedding the
    run looked up (its input vocabulary, not a table of positions or token types) are token
    ids: the loss's classes are the model's vocabulary."""
    if kinds != ("class_target",) or op is None or not op.vocabularies:
        return kinds
    classes = values.high if values is not None else _class_count(op)
    return ("token_target",) if classes == op.vocabularies[0] else kinds


def _class_count(op: OpInfo) -> int | None:
    """C of a class-target operator's input (N, C, ...) or (C), from the tracer's record."""
    shape = next((a.shape for a in op.args if a.name == "self" and a.shape), None)
    if not shape:
        return None
    return int(shape[1] if len(shape) >= 2 else shape[0])


def _kinds_named(texts: Iterable[str]) -> tuple[str, ...]:
    for text in texts:
        for pattern, kinds in knowledge.OPERATOR_HINTS:
            if text.strip() and pattern.search(text):
                return kinds
    return ()


def _operator_names(incident: Incident, violation: Any) -> list[str]:
    names = [getattr(violation, "op", None), incident.op.name if incident.op else None,
             incident.diagnosis.details.get("op"), incident.diagnosis.details.get("fused_op")]
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
    return texts


def _whole_range(incident: Incident, violation: Any, argument: str | None, low: int, high: int,
                 value: int) -> tuple[int | None, int | None]:
    """(min, max) of the whole index tensor: the tracer's value range of the failing call's
    argument, else the batch tensor the operator read `value` from (index_tensor())."""
    recorded = _op_argument(incident.op, argument)
    seen = value_range(recorded) if recorded is not None else None
    if seen is not None:
        return seen
    tensor = index_tensor(incident, index_kinds(incident, violation),
                          knowledge.IndexValues(low=low, high=high, offending=(value,)))
    if tensor is None or tensor.min is None or tensor.max is None:
        return None, None
    return int(tensor.min), int(tensor.max)
