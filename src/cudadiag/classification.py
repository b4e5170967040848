"""Text or exception -> Diagnosis, using the table in knowledge.py.

The first error decides: in a text, the earliest message that matches a signature; for an
exception, its first cause. Later messages are usually consequences (method point 1).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from cudadiag import knowledge
from cudadiag.advice import fitted
from cudadiag.error_codes import table as error_codes
from cudadiag.i18n import Text, msg
from cudadiag.incident import (
    Alternative,
    Diagnosis,
    EnvInfo,
    exception_chain,
    qualified_type_name,
)

STICKY_TAIL = " — the CUDA context is unusable: restart the process"
"""How a summary ends (in English) when the error leaves the process's CUDA context
unusable: `sticky_summary` adds it, and `summary.removesuffix(STICKY_TAIL)` gives back the
summary without it, which `localize` still knows (its message was made with it)."""
_SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}
_HIP_ERROR_NAME = re.compile(r"\bhipError\w+")
_SIZE_KEYS = ("requested", "total", "free", "allocated", "reserved_unallocated", "reserved",
              "process_in_use")


@dataclass
class _Match:
    signature: knowledge.Signature
    match: re.Match[str]
    text: str
    wrapped_by: str = ""
    """The line of the message that carried this error (a watchdog, a launcher), if any."""


def classify(
    error: BaseException | str,
    *,
    context: str | None = None,
    env: EnvInfo | None = None,
) -> Diagnosis:
    """Classify a CUDA/PyTorch error into one of the families of knowledge.FAMILIES.

    `error` is an exception object or any text (a traceback, a log, a pasted issue).
    `context` is output captured before the exception (a child's stderr with kernel assertion
    lines); it counts as coming first. `env` adds the device capability and the build's arch
    list to a missing-kernel diagnosis.

    Returns a Diagnosis; never raises for unrecognised input (the family is then `unknown`).
    """
    events = _events(error, context)
    decided: tuple[_Match | None, knowledge.CudaError | None] = (None, None)
    for text, exc in events:
        found = _first_match(text)
        code = _error_code(exc)
        if code is not None or found is not None:
            decided = (found, code)
            break
    whole = "\n".join(text for text, _ in events)
    if decided == (None, None):
        decided = (None, _error_named_in(whole))
    diagnosis = _diagnosis(decided[0], decided[1], whole, env)
    if diagnosis.family == "unknown" and "pitfall" not in diagnosis.details:
        _say_what_was_seen(diagnosis, events, whole)
    return diagnosis


def _say_what_was_seen(diagnosis: Diagnosis, events: list[tuple[str, Any]], whole: str) -> None:
    """An unrecognised error still names what it saw: the exception type, the status code the
    text names (any library's, knowledge.named_code), the line that states the error."""
    details = diagnosis.details
    exc = next((e for _, e in events if e is not None), None)
    line = diagnosis.evidence
    named = knowledge.named_code(whole) if "cuda_error" not in details else None
    if named is not None:
        row, start = named
        details.setdefault("status", row.name)
        details.setdefault("status_library", row.library)
        details.setdefault("status_source", row.source)
        line = line or _line_at(whole, start)
    stated = knowledge.ERROR_LINE.search(whole)
    if not line and stated:
        line = stated.group(0).strip()
    if exc is not None:
        details.setdefault("exception_type", qualified_type_name(exc))
    elif stated:
        details.setdefault("exception_type", stated.group("exception_type"))
    diagnosis.evidence = line
    diagnosis.summary = _unknown_summary(diagnosis)


def _unknown_summary(diagnosis: Diagnosis) -> str:
    details = diagnosis.details
    code = details.get("cuda_error") or details.get("status")
    number = f" {details['error_code']}" if "error_code" in details else ""
    seen = [str(details["exception_type"])] if details.get("exception_type") else []
    if code:
        seen.append(f"{code}{number}")
    head: str = _shorten(diagnosis.evidence) or msg("no error line found in the text")
    title = knowledge.FAMILIES["unknown"].title
    summary = (msg("{title}: {head} ({seen})", title=title, head=head, seen=", ".join(seen))
               if seen else summary_line(title, head))
    return sticky_summary(summary) if diagnosis.sticky else summary


def summary_line(title: str, head: str) -> Text:
    """Return the summary `title: head` (a family's or a pitfall's title, then what was
    seen: the error's own line, kept verbatim), as a sentence to keep."""
    return msg("{title}: {head}", title=title, head=head)


def sticky_summary(summary: str) -> Text:
    """Return `summary` followed by STICKY_TAIL (the CUDA context is unusable), as a
    sentence to keep."""
    return msg("{summary} — the CUDA context is unusable: restart the process",
               summary=summary)


def _error_named_in(text: str) -> knowledge.CudaError | None:
    """The `Search for 'cudaErrorX'` line names the error even when a wrapper reworded it."""
    m = knowledge.HINT_PATTERNS["cuda_error_name"].search(text)
    return knowledge.CUDA_ERRORS_BY_NAME.get(m.group("cuda_error_name")) if m else None


def first_error_line(text: str) -> str:
    """Return the line of `text` that holds its first recognised error ('' when none)."""
    found = _first_match(normalized(text))
    return _line_at(found.text, found.match.start()) if found else ""


def is_sticky(error: BaseException | str, *, context: str | None = None) -> bool:
    """Return True when any error in `error` (or `context`) leaves the CUDA context unusable."""
    return classify(error, context=context).sticky


def deciding_error(error: BaseException) -> BaseException:
    """Return the exception of `error`'s chain (its causes and contexts, the first first)
    that classify() reads the error from: the first that carries a CUDA error code or whose
    text holds a known error; `error` itself when none does. Raises nothing."""
    for exc in exception_chain(error):
        if _error_code(exc) is not None or _first_match(_text_of(exc)) is not None:
            return exc
    return error


def _events(error: BaseException | str, context: str | None) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    if context and context.strip():
        events.append((normalized(context), None))
    if isinstance(error, BaseException):
        events += [(_text_of(exc), exc) for exc in exception_chain(error)]
    else:
        events.append((normalized(str(error)), None))
    return events


def _text_of(exc: BaseException) -> str:
    return normalized(f"{qualified_type_name(exc)}: {exc}")


def normalized(text: str) -> str:
    """Return `text` with full-width and typographic punctuation made ASCII and translated
    wordings of PyTorch's messages put back in PyTorch's words (knowledge.TRANSLATED_PHRASES),
    so that one English pattern recognises every copy of a message."""
    text = text.translate(knowledge.PUNCTUATION)
    if text.isascii():
        return text
    for pattern, english in knowledge.TRANSLATED_PHRASES:
        text = pattern.sub(english, text)
    return text


def _first_match(text: str) -> _Match | None:
    """The earliest signature match; when it only wraps another error (a watchdog, a launcher,
    an uncaught C++ exception), the first known error right after it. A text whose lines
    were hard-wrapped at a fixed width (a terminal, a web page) is read joined again when
    that finds more."""
    found = _first_match_in(text)
    if found is None or found.signature.wrapper:
        joined = _unwrapped(text)
        if joined != text:
            again = _first_match_in(joined)
            if again is not None and (found is None or not again.signature.wrapper):
                return again
    return found


def _unwrapped(text: str) -> str:
    """`text` with hard line wraps removed: lines of the most common long length (at least
    two of them) are joined to the next line."""
    lines = text.split("\n")
    lengths = Counter(len(line) for line in lines if len(line) >= knowledge.WRAP_MIN_WIDTH)
    if not lengths:
        return text
    width, count = lengths.most_common(1)[0]
    if count < 2:
        return text
    return "".join(line if len(line) == width else line + "\n" for line in lines).rstrip("\n")


def _first_match_in(text: str) -> _Match | None:
    lowered = text.lower()
    candidates = [s for s in knowledge.SIGNATURES if s.may_match(lowered)]
    first = _earliest(candidates, text, 0)
    if first is None or not first.signature.wrapper:
        return first
    start = first.match.start()
    inner = _earliest([s for s in candidates if not s.wrapper], text, start,
                      start + knowledge.WRAPPED_WINDOW)
    if inner is None:
        return first
    inner.wrapped_by = _line_at(text, start)
    return inner


def _earliest(signatures: list[knowledge.Signature], text: str, pos: int,
              limit: int | None = None) -> _Match | None:
    """The match that starts first at or after `pos` (and at or before `limit`); at the same
    position, the signature listed first."""
    best: _Match | None = None
    for signature in signatures:
        m = signature.pattern.search(text, pos)
        if m is None or (limit is not None and m.start() > limit):
            continue
        if best is None or m.start() < best.match.start():
            best = _Match(signature, m, text)
    return best


def _error_code(exc: Any) -> knowledge.CudaError | None:
    code = getattr(exc, "error_code", None) if exc is not None else None
    return knowledge.CUDA_ERRORS_BY_CODE.get(code) if isinstance(code, int) else None


def _any_sticky(text: str, events_codes: list[knowledge.CudaError]) -> bool:
    if any(code.sticky for code in events_codes):
        return True
    return mentions_sticky_error(text)


def mentions_sticky_error(text: str) -> bool:
    """Return True when `text` holds, anywhere, an error that leaves the CUDA context
    unusable (a device assert, an illegal access, a launch failure...)."""
    text = normalized(text)
    lowered = text.lower()
    return any(s.may_match(lowered) and s.pattern.search(text)
               for s in knowledge.STICKY_SIGNATURES)


def _diagnosis(
    found: _Match | None, code: knowledge.CudaError | None, whole: str, env: EnvInfo | None
) -> Diagnosis:
    details: dict[str, Any] = {}
    evidence = ""
    if found is not None:
        details.update(found.signature.fixed)
        details.update({k: v for k, v in found.match.groupdict().items() if v is not None})
        evidence = _line_at(found.text, found.match.start())
        if found.wrapped_by:
            details["wrapped_by"] = found.wrapped_by
        elif found.signature.wrapper:
            details["carrier_only"] = True  # a wrapper whose carried error is not shown
    family = found.signature.family if found else "unknown"
    if code is not None:
        family = code.family
        details.update(error_code=code.code, cuda_error=code.name)
    details.update(_family_details(family, whole, found.match.start() if found else 0))
    details.update({k: v for k, v in _hints(whole).items() if k not in details})
    if "cuda_error" in details:
        _name_the_hip_error(details, whole)
    if "cuda_error" in details and details.get("cuda_error_name") == details["cuda_error"]:
        details.pop("cuda_error_name")
    if _says_hip(whole) or details.get("api") == "HIP":
        details["backend"] = "rocm"
    elif details.get("api") == "CUDA" or "CUDA" in whole:
        details["backend"] = "cuda"
    details.pop("api", None)
    _add_sizes_in_bytes(details)
    if env is not None and family == "op_unavailable":
        _add_arch_details(details, env)
    fam = knowledge.FAMILIES[family]
    sticky = _any_sticky(whole, [code] if code else [])
    alternatives = _alternatives(found, family) if code is None else []
    summary = _summary(fam, details, evidence, sticky)
    pitfall = knowledge.PITFALLS.get(str(details.get("pitfall")))
    _note_fragmentation(family, details)
    checks, avoid = fitted(family, details)
    if pitfall is not None:
        summary = summary_line(pitfall.title, _shorten(evidence))
    if alternatives:
        summary = msg("{summary} — not confident: the same message also fits {families}",
                      summary=summary, families=_joined([a.family for a in alternatives]))
    return Diagnosis(
        family=family,
        sticky=sticky,
        first_checks=checks,
        avoid=avoid,
        details=details,
        summary=summary,
        asynchronous=fam.asynchronous or bool(details.get("async_hint")),
        evidence=evidence,
        alternatives=alternatives,
    )


def _alternatives(found: _Match | None, family: str) -> list[Alternative]:
    """Other families whose signatures match the same line as the deciding one: as strong a
    clue, so the diagnosis names them instead of picking one silently. A match that lies
    inside the deciding one is no second opinion: it reads part of the same message
    (`operation not permitted` inside `operation not permitted when stream is capturing`)."""
    if found is None or found.signature.wrapper:
        return []
    text, start = found.text, found.match.start()
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start: line_end if line_end >= 0 else len(text)]
    lowered = line.lower()
    deciding = (start - line_start, found.match.end() - line_start)
    seen: dict[str, Alternative] = {}
    for signature in knowledge.SIGNATURES:
        if (signature.family in (family, "unknown") or signature.family in seen
                or signature.wrapper or signature.catch_all
                or not signature.may_match(lowered)):
            continue
        m = next((m for m in signature.pattern.finditer(line)
                  if not deciding[0] <= m.start() <= m.end() <= deciding[1]), None)
        if m:
            seen[signature.family] = Alternative(signature.family, m.group(0).strip())
    return list(seen.values())


def _name_the_hip_error(details: dict[str, Any], text: str) -> None:
    """When `text` names the HIP twin of the decided CUDA error (`hipErrorInvalidClusterSize`
    for cudaErrorInvalidClusterSize), report HIP's name and number (hipError_t's row of
    error_codes), not CUDA's: the HIP numbers differ from CUDA's for HIP's own codes."""
    decided = knowledge.CUDA_ERRORS_BY_NAME.get(str(details["cuda_error"]))
    for m in _HIP_ERROR_NAME.finditer(text):
        row = error_codes.code_named(m.group(0))
        if (row is not None and row.library == "hip"
                and knowledge.CUDA_ERRORS_BY_NAME.get(row.name) is decided):
            details.update(cuda_error=row.name, error_code=row.code)
            return


def _family_details(family: str, text: str, start: int) -> dict[str, Any]:
    details: dict[str, Any] = {}
    for pattern in knowledge.DETAIL_PATTERNS.get(family, ()):
        m = pattern.search(text, max(0, start - 2000) if family == "device_assert" else start)
        if m:
            details.update({k: v for k, v in m.groupdict().items() if v and k not in details})
    return details


def _hints(text: str) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for name, pattern in knowledge.HINT_PATTERNS.items():
        m = pattern.search(text)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v}
            hints.update(groups or {name: True})
    return hints


def _says_hip(text: str) -> bool:
    return bool(re.search(r"\bHIP (?:error|out of memory|kernel errors)|hipError|"
                          r"AMD_SERIALIZE_KERNEL|Memory access fault by GPU", text))


def parse_size(text: str) -> int | None:
    """Return the number of bytes in a size like `1.95 GiB` or `20.00 MiB` (None if unparsable)."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGTP]?i?B)\s*", text, re.IGNORECASE)
    if not m:
        return None
    unit = _SIZE_UNITS.get(m.group(2).upper())
    return int(float(m.group(1)) * unit) if unit else None


def _add_sizes_in_bytes(details: dict[str, Any]) -> None:
    for key in _SIZE_KEYS:
        if isinstance(details.get(key), str):
            size = parse_size(details[key])
            if size is not None:
                details[f"{key}_bytes"] = size


def _add_arch_details(details: dict[str, Any], env: EnvInfo) -> None:
    if env.capability and "capability" not in details:
        details["capability"] = env.capability
    if env.arch_list and "arch_list" not in details:
        details["arch_list"] = " ".join(env.arch_list)
    if env.device_in_arch_list is not None:
        details["device_in_arch_list"] = env.device_in_arch_list


def _note_fragmentation(family: str, details: dict[str, Any]) -> None:
    """An out-of-memory whose allocator holds, reserved but unused, as much as was asked for:
    the memory exists but not as one block."""
    if family == "oom":
        requested = details.get("requested_bytes")
        spare = details.get("reserved_unallocated_bytes")
        if requested and spare and spare >= knowledge.FRAGMENTATION_RATIO * requested:
            details["fragmentation_likely"] = True


def _summary(fam: knowledge.Family, details: dict[str, Any], evidence: str, sticky: bool) -> str:
    head: str
    if fam.name == "device_assert" and details.get("assertion"):
        head = _failed_assertion(details)
    else:
        head = _shorten(evidence) or msg("no known CUDA/PyTorch error message found")
    summary = summary_line(fam.title, head)
    return sticky_summary(summary) if sticky else summary


def _failed_assertion(details: dict[str, Any]) -> Text:
    """`t >= 0 && t < n_classes` failed in the kernel, at its file and line when known."""
    assertion, kernel = str(details["assertion"]), details.get("kernel")
    if details.get("file"):
        place = {"assertion": assertion, "file": str(details["file"]).rsplit("/", 1)[-1],
                 "line": str(details["line"])}
        if kernel:
            return msg("`{assertion}` failed in {kernel} ({file}:{line})", kernel=str(kernel),
                       **place)
        return msg("`{assertion}` failed in a kernel ({file}:{line})", **place)
    if kernel:
        return msg("`{assertion}` failed in {kernel}", assertion=assertion, kernel=str(kernel))
    return msg("`{assertion}` failed in a kernel", assertion=assertion)


def _joined(names: list[str]) -> str:
    """`a and b and c` (names of families, kept as they are), as a sentence to keep."""
    joined: str = names[0]
    for name in names[1:]:
        joined = msg("{first} and {second}", first=joined, second=name)
    return joined


def _shorten(line: str, limit: int = 160) -> str:
    line = re.sub(r"^[\w.]+(?:Error|Exception|Warning): ", "", line.strip())
    line = re.sub(r"^(?:CUDA|HIP) error: ", "", line)
    if len(line) <= limit:
        return line
    sentence_end = line.rfind(". ", 0, limit)
    return line[: sentence_end + 1] if sentence_end > 0 else line[: limit - 1] + "…"


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start: end if end >= 0 else len(text)].strip()
