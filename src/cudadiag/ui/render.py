"""Renderings of incidents: plain text (what `%cudadiag show` and the CLI print) and HTML
(the panel's sections and its static fallback). The report to copy is repro/report.py's, the
one scrubbed Markdown rendering.

No widget import here: this module must work in a terminal and in static views. The content
is built once, as sections; each format only lays it out.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any

from cudadiag.advice import index_tensors
from cudadiag.batch.names import user_name
from cudadiag.classification import STICKY_TAIL
from cudadiag.i18n import N_, _, join_clauses, join_items, localize, localize_all
from cudadiag.i18n import width as width_of
from cudadiag.incident import (
    BatchInfo,
    BatchPosition,
    CompatCheck,
    EnvInfo,
    Frame,
    FrameContext,
    Incident,
    LaterError,
    LoopInfo,
    ModelFacts,
    RankRecord,
    StepInfo,
    TensorSummary,
)
from cudadiag.knowledge import UNSHOWN_DETAILS
from cudadiag.log.entry import failing_cell
from cudadiag.privacy.redact import Redactor
from cudadiag.shortlist import cut_join, cut_list, cut_pairs
from cudadiag.ui.labels import compat_status, detail_label
from cudadiag.ui.pictures import values_picture

SHORT_VALUES = 8
"""Loop variables and locals shown per frame in the lines under the cell."""
SHORT_INDICES = 8
FULL_INDICES = 32

LIST_SHOWN = 12
"""Items of a list shown before "… and N more"."""

RESTART_FRONTENDS = N_(
    "JupyterLab / Notebook 7: Kernel > Restart Kernel…; VS Code: the Restart button of the "
    "notebook toolbar; terminal IPython: exit and start again."
)
"""Where each front end restarts its kernel (shown with `_`: each language names the menus
as that language's front end shows them)."""


def restart_reminder(incident: Incident) -> str:
    """Return the one-paragraph reminder shown after a sticky error."""
    cell, simulated = _cell_label(incident), simulated_note(incident)
    if incident.op is not None and stopped_before_it_ran(incident):
        return _(
            "The precheck stopped {op} in {cell} before it ran: the CUDA context{simulated} of "
            "that run stayed usable (run as it is, this kernel would leave it unusable and the "
            "process would have to restart). A restart fixes no bad target or index: check the "
            "data first.").format(op=incident.op.name, cell=cell, simulated=simulated)
    if incident.run.mode != "kernel":
        return _(
            "The CUDA context{simulated} was unusable from {cell} on: that process could only "
            "end (the next run starts a fresh one). A restart fixes no bad target or index: "
            "check the data first.").format(cell=cell, simulated=simulated)
    return _(
        "The CUDA context{simulated} has been unusable since {cell}: every later CUDA call in "
        "this process fails and existing GPU tensors are lost. Restart the kernel. A restart "
        "fixes no bad target or index: check the data first.").format(cell=cell,
                                                                      simulated=simulated)


def simulated_note(incident: Incident) -> str:
    """` (simulated)` after the CUDA context of a simulated run (in the current language),
    "" for a real one."""
    return _(" (simulated)") if incident.run.simulated else ""


def stopped_before_it_ran(incident: Incident) -> bool:
    """Return True when the precheck stopped the failing operator before it ran (an
    isolated or script run): its kernel never ran, so the context was never made unusable."""
    return bool(incident.op and incident.op.precheck)


def sticky_warning_line(incident: Incident) -> str:
    """Return the one line printed before each cell that runs after a sticky error."""
    return _("cudadiag: the CUDA context{simulated} has been unusable since {cell} ({family}); "
             "restart the kernel — a restart fixes no bad target or index.").format(
        simulated=simulated_note(incident), cell=_cell_label(incident),
        family=incident.diagnosis.family)


SHOW_IN_IPYTHON = "%cudadiag show"
"""How a notebook or IPython user opens an incident (the hint of the short text)."""
SHOW_IN_TERMINAL = "cudadiag show"
"""How a shell user opens an incident."""


def render_short(incident: Incident, *, show: str | None,
                 width: int | None = None) -> str:
    """Return the few lines shown under a failing cell: the lead (lead_lines), at most
    LEAD_BUDGET lines, wrapped to `width` columns (LEAD_WIDTH by default; 0 for one line per
    fact, as `cudadiag run` prints them: a terminal wraps them itself, and a log keeps each
    fact on the line grep finds). `show` is the command that opens the incident where this
    text is read (SHOW_IN_IPYTHON, SHOW_IN_TERMINAL), None when it cannot be opened (it was
    not saved): then no hint is given."""
    width = LEAD_WIDTH if width is None else width
    lead = lead_lines(incident)
    lead[0] = LeadLine("headline", f"cudadiag [{incident.id}] {lead[0].text}")
    if show:
        lead.append(LeadLine("details", _("details: {show} {id}").format(show=show,
                                                                          id=incident.id)))
    lines = _fitted(lead, LEAD_BUDGET, width)
    return "\n".join(line for n, item in enumerate(lines)
                     for line in _wrapped(item.text, width, first="" if n == 0 else "  "))


LEAD_BUDGET = 12
"""Lines under a failing cell before the tabs (the text form: all its lines)."""
LEAD_WIDTH = 100
"""Columns of the text form's lines."""


@dataclass(frozen=True)
class LeadLine:
    """One line of what a user sees first under a failing cell."""

    kind: str
    """`headline`, `noticed`, `restart`, `stopped`, `next`, `loop`, `locals`, `watch`,
    `details`."""
    text: str


_KEPT_FIRST = ("headline", "restart", "stopped", "next", "check", "details", "noticed", "watch",
               "loop", "locals")
"""The order in which lines keep their room when the lead is over its budget."""


def lead_lines(incident: Incident) -> list[LeadLine]:
    """The first screen under a failing cell, in reading order: the headline (family, the
    operator or kernel, the offending value and the element of the batch holding it, by the
    name the user's loop gives it, when known), where the error was noticed or raised, the
    restart line when the context is gone (or the good news that a precheck kept it), the
    loop position, what to check first, the next action."""
    d, e = incident.diagnosis, incident.error
    # the summary without its sticky tail is a sentence localize knows (classify.STICKY_TAIL)
    summary = localize(d.summary.removesuffix(STICKY_TAIL))
    where = incident.op.in_batch if incident.op is not None else None
    if where is not None:  # the element by the name the user's loop gives it
        element = offending_element(incident, where)
        summary = summary.replace(where.describe(), element).replace(position_text(where),
                                                                      element)
    lines = [LeadLine("headline", f"{d.family} — {summary}" + simulated_tag(incident))]
    death = death_line(incident)
    if death:
        lines.append(LeadLine("noticed", death))
    if e.reported_at:
        lines.append(LeadLine("noticed", _noticed_line(incident, e.reported_at)))
    if d.sticky:
        kind = "stopped" if stopped_before_it_ran(incident) else "restart"
        lines.append(LeadLine(kind, restart_line(incident)))
    lines += _iteration(incident)
    if incident.diagnosis.first_checks:
        lines.append(LeadLine("check", _("check first: {check}").format(
            check=first_sentence(localize(incident.diagnosis.first_checks[0])))))
    step = next_step(incident)
    if step:
        lines.append(LeadLine("next", step))
    return lines


def _noticed_line(incident: Incident, frame: Frame) -> str:
    """`noticed (not necessarily the cause) at In[5], line 1: print(loss.item())`, or
    `raised at ...` when the error was raised where it happened."""
    place, code = _place(frame), f": {frame.source}" if frame.source else ""
    if frame.function != "<module>":
        place = _("{place} in {function}").format(place=place, function=frame.function)
    if noticed_later(incident):
        return _("noticed (not necessarily the cause) at {place}{code}").format(place=place,
                                                                               code=code)
    return _("raised at {place}{code}").format(place=place, code=code)


def offending_element(incident: Incident, where: BatchPosition) -> str:
    """`target[2] (batch[1][2], row 2: dataset index 26)`: the element by the name the
    user's loop gives its tensor, then as the batch holds it."""
    named = user_name(where.tensor, _loops(incident))
    if named is None:
        return position_text(where)
    name = f"{named}[{', '.join(map(str, where.index))}]"
    element = f"{where.tensor}[{', '.join(map(str, where.index))}]"
    if where.dataset_index is None:
        return f"{name} ({element}"
    return _("{name} ({element}, row {row}: dataset index {index})").format(
        name=name, element=element, row=where.index[0], index=where.dataset_index)


def _loops(incident: Incident) -> list[LoopInfo]:
    return [loop for frame in (incident.loop.frames if incident.loop else [])
            for loop in frame.loops]


def restart_line(incident: Incident) -> str:
    """The restart reminder in one line (restart_reminder() is the paragraph)."""
    cell, simulated = _cell_label(incident), simulated_note(incident)
    if incident.op is not None and stopped_before_it_ran(incident):
        return _("Stopped before it ran: the precheck stopped {op} in {cell}, so that run's "
                 "CUDA context{simulated} stayed usable").format(op=incident.op.name, cell=cell,
                                                                 simulated=simulated)
    if incident.run.mode != "kernel":
        return _("The CUDA context{simulated} of that run was unusable from {cell} on: the "
                 "process could only end").format(cell=cell, simulated=simulated)
    return _("Restart required: the CUDA context{simulated} has been unusable since {cell} — "
             "restart the kernel; a restart fixes no bad target or index").format(
        cell=cell, simulated=simulated)


def next_step(incident: Incident) -> str | None:
    """What to do next, in one line, when the kernel saw the error after the fact: re-run
    the cell isolated; None otherwise (the first check is then the next step)."""
    run = incident.run
    if run.mode == "kernel" and run.cells and noticed_later(incident):
        return _("next: %cuda_isolate re-runs {cell} in a fresh process with blocking "
                 "launches: the operator, the offending value, its position").format(
            cell=_cell_label(incident))
    return None


def first_sentence(text: str) -> str:
    """Return `text` up to the end of its first sentence (". ", or a Japanese full stop
    followed by more), all of it when it has one sentence."""
    end = text.find(". ")
    full_stop = text.find("。")
    if 0 <= full_stop < len(text) - 1 and (end < 0 or full_stop < end):
        return text[: full_stop + 1]
    return text[: end + 1] if end > 0 else text


def _fitted(lines: list[LeadLine], budget: int, width: int = LEAD_WIDTH) -> list[LeadLine]:
    """`lines` in at most `budget` lines once wrapped to `width` (0: unwrapped): the lines
    that come last in _KEPT_FIRST are cut to one line (ending in …) first, then left out."""
    lines = list(lines)

    def used() -> int:
        return sum(len(_wrapped(x.text, width)) for x in lines)

    by_rank = sorted(range(len(lines)), key=lambda n: (
        -_KEPT_FIRST.index(lines[n].kind), -n))
    for n in by_rank:
        if used() <= budget:
            break
        if len(_wrapped(lines[n].text, width)) > 1:
            lines[n] = LeadLine(lines[n].kind, _cut(lines[n].text, width - 4))
    while used() > budget:
        lines.pop(max(range(len(lines)), key=lambda n: (_KEPT_FIRST.index(lines[n].kind), n)))
    return lines


def _cut(text: str, width: int) -> str:
    """`text` in at most `width` columns, ending in " …" when cut: at a space when one
    keeps three quarters of it, else within a word (a long path or value: a cut at a space
    would leave it out whole); text with wide characters by its display width, before a
    word that does not fit or within it (width.cut)."""
    text = " ".join(text.split())
    if width_of.has_wide(text):
        return width_of.cut(text, width)
    if len(text) <= width:
        return text
    kept = text[: width - 2]
    space = kept.rfind(" ")
    return (kept[:space] if space >= width * 3 // 4 else kept).rstrip() + " …"


def location(frame: Frame | FrameContext) -> str:
    """Return `In[N], line L` (in the current language) for a cell, `file:line` otherwise."""
    if frame.cell is not None:
        return _("In[{cell}], line {line}").format(cell=frame.cell, line=frame.line)
    return f"{frame.file}:{frame.line}"


def _place(frame: Frame) -> str:
    """`In[N], line L`, or `file:line` with a long path cut to its last two parts."""
    parts = frame.file.split(os.sep)
    if frame.cell is not None or len(frame.file) <= LONG_PATH or len(parts) <= 3:
        return location(frame)
    return f"…{os.sep}{os.path.join(*parts[-2:])}:{frame.line}"


LONG_PATH = 60
"""A file path longer than this is cut in the lead (the folded traceback keeps it whole)."""


def _wrapped(text: str, width: int = LEAD_WIDTH, first: str = "  ") -> list[str]:
    if not width:
        return [first + text]
    return width_of.wrap(text, width, first, first + "    ") or [first]


def lead_html(incident: Incident) -> str:
    """The lead (lead_lines) as HTML: one block per line, the headline bold, the restart
    line framed in the theme's error colour, the good news in its success colour."""
    out = [f'<div class="cd-lead" data-incident="{escape(incident.id)}">']
    for line in _fitted(lead_lines(incident), LEAD_BUDGET):
        text = escape(line.text)
        if line.kind == "headline":
            text = f"<b>{text}</b>"
        out.append(f'<div class="cd-{_LEAD_CLASS.get(line.kind, line.kind)}"'
                   f' style="{_LEAD_STYLES.get(line.kind, _LINE_STYLE)}">{text}</div>')
    out.append("</div>")
    return "".join(out)


_LEAD_CLASS = {"restart": "restart-line", "stopped": "stopped-line"}
_LINE_STYLE = "margin: 1px 0; line-height: 1.4"
_LEAD_STYLES = {
    "headline": "font-size: 1.1em; margin: 2px 0; line-height: 1.4",
    "restart": ("border-left: 4px solid var(--jp-error-color1, #d32f2f); padding: 1px 8px; "
                "margin: 3px 0; font-weight: 600; line-height: 1.4"),
    "stopped": ("border-left: 4px solid var(--jp-success-color1, #388e3c); padding: 1px 8px; "
                "margin: 3px 0; line-height: 1.4"),
    "next": "margin: 3px 0 1px; line-height: 1.4",
}


@dataclass
class Section:
    """One part of an incident report, independent of the output format."""

    key: str
    """Stable name: `restart`, `error`, `batch`, `checks`, `avoid`, `compat`, `env`,
    `later`, `ranks`."""
    title: str
    lines: list[str] = field(default_factory=list)
    bullets: bool = False
    table: list[list[str]] | None = None
    """Rows of a table, the header first."""
    collapsed: bool = False
    preformatted: bool = False
    """Source code: laid out as written, never wrapped."""
    svg: str | None = None
    """An inline SVG picture made by cudadiag (ui.pictures), shown under the lines in HTML."""
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """Named values after the lines: a two-column grid in HTML, `name: value` lines in
    text."""


def header_lines(incident: Incident) -> list[str]:
    """The family and summary, where Python reported the error, and the asynchronous caveat."""
    d, e = incident.diagnosis, incident.error
    lines = [f"{d.family}: {localize(d.summary)}" + simulated_tag(incident)]
    if e.reported_at:
        lines.append(_("reported at {frame}").format(frame=frame_text(e.reported_at)))
        if noticed_later(incident):
            lines.append(_("this line is an observation point, not necessarily the cause: CUDA "
                           "reports kernel errors asynchronously; re-run isolated with "
                           "blocking launches to find the operator"))
    return lines + iteration_lines(incident)


def noticed_later(incident: Incident) -> bool:
    """Return True when the error was raised after the fact (an asynchronous kernel error
    without blocking launches): the traceback's line is where it was noticed."""
    return incident.diagnosis.asynchronous and not incident.run.blocking


def iteration_lines(incident: Incident) -> list[str]:
    """Where in its loops the failure happened, in a line or three: the loop variables of
    each user frame (outermost first), the raising frame's other scalars, and the step,
    flags and dataset indices of an active watch()."""
    return [line.text for line in _iteration(incident)]


def _iteration(incident: Incident) -> list[LeadLine]:
    lines = []
    frames = incident.loop.frames if incident.loop else []
    looped = [f for f in frames if f.loops]
    if looped:
        where = (_("loop when the error was noticed: {loops}") if noticed_later(incident)
                 else _("loop: {loops}"))
        lines.append(LeadLine("loop", where.format(loops=" › ".join(
            f"{_loop_values(f)} ({_frame_place(f)})" for f in looped))))
    if frames and frames[-1].scalars:
        last = frames[-1]
        lines.append(LeadLine("locals", _("locals of {place}: {values}").format(
            place=_frame_place(last), values=cut_pairs(_unsecret(last.scalars.items()),
                                                       SHORT_VALUES, last.scalars_omitted))))
    if incident.step:
        lines.append(LeadLine("watch", _watch_line(incident.step, incident.batch)))
    return lines


def _loop_values(frame: FrameContext) -> str:
    pairs = [pair for loop in frame.loops for pair in loop.values.items()]
    if pairs:
        return cut_pairs(_unsecret(pairs), SHORT_VALUES)
    return "; ".join(loop.header.strip().rstrip(":") for loop in frame.loops)


def _unsecret(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (name, value text) pairs of locals with the values the report's scrubber takes
    for secrets masked (secret environment variables' values, tokens, URL credentials...)."""
    redactor = Redactor()
    return [(name, redactor.secrets_masked(value, context=f"{name}={value}"))
            for name, value in pairs]


def _frame_place(frame: FrameContext) -> str:
    place = f"In[{frame.cell}]" if frame.cell is not None else os.path.basename(frame.file)
    if frame.function == "<module>":
        return place
    return _("{place} in {function}").format(place=place, function=frame.function)


def _watch_line(s: StepInfo, batch: BatchInfo | None) -> str:
    if s.framework:
        parts = [f"{s.framework}: {step_text(s)}"]
    else:
        parts = [_("watch({loader}): step {step}, last completed {completed}").format(
            loader=s.loader or "", step=s.iteration, completed=s.last_completed)]
    if s.last_incomplete:
        parts.append(_("last incomplete batch"))
    if s.is_last:
        parts.append(_("the loader's last step"))
    if batch is not None and batch.indices is not None:
        parts.append(_("dataset indices {indices}").format(
            indices=cut_list(batch.indices, SHORT_INDICES)))
    return join_clauses(parts)


def step_text(s: StepInfo) -> str:
    """The step of a library's loop in its own terms: `epoch 0, global step 3 (micro-step 1
    of 2), batch 7, last completed batch 6`."""
    parts = [_("epoch {epoch}").format(epoch=s.epoch)] if s.epoch is not None else []
    if s.global_step is not None:
        if s.accumulation and s.accumulation > 1 and s.micro_step is not None:
            parts.append(_("global step {step} (micro-step {micro} of {accumulation})").format(
                step=s.global_step, micro=s.micro_step, accumulation=s.accumulation))
        else:
            parts.append(_("global step {step}").format(step=s.global_step))
    parts.append(_("batch {batch}, last completed batch {completed}").format(
        batch=s.iteration, completed=s.last_completed))
    return join_items(parts)


def model_lines(facts: ModelFacts) -> list[str]:
    """The model's facts as `config.num_labels = 3`, one line."""
    named: list[tuple[str, object]] = [(facts.num_labels_from, facts.num_labels)]
    named += [(f"config.{name}", getattr(facts, name))
              for name in ("vocab_size", "pad_token_id", "problem_type")]
    named += [("len(tokenizer)", facts.tokenizer_length), ("label_names", facts.label_names)]
    shown = ", ".join(f"{name} = {value!r}" if isinstance(value, str) else f"{name} = {value}"
                      for name, value in named if value is not None)
    if not shown:
        return [_("model {model}").format(model=facts.model)]
    return [_("model {model}: {facts}").format(model=facts.model, facts=shown)]


def loop_code(incident: Incident) -> list[str]:
    """The failing statement of each user frame with the loops around it, as source lines
    (`# In[4], line 7 in train` first; each loop header followed by its values as a comment;
    `...` for the lines between; the statement marked), then the frame's scalars."""
    frames = incident.loop.frames if incident.loop else []
    out: list[str] = []
    for n, frame in enumerate(frames):
        if n == len(frames) - 1:
            mark = (_("the error was noticed here") if noticed_later(incident)
                    else _("raised here"))
        else:
            mark = _("the call that failed")
        out += ["# " + _("{place} in {function}").format(place=location(frame),
                                                          function=frame.function),
                *_frame_code(frame, mark)]
        if frame.scalars:
            out.append("# " + _("locals: {values}").format(values=cut_pairs(
                _unsecret(frame.scalars.items()), len(frame.scalars), frame.scalars_omitted)))
        out.append("")
    return out[:-1]


def _frame_code(frame: FrameContext, mark: str) -> list[str]:
    parts = [(loop.line, loop.header.splitlines() or [""],
              ", ".join(f"{k}={v}" for k, v in _unsecret(loop.values.items())))
             for loop in frame.loops]
    if frame.statement:
        parts.append((frame.statement_line, frame.statement.splitlines(), f"<- {mark}"))
    indent = min((len(line) - len(line.lstrip()) for _, block, _ in parts for line in block
                  if line.strip()), default=0)
    lines: list[str] = []
    for i, (first, block, note) in enumerate(parts):
        if i and first > parts[i - 1][0] + len(parts[i - 1][1]):
            lines.append(" " * (len(block[0]) - len(block[0].lstrip()) - indent) + "...")
        block = [line[indent:] for line in block]
        lines += [*block[:-1], block[-1] + (f"  # {note}" if note else "")]
    return lines


def sections(incident: Incident) -> list[Section]:
    """Return the report of `incident` as format-independent sections, in reading order."""
    d, e = incident.diagnosis, incident.error
    parts = []
    if d.sticky and stopped_before_it_ran(incident):
        parts.append(Section("restart", _(STOPPED_TITLE), [restart_reminder(incident)]))
    elif d.sticky:
        parts.append(Section("restart", _(RESTART_TITLE),
                             [restart_reminder(incident), _(RESTART_FRONTENDS)]))
    pairs = []
    if d.evidence and not d.evidence.endswith(e.message):
        pairs.append((_("first message"), d.evidence))
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        pairs.append((_("operator"), f"{incident.op.name}({args})"))
        if incident.op.precheck:
            pairs.append((_("precheck"), localize(incident.op.precheck)))
        if incident.op.in_batch:
            pairs.append((_("in the batch"), position_text(incident.op.in_batch)))
    pairs += [(detail_label(k), detail_text(k, v)) for k, v in d.details.items()
              if k not in UNSHOWN_DETAILS]
    pairs += [(_("at"), frame_text(f)) for f in e.traceback if f.user]
    parts.append(Section("error", _("First error"), [f"{e.type}: {e.message}"], pairs=pairs))
    if incident.loop and incident.loop.frames:
        parts.append(Section("loop", _("Where in the loop"), loop_code(incident),
                             preformatted=True))
    if incident.step or incident.batch:
        parts.append(_batch_section(incident))
    parts.append(Section("checks", _("Check first"), localize_all(d.first_checks),
                         bullets=True))
    parts.append(Section("avoid", _("Do not conclude"), localize_all(d.avoid), bullets=True))
    if incident.env and incident.env.compat:
        parts.append(Section("compat", _("Compatibility (cudadiag env --check)"),
                             compat_lines(incident.env.compat)))
    if incident.env:
        parts.append(Section("env", _("Environment"), environment_lines(incident.env)))
    if e.later:
        parts.append(Section(
            "later", _("Later errors ({count}, probable consequences of the first)").format(
                count=len(e.later)),
            [_later_line(x) for x in e.later], collapsed=True))
    if incident.run.ranks:
        parts.append(Section("ranks", _("Ranks ({count})").format(count=len(incident.run.ranks)),
                             [rank_line(r) for r in incident.run.ranks]))
    return parts


RESTART_TITLE = N_("Restart required")
STOPPED_TITLE = N_("Stopped before it ran")
"""The titles of the restart box: an alarm, or good news when a precheck kept the context
usable."""


def position_text(where: BatchPosition) -> str:
    """`batch['labels'][2, 10] (row 2: dataset index 45)` in the current language (as
    BatchPosition.describe() writes it in English)."""
    element = f"{where.tensor}[{', '.join(map(str, where.index))}]"
    if where.dataset_index is None:
        return element
    return _("{element} (row {row}: dataset index {index})").format(
        element=element, row=where.index[0], index=where.dataset_index)


def _later_line(error: LaterError) -> str:
    line = f"{_later_place(error)} {error.type}: {error.message}"
    return line if error.probable_consequence else _("{error} (unrelated)").format(error=line)


def valid_range_text(low: object, high: object) -> str:
    """`[0, 4)`: the valid values of an index, as every text cudadiag writes shows them
    (half-open: 4 is not valid)."""
    return f"[{low}, {high})"


def detail_text(key: str, value: Any) -> str:
    """A detail of a diagnosis as shown: a valid range half-open, the rest as recorded."""
    if key == "valid_range" and isinstance(value, (list, tuple)) and len(value) == 2:
        return valid_range_text(*value)
    return localize(value) if isinstance(value, str) else str(value)


def _later_place(error: LaterError) -> str:
    if error.rank is not None:
        return _("rank {rank}:").format(rank=error.rank)
    return f"In[{error.cell}]"


def rank_line(rank: RankRecord) -> str:
    """`rank 1 (local 1, node gpu3, pid 812): raised device_assert in aten::nll_loss_forward
    at 12:00:01.250`: one rank of a multi-process run."""
    what = _(_OUTCOMES.get(rank.outcome, rank.outcome))
    if rank.outcome == "raised":
        what = (_("raised {family} (a consequence)") if rank.consequence
                else _("raised {family}")).format(family=rank.family)
    elif rank.signal:
        what = _("{outcome} ({signal})").format(outcome=what, signal=rank.signal)
    elif rank.exit_status:
        what = _("{outcome} (exit status {status})").format(outcome=what,
                                                             status=rank.exit_status)
    if rank.where:
        what = _("{what} in {where}").format(what=what, where=rank.where)
    if rank.at:
        what = _("{what} at {time}").format(what=what, time=rank.at[11:23])
    return _("rank {rank} (local {local}, node {node}, pid {pid}): {what}").format(
        rank=rank.rank, local=rank.local_rank, node=rank.node, pid=rank.pid, what=what)


_OUTCOMES = {"finished": N_("finished"), "stopped": N_("stopped"),
             "died": N_("died"), "unknown": N_("unknown")}
"""How a rank ended (RankRecord.outcome), as shown."""


def render_text(incident: Incident) -> str:
    """Return the full plain-text report of one incident."""
    out = [_("Incident {id} — {created} — {mode} run").format(
        id=incident.id, created=incident.created_at, mode=incident.run.mode)
           + simulated_tag(incident), *header_lines(incident)]
    for part in sections(incident):
        title = part.title.upper() if part.key == "restart" else part.title
        out += ["", title]
        if part.preformatted:
            out += ["  " + line if line else "" for line in part.lines]
        else:
            out += [_wrap(line, "- " if part.bullets else "  ") for line in part.lines]
        out += [_wrap(_("{name}: {value}").format(name=name, value=value))
                for name, value in part.pairs]
        if part.table:
            out += ["  " + " | ".join(row) for row in part.table]
    return "\n".join(out)


def render_html(incident: Incident) -> str:
    """Return the report as one self-contained HTML block (the static fallback of the panel:
    nbconvert, GitHub, a reopened notebook): the lead (lead_html), then the sections."""
    out = [f'<div class="cudadiag-report" data-incident="{escape(incident.id)}">',
           lead_html(incident)]
    out += [section_html(part) for part in sections(incident)]
    out.append("</div>")
    return "\n".join(out)


def section_html(part: Section) -> str:
    """Return one section as HTML (the panel shows each in its own tab)."""
    if part.key == "restart":
        body = "".join(f"<div>{escape(line)}</div>" for line in part.lines)
        banner = next((style for title, style in _BANNER_STYLES.items()
                       if part.title in (title, _(title))), "")
        style = f"{banner}; {_BANNER_LAYOUT}"
        return (f'<div class="cd-restart" style="{style}"><b>{escape(part.title)}'
                f"</b>{body}</div>")
    if part.preformatted:
        code = "\n".join(part.lines)
        body = f"<pre>{escape(code)}</pre>"
    elif part.bullets:
        body = "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in part.lines) + "</ul>"
    else:
        body = "".join(f"<div>{escape(line)}</div>" for line in part.lines)
    if part.pairs:
        body += ('<div class="cd-grid" style="display: grid; grid-template-columns: '
                 'max-content 1fr; gap: 2px 14px">' + "".join(
                     f'<div style="color: var(--jp-content-font-color2, #666)">{escape(name)}'
                     f"</div><div>{escape(value)}</div>" for name, value in part.pairs)
                 + "</div>")
    if part.svg:
        body += f'<div class="cd-picture">{part.svg}</div>'
    if part.table:
        body += _table_html(part.table, "cd-batch-table" if part.key == "batch"
                            else f"cd-{part.key}-table")
    inner = f'<section class="cd-{part.key}"><h4>{escape(part.title)}</h4>{body}</section>'
    if part.collapsed:
        return f"<details><summary>{escape(part.title)}</summary>{inner}</details>"
    return inner


_NUMBER = re.compile(r"^[-+−]?(\d[\d,]*(\.\d+)?(e[-+]?\d+)?|\.\d+|inf|nan)"
                     r"( ?(ms|s|%|B|KiB|MiB|GiB))?$", re.IGNORECASE)
"""A table cell that holds a figure (with its unit): right-aligned, kept on one line."""


def table_columns(table: list[list[str]]) -> tuple[list[int], set[int]]:
    """Return, for a table (header first), the columns to show (those with a value in some
    row) and those of them that hold figures (every value a number, with its unit)."""
    header, rows = table[0], table[1:]
    kept = [n for n in range(len(header)) if not rows or any(row[n] for row in rows)]
    figures = {n for n in kept if any(row[n] for row in rows)
               and all(not row[n] or row[n] == "—" or _NUMBER.match(row[n]) for row in rows)}
    return kept, figures


def _table_html(table: list[list[str]], css_class: str) -> str:
    """A table (header first) as HTML: columns empty in every row left out, text aligned
    left, figures right and never wrapped."""
    header, rows = table[0], table[1:]
    kept, figures = table_columns(table)

    def cell(tag: str, n: int, text: str) -> str:
        style = ("text-align: right; white-space: nowrap" if n in figures
                 else "text-align: left") + "; padding: 1px 8px"
        return f'<{tag} style="{style}">{escape(text)}</{tag}>'

    head = "".join(cell("th", n, header[n]) for n in kept)
    body = "".join("<tr>" + "".join(cell("td", n, row[n]) for n in kept) + "</tr>"
                   for row in rows)
    return (f'<table class="{css_class}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _batch_section(incident: Incident) -> Section:
    lines, flags = [], []
    if incident.step:
        s = incident.step
        if s.framework:
            lines.append(f"{s.framework}: {step_text(s)}")
        else:
            step = _("step {step}, last completed step {completed}").format(
                step=s.iteration, completed=s.last_completed)
            lines.append(step + (f" ({s.loader})" if s.loader else ""))
        if s.last_incomplete:
            flags.append(_("last incomplete batch"))
        if s.is_last:
            flags.append(_("the loader's last step"))
    batch = incident.batch
    rows = []
    valid = incident.diagnosis.details.get("valid_range")
    judged = index_tensors(incident) if valid else []
    loops = _loops(incident)
    for t in batch.tensors if batch else []:
        rows.append(_tensor_row(t, user_name(t.path, loops)))
        flags += _tensor_flags(t, valid if t in judged else None)
    if batch is not None:
        lines += _batch_lines(batch)
    if flags:
        lines.insert(0, _("flags: {flags}").format(flags=join_clauses(flags)))
    if batch is not None and batch.structure:
        lines.append(_("structure {structure}").format(structure=batch.structure))
    if incident.model is not None:
        lines += model_lines(incident.model)
    table = [[_(name) for name in _TENSOR_COLUMNS], *rows] if rows else None
    picture = values_picture(incident)
    if picture is not None:
        lines.append(_("picture: {text}").format(text=picture.text))
    return Section("batch", _("Batch"), lines, table=table,
                   svg=picture.svg if picture is not None else None)


_TENSOR_COLUMNS = (N_("path"), N_("shape"), "dtype", N_("device"), N_("stride"), N_("min"),
                   N_("max"), N_("negatives"), N_("distinct"), "NaN", "Inf")
"""The columns of the batch's table (dtype, NaN and Inf are names in every language)."""


def _batch_lines(batch: BatchInfo) -> list[str]:
    lines = []
    if batch.indices is not None:
        lines.append(_("dataset indices {indices}").format(
            indices=cut_list(batch.indices, FULL_INDICES)))
    if batch.lengths:
        kept = batch.lengths  # the summary keeps the first rows only
        left = max(batch.batch_size or 0, len(kept)) - len(kept)
        lines.append(_("sequence lengths [{lengths}]").format(
            lengths=cut_join(kept, len(kept), omitted=left)))
    return lines + [localize(line) for line in (batch.note, batch.replayed) if line]


def value_text(v: float | None) -> str:
    """A tensor summary's figure as shown: floats to 4 significant digits, "" for None."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _tensor_row(t: TensorSummary, named: str | None) -> list[str]:
    if t.values_skipped:
        values = [localize(t.values_skipped), "", "", "", "", ""]
    else:
        values = [value_text(v)
                  for v in (t.min, t.max, t.negatives, t.distinct, t.nan, t.inf)]
    path = f"{named} ({t.path})" if named else t.path
    return [path, str(t.shape), t.dtype, t.device, str(t.stride), *values]


def _tensor_flags(t: TensorSummary, valid: list[int] | None) -> list[str]:
    """NaN and Inf in `t`; its values outside `valid`, the range of the operator that read
    them (None for a tensor it did not read: advice.index_tensors())."""
    flags = []
    if t.nan or t.inf:
        flags.append(f"{t.path}: NaN {t.nan or 0}, Inf {t.inf or 0}")
    if valid and t.is_integer and t.min is not None and t.max is not None:
        low, high = valid
        if t.max >= high or t.min < low:
            flags.append(_("{path}: values {low}..{high} outside {valid}").format(
                path=t.path, low=t.min, high=t.max, valid=valid_range_text(low, high)))
    return flags


def environment_lines(env: EnvInfo | None) -> list[str]:
    """Return the environment of an incident as the panel and the report show it: versions,
    backend, device, build architectures, code revision, binary extensions (lines without a
    value left out); ["not recorded"] for an incident without one."""
    if env is None:
        return [_("not recorded")]
    builds = [f"{name} {value}" for name, value in
              (("CUDA", env.cuda), ("HIP", env.hip), ("cuDNN", env.cudnn)) if value]
    lines = [_("PyTorch {torch}, Python {python}, {platform}").format(
                 torch=env.torch, python=env.python, platform=env.platform),
             _("backend {backend}; {builds}").format(
                 backend=env.backend,
                 builds=join_clauses(builds) if builds else _("this build has no CUDA, HIP or "
                                                           "cuDNN"))]
    if env.device_name:
        lines.append(_device_line(env))
    if env.arch_list:
        lines.append(_("build arch list {archs}").format(archs=" ".join(env.arch_list)))
    if env.code_revision:
        lines.append((_("code revision {revision} (dirty)") if env.code_dirty
                      else _("code revision {revision}")).format(revision=env.code_revision))
    if env.extensions:
        lines.append(_("extensions {extensions}").format(
            extensions=", ".join(f"{k} {v}" for k, v in env.extensions.items())))
    return lines


def _device_line(env: EnvInfo) -> str:
    name, capability = localize(env.device_name or ""), localize(env.capability or "")
    if env.device_in_arch_list is None:
        return _("device {name}, capability {capability}").format(
            name=name, capability=capability)
    return _("device {name}, capability {capability}, in the build's arch list: "
             "{in_list}").format(name=name, capability=capability,
                                 in_list=env.device_in_arch_list)


def environment_table(env: EnvInfo) -> str:
    """Return every field of `env`, one `name: value` line each, aligned (`cudadiag env`;
    the compatibility checks are `cudadiag env --check`'s)."""
    fields = dataclasses.asdict(env)
    del fields["compat"]
    width = max(len(name) for name in fields)
    return "\n".join(f"{name + ':':{width + 1}} {value}" for name, value in fields.items())


_BANNER_STYLES = {
    RESTART_TITLE: "border: 2px solid var(--jp-error-color1, #d32f2f)",
    STOPPED_TITLE: "border: 2px solid var(--jp-success-color1, #388e3c)",
}
"""The restart box in the theme's colours (JupyterLab's variables, light and dark): an alarm,
or good news when a precheck kept the context usable."""
_BANNER_LAYOUT = "padding: 6px 10px; margin: 6px 0; border-radius: 4px"


def compat_lines(checks: Iterable[CompatCheck]) -> list[str]:
    """Return one line per compatibility check (`FAIL  name: reason`), each failure or
    warning followed by what to install."""
    lines = []
    for check in checks:
        lines.append(f"{compat_status(check.status)}  {localize(check.name)}: "
                     f"{localize(check.reason)}")
        if check.fix and check.status in ("fail", "warn"):
            lines.append("      " + _("fix: {fix}").format(fix=localize(check.fix)))
    return lines


def _wrap(text: str, bullet: str = "  ") -> str:
    return width_of.fill(text, 100, bullet, " " * len(bullet), hyphens=True)


def frame_text(frame: Frame) -> str:
    """Return `In[N], line L in f: source` (or `file:line ...`) for a frame."""
    source = f": {frame.source}" if frame.source else ""
    return _("{place} in {function}").format(place=location(frame),
                                             function=frame.function) + source


def arg_text(arg: Any) -> str:
    """Return `target=int64[3]@cuda:0 values 0..4` for an operator argument."""
    if arg.shape is not None:
        text = f"{arg.name}={arg.dtype.replace('torch.', '')}{list(arg.shape)}@{arg.device}"
        if arg.contiguous is False:
            text += f" stride={arg.stride}"
        return _("{arg} values {values}").format(arg=text, values=arg.value) if arg.value \
            else text
    return f"{arg.name}={arg.value}"


def one_line(incident: Incident) -> str:
    """Return the diagnosis in one line: `family — summary`, with how the process ended when
    it died without a Python exception; for an error cudadiag does not know, the error
    itself (`ValueError: bad shape`) or how the process ended."""
    d, death = incident.diagnosis, death_line(incident)
    if d.family == "unknown":
        return death or f"{incident.error.type.rsplit('.', 1)[-1]}: {incident.error.message}"
    return f"{d.family} — {localize(d.summary)}" + (f"; {death}" if death else "")


def death_line(incident: Incident) -> str | None:
    """Return how a child that died without a Python exception ended (`the process exited
    with status 3 ...`, `the process was killed by SIGSEGV (Segmentation fault)`), else
    None."""
    if not incident.error.type.startswith("ProcessDied("):
        return None
    run = incident.run
    if run.signal:
        try:
            meaning = signal.strsignal(signal.Signals[run.signal]) or ""
        except KeyError:
            meaning = ""
        if meaning:
            return _("the process was killed by {signal} ({meaning})").format(
                signal=run.signal, meaning=meaning)
        return _("the process was killed by {signal}").format(signal=run.signal)
    return _("the process exited with status {status} without a Python exception (os._exit, "
             "or a library that ended the process)").format(status=run.exit_status)


def _cell_label(incident: Incident) -> str:
    cell = failing_cell(incident)
    return f"In[{cell}]" if cell is not None else _("the failing call")


def simulated_tag(incident: Incident) -> str:
    """` [simulated]` after the headline of a simulated run's incident (in the current
    language), "" for a real one."""
    return _(" [simulated]") if incident.run.simulated else ""

