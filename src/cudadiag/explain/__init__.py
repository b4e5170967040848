"""Explain a log as users paste it: a SLURM output, a notebook traceback, an issue body,
several ranks interleaved. Finds the first relevant error of the cascade — and in a
multi-process log the rank that failed first — classifies it and gives the advice that fits
the operator its lines name; the errors printed after it (other ranks', and each rank's own
once its first error's report has ended) are its probable consequences.

The log is streamed in blocks of whole lines. Only lines that hold one of knowledge.LOG_KEYS
(found with `bytes.find`, at memory speed) are looked at, and only a bounded window around
each rank's first error is kept: a 100 MB log costs little time and little memory.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from cudadiag import knowledge
from cudadiag.advice import advise_log
from cudadiag.classification import classify, first_error_line, mentions_sticky_error
from cudadiag.errors import ExplainError
from cudadiag.explain import diagnosed as diagnosed_lines
from cudadiag.explain.diagnosed import DiagnosedLine
from cudadiag.explain.launchers import (
    LAUNCHER_ANCHORS,
    LINE_PREFIX,
    MESSAGE_RANK,
    RANKS_IN_BLOCK,
    ProcessReport,
    first_dump_rank,
    launcher_report,
    names_cuda_device,
)
from cudadiag.explain.progress import (
    PROGRESS_SCAN_BYTES,
    TrainingProgress,
    bar_length,
    progress_after,
    progress_before,
)
from cudadiag.generated_code import describe_generated_code
from cudadiag.i18n import _, msg
from cudadiag.incident import Diagnosis

BLOCK_BYTES = 4 * 2**20
LINES_BEFORE = 4
"""Lines of the same rank kept before its first error line."""
LINES_AFTER = 60
"""Lines of the same rank kept after its first error line: the rest of the message."""
WINDOW_MAX_LINES = 2000
"""A window stops collecting after this many lines of any rank."""
BEFORE_SCAN_BYTES = 64 * 2**10
ROOT_CAUSE_LINES = 12
MAX_RANKS = 4096
RANK_SAMPLE_BYTES = 64 * 2**10
MAX_LATER_ERRORS = 100
"""Errors kept after each rank's first one (the cascade)."""
LATER_SPAN_LINES = 10_000
"""A rank's later errors are looked for this many lines after its first error."""
LATER_LINES = 3
"""Lines kept after a later error's own line (a `terminate called` line's `what():`)."""
MAX_LINE_BYTES = 8192
"""Of a longer line (or progress-bar frame), this much around its first anchor is read."""
VIEW_CONTEXT_BYTES = 1024
"""Bytes kept before a long line's first anchor (an assertion's file and kernel)."""
SHORT_TEXT_BYTES = 2**20
"""A log whose first block is smaller than this (a pasted text) has every line read."""
_NEWLINE = re.compile(rb"\n")

_ROOT_CAUSE = b"root cause (first observed failure)"
_ROOT_CAUSE_FIELDS = re.compile(
    r"^\s*(?:(?P<field>rank|exitcode|host)\s*:\s*(?P<value>-?[\w.-]+)|(?P<end>={8,}))")
"""The lines of torchrun's Root Cause block cudadiag reads (`rank : 1 (local_rank: 1)`,
`exitcode : -9 (pid: 22)`, `host : node7`), and the rule that ends it."""
MAX_REPORTS = 1000
"""Launchers' lines about processes kept (the first ones)."""
_ISO_TIME = re.compile(rb"(?P<date>\d{4}-\d{2}-\d{2})[ T_](?P<time>\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_GLOG_TIME = re.compile(
    rb"\b[EWIF](?P<month>[01]\d)(?P<day>[0-3]\d) (?P<time>\d{2}:\d{2}:\d{2}(?:\.\d+)?)")
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b:")
_SEQ_NUM = re.compile(r"SeqNum=(\d+)")
_REPORT_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b:|terminate called after")
"""A line that reports an error: a Python exception's, or an uncaught C++ exception's."""
_CONTINUATION = re.compile(r"^\s*(?:what\(\):|Exception raised from |frame #\d+:)")
"""The lines of an error's report after its first (a C++ exception's message and stack)."""
_THREAD_IDS = re.compile(r"block: \[[\d, ]*\], thread: \[[\d, ]*\]")


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass
class RankError:
    """The first error one rank (or the single process) printed."""

    rank: int | None
    line: int
    """1-based line number in the log."""
    timestamp: tuple[str, ...] | None
    evidence: str
    text: str
    """The window around the error: a few lines before it, the error, the lines after."""
    diagnosis: Diagnosis | None = None
    node: str | None = None
    """The host its lines name (NCCL's `host:pid:tid [N]`, pdsh's `host: `, torchrun's
    Root Cause block), if any."""
    exit_code: int | None = None
    """How the process ended, when a launcher reported it (`-9`: killed by SIGKILL)."""
    local: bool = False
    """`rank` is the process's local rank on its node (torchelastic's `local_rank: 5`)."""
    progress: TrainingProgress | None = None
    """How far the training had got: the last progress bar frame and logged loss line
    before the error (or, for a bar drawn once at the end, the first after it)."""

    @property
    def family(self) -> str:
        """The family of this error (`unknown` before it is classified)."""
        return self.diagnosis.family if self.diagnosis else "unknown"


@dataclass
class Explanation:
    """What a log says: the first error's diagnosis, which rank, and the consequences."""

    diagnosis: Diagnosis
    first: RankError | None
    consequences: list[RankError] = field(default_factory=list)
    """The other ranks' first errors, and the errors each rank printed once its own first
    error's report had ended, in the order of the log: probable consequences of the first
    failure."""
    ranks_seen: list[int] = field(default_factory=list)
    root_cause_rank: int | None = None
    """The rank torchrun's error summary names as the first observed failure, if any."""
    stopped_by_launcher: int = 0
    """Processes the launcher said it stopped (`Sending process N closing signal SIGTERM`):
    consequences of the first failure."""
    first_dump_rank: int | None = None
    """The rank whose watchdog fired first (Flight Recorder's "First PG on this rank to
    signal dumping"): the first to notice a stuck collective, not the one that stuck it."""
    only_collective_failures: bool = False
    """Every rank that failed failed in a collective (timeouts, aborts): none raised first."""
    silent_ranks: list[int] = field(default_factory=list)
    """Ranks that printed lines but no error (the slowest or a hung rank, when only
    collectives failed)."""
    lines: int = 0
    bytes: int = 0
    sticky_evidence: str = ""
    """A line showing an error that leaves the CUDA context unusable, wherever it was."""
    diagnosed: DiagnosedLine | None = None
    """cudadiag's own diagnosis the log holds (explain/diagnosed.py); when `first` is not
    the log's own (`agreed`), it is the failure that line names."""
    agreed: bool = False
    """The first failure is the one cudadiag's diagnosis line names (the job's, agreed by
    the nodes' agents), not one of the log's own errors."""
    agreed_from_incident: bool = False
    """With `agreed`: the diagnosis is the incident's, read from this machine's log (else
    only the line's family is known)."""

    @property
    def multi_process(self) -> bool:
        """True when the log carries rank prefixes (several processes interleaved)."""
        return bool(self.ranks_seen)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (`cudadiag explain --json`): the Diagnosis's fields, with
        `rank` (None unless the log is multi-process) and `evidence`, then the line, the
        consequences and what was read."""
        d = self.diagnosis
        return {
            "family": d.family,
            "sticky": d.sticky,
            "rank": d.rank,
            "evidence": d.evidence,
            "summary": d.summary,
            "first_checks": d.first_checks,
            "avoid": d.avoid,
            "details": d.details,
            "alternatives": [{"family": a.family, "evidence": a.evidence}
                             for a in d.alternatives],
            "asynchronous": d.asynchronous,
            "line": self.first.line if self.first else None,
            "consequences": [{"rank": c.rank, "line": c.line, "family": c.family,
                              "evidence": c.evidence} for c in self.consequences],
            "only_collective_failures": self.only_collective_failures,
            "silent_ranks": self.silent_ranks,
            "root_cause_rank": self.root_cause_rank,
            "node": self.first.node if self.first else None,
            "exit_code": self.first.exit_code if self.first else None,
            "progress": self.first.progress.to_dict() if self.first and self.first.progress
            else None,
            "stopped_by_launcher": self.stopped_by_launcher,
            "first_dump_rank": self.first_dump_rank,
            "lines": self.lines,
            "bytes": self.bytes,
            "cudadiag_line": {"line": self.diagnosed.line, "id": self.diagnosed.incident_id,
                              "family": self.diagnosed.family, "agreed": self.agreed,
                              "incident_read": self.agreed_from_incident}
            if self.diagnosed else None,
        }


def explain_text(text: str) -> Explanation:
    """Explain a log given as a string. Never raises for odd input."""
    return explain_blocks([text.encode("utf-8", errors="replace")])


def explain_path(path: str | Path) -> Explanation:
    """Explain the log in file `path` (gzip-compressed when it ends in `.gz`), streamed.

    Raises ExplainError when the file cannot be read.
    """
    p = Path(path)
    if p.is_dir():
        raise ExplainError(_("{path} is a directory; give a log file (or - for standard "
                             "input)").format(path=path))
    try:
        with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as stream:
            return explain_stream(stream)
    except FileNotFoundError:
        raise ExplainError(_("{path}: no such file").format(path=path)) from None
    except (OSError, EOFError) as exc:
        raise ExplainError(_("{path}: cannot be read ({error})").format(path=path,
                                                                        error=exc)) from None


def explain_stream(stream: _Readable) -> Explanation:
    """Explain a log read from a binary stream, in bounded memory. Undecodable bytes are
    replaced; OSError from the stream propagates."""
    return explain_blocks(iter(lambda: stream.read(BLOCK_BYTES), b""))


def explain_blocks(chunks: Iterable[bytes]) -> Explanation:
    """Explain a log given as successive byte chunks (cut anywhere)."""
    scanner: _Scanner | None = None
    read = [0]
    for block in _whole_lines(chunks, read):
        if scanner is None:
            scanner = _Scanner(every_line=len(block) < SHORT_TEXT_BYTES)
        scanner.feed(block)
    explanation = (scanner or _Scanner()).finish()
    explanation.bytes = read[0]
    return explanation


def _whole_lines(chunks: Iterable[bytes], read: list[int]) -> Iterator[bytes]:
    """Re-cut chunks into blocks of whole lines, each ending with a newline (a last line
    without one gets it); `read[0]` counts the bytes of the chunks themselves."""
    carry = b""
    for chunk in chunks:
        read[0] += len(chunk)
        chunk = carry + chunk
        cut = chunk.rfind(b"\n")
        if cut < 0:
            carry = chunk
            continue
        carry = chunk[cut + 1:]
        yield chunk[: cut + 1]
    if carry:
        yield carry + b"\n"


@dataclass
class _Window:
    """Lines still to collect after an error line (or torchrun's failure summary)."""

    error: RankError | None
    rank: int | None
    wanted: int
    until_line: int = 0
    """The window closes at this line of the log even if its rank fell silent."""


class _Scanner:
    """The state of one pass over a log. A short text (pasted, under SHORT_TEXT_BYTES) has
    every line read; a long log only the lines holding a key."""

    def __init__(self, every_line: bool = False) -> None:
        self.every_line = every_line
        self.lines = 0
        self.first: dict[int | None, RankError] = {}
        self.windows: list[_Window] = []
        self.summary: _Window | None = None
        self.sticky_evidence = ""
        self.root_cause_rank: int | None = None
        self.root_cause: dict[str, str] = {}
        """The fields of torchrun's Root Cause block (rank, exitcode, host)."""
        self.root_cause_at: tuple[int, str] | None = None
        self.reports: list[tuple[int, str, ProcessReport]] = []
        """Launchers' lines about processes: (line, the line, what it says)."""
        self.nodes: dict[int | None, str] = {}
        """The node each rank's lines named first."""
        self.device_numbered: dict[int, bool] = {}
        """Whether a rank's number came from NCCL's `[N]` (the process's CUDA device: its
        local rank) on the first of its candidate lines that named it."""
        self.fallback: RankError | None = None
        """The first exception line, kept in case no known signature ever matches."""
        self.ranks: set[int] = set()
        self.later: list[RankError] = []
        self.reported: set[int | None] = set()
        """Ranks whose first error's own report (its exception line) has been read."""
        self.first_family: dict[int | None, str] = {}
        self.last_later: dict[int | None, str] = {}
        """Each rank's last later error line, without thread ids (kernels print one line per
        thread)."""
        self.tail = b""
        """The end of the previous block, for the lines just before an error."""
        self.diagnosed: DiagnosedLine | None = None

    def feed(self, block: bytes) -> None:
        if len(self.ranks) < MAX_RANKS:
            self._note_ranks(block)
        lowered = block.lower()
        if self.every_line:
            candidates = [0, *(m.end() for m in _NEWLINE.finditer(block, 0, len(block) - 1))]
        else:
            candidates = sorted(_key_line_starts(lowered))
        line = self.lines
        cursor = 0
        index = 0
        while cursor < len(block):
            while index < len(candidates) and candidates[index] < cursor:
                index += 1
            following = bool(self.windows) or self.summary is not None
            if not following:
                if index >= len(candidates):
                    break
                line += block.count(b"\n", cursor, candidates[index])
                cursor = candidates[index]
            end = block.index(b"\n", cursor) + 1
            line += 1
            is_candidate = index < len(candidates) and candidates[index] == cursor
            self._visit(block, lowered, cursor, end, line, is_candidate)
            cursor = end
        self.lines = line + block.count(b"\n", cursor)
        self.tail = block[-BEFORE_SCAN_BYTES:]

    def _note_ranks(self, block: bytes) -> None:
        """Note the ranks that print in this block. Ranks interleave all along a log, so the
        block's first and last lines show them without a pass over every line."""
        for sample in (block[:RANK_SAMPLE_BYTES], block[-RANK_SAMPLE_BYTES:]):
            self.ranks.update(int(a or b) for a, b in RANKS_IN_BLOCK.findall(sample))

    def _visit(self, block: bytes, lowered: bytes, start: int, end: int, line: int,
               is_candidate: bool) -> None:
        """Look at log line `line` (block[start:end]), one frame at a time when it holds
        carriage returns (a progress bar's redraws, then maybe an error, as a terminal shows
        them); a frame without a rank prefix has its line's rank."""
        line_rank = None
        for at, stop in _frames(block, start, end):
            rank, node, text = _split_rank(block[at:min(stop, at + MAX_LINE_BYTES)])
            if at == start:
                line_rank = rank
            rank = line_rank if rank is None else rank
            self._follow(rank, text, line)
            at, text = _after_progress_bar(block, at, stop, text)
            if is_candidate:
                if node is not None and rank not in self.nodes:
                    self.nodes[rank] = node
                if rank is not None and rank not in self.device_numbered:
                    self.device_numbered[rank] = names_cuda_device(block[at:stop])
                at, stop = _error_view(lowered, at, stop)
                raw = block[at:stop]
                self._consider(block, lowered, start, at, stop, line, rank, raw,
                               _split_rank(raw)[2] if at != start else text)

    def _consider(self, block: bytes, lowered: bytes, start: int, at: int, stop: int,
                  line: int, rank: int | None, raw: bytes, text: str) -> None:
        """Note the frame block[at:stop] of the line starting at `start` if it holds a
        rank's first error (or torchrun's failure summary, or a first exception line)."""
        if rank is not None and len(self.ranks) < MAX_RANKS:
            self.ranks.add(rank)
        own = diagnosed_lines.diagnosed_line(text, line)
        if own is not None:  # cudadiag's own diagnosis: no error of the program's
            self.diagnosed = self.diagnosed or own
            return
        low = lowered[at:stop]
        if _ROOT_CAUSE in low:
            self.summary = _Window(None, None, ROOT_CAUSE_LINES)
            self.root_cause_at = (line, text.strip())
        report = launcher_report(low, text)
        if report is not None:
            if report.rank is None and not report.local and rank is not None:
                report = replace(report, rank=rank)
            if len(self.reports) < MAX_REPORTS:
                self.reports.append((line, text.strip(), report))
            if report.kind == "summary" and self.fallback is None:
                self.fallback = RankError(rank=None, line=line, timestamp=None,
                                          evidence=text.strip(), text=text)
            if report.kind != "dump":
                return  # a dump signal is also the rank's collective timeout
        if not (self.every_line or any(a in low for a in knowledge.log_anchors())
                or _EXCEPTION_LINE.match(text)):
            return
        if not self.sticky_evidence and mentions_sticky_error(text):
            self.sticky_evidence = text.strip()
        if rank in self.first:
            self._note_later(rank, line, raw, text)
            return
        if len(self.first) >= MAX_RANKS:
            return
        evidence = first_error_line(text)
        if evidence:
            before = self._lines_before(block, start, rank)
            error = RankError(rank=rank, line=line, timestamp=_timestamp(raw),
                              evidence=evidence, text="\n".join([*before, text]),
                              progress=progress_before(self._bytes_before(block, at)))
            self.first[rank] = error
            self.first_family[rank] = classify(evidence).family
            if _REPORT_LINE.match(text):
                self.reported.add(rank)
            self.windows.append(_Window(error, rank, LINES_AFTER, line + WINDOW_MAX_LINES))
        elif self.fallback is None and _EXCEPTION_LINE.match(text):
            self.fallback = RankError(rank=rank, line=line, timestamp=_timestamp(raw),
                                      evidence=text.strip(), text=text,
                                      progress=progress_before(self._bytes_before(block, at)))

    def _note_later(self, rank: int | None, line: int, raw: bytes, text: str) -> None:
        """Note log line `line` of `rank` (which has had its first error) if it reports a
        later error: not a line of the first error's own report (the same assertion from
        other threads, the traceback, the exception that carried it, hints), nor of the
        previous later error's."""
        first = self.first[rank]
        if len(self.later) >= MAX_LATER_ERRORS or line > first.line + LATER_SPAN_LINES:
            return
        if _CONTINUATION.match(text) or any(p.search(text)
                                             for p in knowledge.HINT_PATTERNS.values()):
            return
        report = bool(_REPORT_LINE.match(text))
        if rank not in self.reported:
            if not report:
                return  # still the first error's report
            if classify(text).family == self.first_family[rank]:
                self.reported.add(rank)  # the exception that carried the first error
                return
        evidence = first_error_line(text)
        key = _THREAD_IDS.sub("", evidence)
        if not evidence or self.last_later.get(rank) == key:
            return
        self.last_later[rank] = key
        error = RankError(rank=rank, line=line, timestamp=_timestamp(raw), evidence=evidence,
                          text=text)
        self.later.append(error)
        self.windows.append(_Window(error, rank, LATER_LINES, line + LATER_LINES))

    def _follow(self, rank: int | None, text: str, line: int) -> None:
        """Give a line to the windows still collecting lines of its rank."""
        if self.summary is not None:
            m = _ROOT_CAUSE_FIELDS.match(text)
            self.summary.wanted -= 1
            if m and m["field"]:
                self.root_cause.setdefault(m["field"], m["value"])
                if m["field"] == "rank":
                    self.root_cause_rank = int(m["value"])
            if (m and m["end"]) or self.summary.wanted <= 0:
                self.summary = None
        for window in list(self.windows):
            if window.rank == rank and window.error is not None:
                window.error.text += "\n" + text
                window.wanted -= 1
            if window.wanted <= 0 or line >= window.until_line:
                self.windows.remove(window)

    def _bytes_before(self, block: bytes, at: int) -> bytes:
        """Up to PROGRESS_SCAN_BYTES of the log just before offset `at` of `block`."""
        if at >= PROGRESS_SCAN_BYTES:
            return block[at - PROGRESS_SCAN_BYTES:at]
        return (self.tail + block[:at])[-PROGRESS_SCAN_BYTES:]

    def _lines_before(self, block: bytes, start: int, rank: int | None) -> list[str]:
        """Up to LINES_BEFORE lines of `rank` just before offset `start`."""
        window = (self.tail + block[:start]) if start < BEFORE_SCAN_BYTES else block[
            start - BEFORE_SCAN_BYTES:start]
        kept: list[str] = []
        for raw in reversed(window.split(b"\n")[1:-1]):
            line_rank, _, text = _split_rank(raw[:MAX_LINE_BYTES])
            if line_rank == rank:
                kept.append(text)
                if len(kept) == LINES_BEFORE:
                    break
        return list(reversed(kept))

    def finish(self) -> Explanation:
        errors = list(self.first.values())
        for error in errors:
            error.progress = error.progress or progress_after(error.text)
        for error in [*errors, *self.later]:
            error.diagnosis = classify(error.text)
            error.node = error.node or self.nodes.get(error.rank)
            error.local = error.local or (error.rank is not None
                                          and self.device_numbered.get(error.rank, False))
        deaths = self._deaths()
        named = self._named_first(deaths)
        first = _first_failure(errors, self.root_cause_rank, named, deaths)
        agreed, from_incident = _agreed_failure(self.diagnosed, first)
        if agreed is not None and agreed.diagnosis is not None:
            first, diagnosis = agreed, agreed.diagnosis
        elif first is not None and first.diagnosis is not None:
            diagnosis = first.diagnosis
        elif self.fallback is not None:
            first = self.fallback
            if named is not None and first.rank is None:
                first.rank, first.local, first.node = named.rank, named.local, named.node
            diagnosis = classify(first.text)
            diagnosis.evidence = diagnosis.evidence or first.evidence
        else:
            diagnosis = classify("")
        if self.sticky_evidence and not diagnosis.sticky:
            diagnosis.sticky = True
            diagnosis.details["sticky_evidence"] = self.sticky_evidence
        ranks = self.ranks | {d.rank for d in deaths if d.rank is not None and not d.local}
        if first is not None and (ranks or first.rank is not None):
            diagnosis.rank = first.rank
        if agreed is None:
            describe_generated_code(diagnosis, None, first.text if first is not None else "")
            advise_log(diagnosis, first.text if first is not None else "")
        if first is not None and first.diagnosis is not None and first.exit_code is not None:
            diagnosis.details["exit_code"] = first.exit_code
            _check_how_it_ended(diagnosis, first.exit_code)
        only_collective = bool(ranks) and bool(errors) and not deaths and all(
            is_consequence(e.diagnosis) for e in errors)
        failed = {e.rank for e in errors}
        others = [e for e in [*errors, *deaths, *self.later] if e is not first
                  and not (e.rank == getattr(first, "rank", None) and e in deaths)]
        return Explanation(
            diagnosis=diagnosis, first=first,
            consequences=sorted(others, key=lambda e: e.line),
            ranks_seen=sorted(ranks), root_cause_rank=self.root_cause_rank,
            stopped_by_launcher=sum(1 for _, _, r in self.reports if r.kind == "stopped"),
            first_dump_rank=first_dump_rank(r for _, _, r in self.reports),
            only_collective_failures=only_collective,
            silent_ranks=sorted(r for r in ranks if r not in failed),
            lines=self.lines, sticky_evidence=self.sticky_evidence,
            diagnosed=self.diagnosed, agreed=agreed is not None,
            agreed_from_incident=from_incident,
        )

    def _deaths(self) -> list[RankError]:
        """The processes launchers said ended and took the job down: their lines, and
        torchrun's Root Cause block, each as a RankError diagnosed by its exit code."""
        deaths = [_death(rank=report.rank, line=line, evidence=evidence,
                         exit_code=report.exit_code, local=report.local, node=report.node)
                  for line, evidence, report in self.reports if report.kind == "died"]
        code = self.root_cause.get("exitcode")
        if self.root_cause_at is not None and self.root_cause_rank is not None and code:
            line, _ = self.root_cause_at
            fields = ", ".join(f"{k} {v}" for k, v in self.root_cause.items())
            deaths.append(_death(
                rank=self.root_cause_rank, line=line,
                evidence=msg("torchrun's Root Cause (first observed failure): {fields}",
                             fields=fields),
                exit_code=int(code) if code.lstrip("-").isdigit() else None, local=False,
                node=self.root_cause.get("host")))
        return deaths

    def _named_first(self, deaths: list[RankError]) -> RankError | None:
        """The process a launcher names as the first to fail: torchrun's Root Cause, else
        the earliest launcher line that names one (torchelastic's `failed (exitcode: -9)
        local_rank: 5`, spawn's `process 1 terminated with ...`)."""
        if self.root_cause_rank is not None:
            return next((d for d in deaths if d.rank == self.root_cause_rank and not d.local),
                        _death(rank=self.root_cause_rank, line=0, evidence="", exit_code=None,
                               local=False, node=self.root_cause.get("host")))
        named = [d for d in deaths if d.rank is not None]
        return min(named, key=lambda d: d.line) if named else None


WEAKER_LINE_FAMILIES = frozenset({"unknown", "distributed"})
"""cudadiag's diagnosis of these families says less than an error of the log's own that is
no consequence: the log's error stays the first."""


def _agreed_failure(line: DiagnosedLine | None, first: RankError | None
                    ) -> tuple[RankError | None, bool]:
    """The failure cudadiag's diagnosis line names, as the log's first, when the log's own
    first error is none, a consequence (a collective's, a peer's) or of another family:
    the job's first failure on another node, or one diagnosed with what the log cannot
    show (the tracer, the precheck), unless the line's family says less
    (WEAKER_LINE_FAMILIES); and whether its diagnosis is the incident's, read
    from this machine's incident log (else its family's checks, worded for a log).
    (None, False) otherwise."""
    if line is None or (first is not None and not is_consequence(first.diagnosis) and (
            first.family == line.family or line.family in WEAKER_LINE_FAMILIES)):
        return None, False
    incident = diagnosed_lines.stored_incident(line.incident_id)
    if incident is not None:
        diagnosis = incident.diagnosis
    else:
        diagnosis = Diagnosis(family=line.family, sticky=False, first_checks=[], avoid=[],
                              details={}, summary=line.summary, evidence=line.text)
        advise_log(diagnosis, line.summary)
    return RankError(rank=diagnosis.rank, line=line.line, timestamp=None, evidence=line.text,
                     text=line.text, diagnosis=diagnosis), incident is not None


def _frames(block: bytes, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The (start, end) offsets of the frames of the line block[start:end]: the parts
    between carriage returns (a `\r\n` ending is no frame break); the whole line when it
    holds none. Empty frames are skipped."""
    cut = block.find(b"\r", start, end)
    if cut < 0 or (cut >= end - 2 and block[cut + 1:cut + 2] == b"\n"):
        yield start, end
        return
    at = start
    while cut >= 0:
        if cut > at:
            yield at, cut
        at = cut + 1
        cut = block.find(b"\r", at, end)
    if block[at:end].strip(b"\r\n"):
        yield at, end


def _after_progress_bar(block: bytes, at: int, stop: int, text: str) -> tuple[int, str]:
    """The frame block[at:stop] (read as `text`) without the progress bar that starts it,
    when something follows the bar on the frame (an error printed after a bar's frame
    without a newline): its new start offset and text; else the frame unchanged."""
    cut = bar_length(text)
    rest = text[cut:]
    if not cut or not rest.strip():
        return at, text
    found = block.find(rest.encode("utf-8", errors="replace"), at, stop)
    return (found, rest) if found >= 0 else (at, text)


def _error_view(lowered: bytes, at: int, stop: int) -> tuple[int, int]:
    """The part of frame [at, stop) looked at for an error: all of it up to MAX_LINE_BYTES;
    of a longer one, MAX_LINE_BYTES from VIEW_CONTEXT_BYTES before its first anchor (an
    error printed after a long unbroken output), else its start."""
    if stop - at <= MAX_LINE_BYTES:
        return at, stop
    found = [p for p in (lowered.find(a, at, stop) for a in knowledge.log_anchors()) if p >= 0]
    begin = max(at, min(found) - VIEW_CONTEXT_BYTES) if found else at
    return begin, min(stop, begin + MAX_LINE_BYTES)


def _key_line_starts(lowered: bytes) -> set[int]:
    """Return the start offsets of the lines of `lowered` that hold one of LOG_KEYS."""
    starts: set[int] = set()
    for key in (*knowledge.LOG_KEYS, *LAUNCHER_ANCHORS, diagnosed_lines.KEY):
        at = lowered.find(key)
        while at >= 0:
            starts.add(lowered.rfind(b"\n", 0, at) + 1)
            at = lowered.find(key, lowered.find(b"\n", at) + 1 or len(lowered))
    return starts


def _split_rank(raw: bytes) -> tuple[int | None, str | None, str]:
    """Return (the rank of the line's prefixes (launchers.LINE_PREFIXES: `[rank3]:`,
    `[default3]:`, `3: `, NCCL's `host:pid:tid [3] `) or, without one, the rank the message
    names (`[Rank 3] Watchdog ...`), else None; the node they name or None; the line
    without the prefixes, decoded)."""
    m = LINE_PREFIX.match(raw)
    rank: int | None = None
    node: str | None = None
    if m is not None and m.end():
        number = m["bracketed"] or m["label"] or m["nccl_rank"]
        rank = int(number) if number is not None else None
        host = m["host"] or m["nccl_host"]
        node = host.decode("utf-8", errors="replace") if host else None
        raw = raw[m.end():]
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if rank is None and b"Rank " in raw[:200]:
        named = MESSAGE_RANK.search(text, 0, 200)
        rank = int(named["rank"]) if named else None
    return rank, node, text


def _timestamp(raw: bytes) -> tuple[str, ...] | None:
    """A sortable timestamp from an ISO date-time or a glog prefix (`E0501 12:00:01.123`)."""
    head = raw[:200]
    m = _ISO_TIME.search(head)
    if m:
        return ("iso", m.group("date").decode(), m.group("time").decode().replace(",", "."))
    m = _GLOG_TIME.search(head)
    if m:
        return ("glog", m.group("month").decode(), m.group("day").decode(),
                m.group("time").decode())
    return None


def is_consequence(diagnosis: Diagnosis | None) -> bool:
    """Return True for what other ranks' errors lead to: a collective's failure (a timeout,
    an aborted communicator, a peer that closed the connection), or a wrapper (an uncaught
    C++ exception, a launcher's report) that does not show the error it carries."""
    return diagnosis is None or diagnosis.family == "distributed" or bool(
        diagnosis.details.get("carrier_only"))


def _death(*, rank: int | None, line: int, evidence: str, exit_code: int | None,
           local: bool, node: str | None) -> RankError:
    """A process a launcher reported dead, diagnosed by how it ended
    (knowledge.PROCESS_ENDS: `killed by signal 9 (SIGKILL) — often the host's out-of-memory
    killer; check `dmesg``)."""
    diagnosis = classify("")
    who = describe_process(rank, local=local, node=node)
    if exit_code is not None:
        diagnosis.summary = msg("{process} {how_it_ended}", process=who,
                                how_it_ended=knowledge.process_end_words(exit_code))
        diagnosis.details["exit_code"] = exit_code
    else:
        diagnosis.summary = msg("{process} raised an exception (its traceback follows line "
                                "{line})", process=who, line=format(line, ","))
    diagnosis.evidence = evidence
    return RankError(rank=rank, line=line, timestamp=None, evidence=evidence, text=evidence,
                     diagnosis=diagnosis, node=node, exit_code=exit_code, local=local)


CONSEQUENCES_OF_A_DEATH = msg("The other ranks' errors after it (the launcher's closing "
                              "signal SIGTERM, connections reset by peer, collective timeouts) "
                              "are consequences of this one.")


def _check_how_it_ended(diagnosis: Diagnosis, exit_code: int) -> None:
    """Give a process that ended with no error of its own (a death by signal, an exit status
    without a traceback) the first checks of how it ended (knowledge.PROCESS_ENDS)."""
    end = knowledge.PROCESS_ENDS_BY_CODE.get(exit_code)
    if diagnosis.family == "unknown" and end is not None and end.checks:
        diagnosis.first_checks = [*end.checks, CONSEQUENCES_OF_A_DEATH]


def describe_process(rank: int | None, *, local: bool, node: str | None) -> str:
    """`rank 3`, `local rank 3 on node7`, or `a process` when no rank is known: a Text, shown
    in the reader's language through `localize`."""
    if rank is None:
        return msg("a process on {node}", node=node) if node else msg("a process")
    if local:
        return (msg("local rank {rank} on {node}", rank=rank, node=node) if node
                else msg("local rank {rank}", rank=rank))
    return msg("rank {rank} on {node}", rank=rank, node=node) if node else msg("rank {rank}",
                                                                              rank=rank)


KILLED_CODES = frozenset({-9, 137})
"""Exit codes of a process something outside killed (the host's out-of-memory killer): that
is its story even when its peers printed errors."""


def _first_failure(errors: list[RankError], root_cause: int | None, named: RankError | None,
                   deaths: list[RankError]) -> RankError | None:
    """The error that came first. A process the launcher names first decides with its own
    error (or, when it printed none or was killed, its death); the errors of a log without
    rank prefixes are that process's. Else: collective failures and bare wrappers are
    consequences; among the other errors, the earliest by timestamp when each has one of
    the same kind, else the first to appear. When only consequences exist, the rank whose
    collective is behind (lowest SeqNum), torchrun's root-cause rank, else the first."""
    causes = [e for e in errors if not is_consequence(e.diagnosis)]
    if named is not None:
        own = next((e for e in causes if e.rank == named.rank), None) or next(
            (e for e in errors if e.rank == named.rank and not causes), None)
        if own is not None and named.exit_code not in KILLED_CODES:
            own.exit_code, own.node = named.exit_code, own.node or named.node
            return own
        unranked = [e for e in causes if e.rank is None]
        if unranked and len(unranked) == len(causes) and named.exit_code not in KILLED_CODES:
            chosen = min(unranked, key=lambda e: e.line)
            chosen.rank, chosen.local = named.rank, named.local
            chosen.node, chosen.exit_code = chosen.node or named.node, named.exit_code
            return chosen
        if named.line or named.exit_code is not None:
            if named.exit_code in KILLED_CODES or not causes:
                return named
    if causes:
        stamps = {e.timestamp[0] for e in causes if e.timestamp is not None}
        if len(stamps) == 1 and all(e.timestamp is not None for e in causes):
            return min(causes, key=lambda e: (e.timestamp, e.line))
        return min(causes, key=lambda e: e.line)
    if deaths:
        return min(deaths, key=lambda e: e.line)
    if not errors:
        return None
    behind = _behind(errors)
    if behind is not None:
        return behind
    named_error = next((e for e in errors if e.rank == root_cause), None)
    return named_error or min(errors, key=lambda e: e.line)


def _behind(errors: list[RankError]) -> RankError | None:
    """The error of the rank whose collective sequence number is lowest, when the ranks'
    numbers differ."""
    seqs = {e.rank: int(m.group(1)) for e in errors if (m := _SEQ_NUM.search(e.text))}
    if len(set(seqs.values())) < 2:
        return None
    rank = min(seqs, key=lambda r: seqs[r])
    return next(e for e in errors if e.rank == rank)


def seq_numbers(explanation: Explanation) -> dict[int | None, int]:
    """The collective sequence number (`SeqNum=N`) each failed rank reported, when it did:
    a rank behind the others is the slow one."""
    found: dict[int | None, int] = {}
    errors = [explanation.first, *explanation.consequences]
    for error in (e for e in errors if e is not None):
        m = _SEQ_NUM.search(error.text)
        if m:
            found[error.rank] = int(m.group(1))
    return found
