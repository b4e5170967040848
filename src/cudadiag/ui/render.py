"""Renderings of incidents: plain text (what `%cudadiag show` and the CLI print), Markdown
(the report to copy) and HTML (the panel's sections and its static fallback).

No widget import here: this module must work in a terminal and in static views. The content
is built once, as sections; each format only lays it out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any

from cudadiag.incident import Frame, Incident

RESTART_FRONTENDS = (
    "JupyterLab / Notebook 7: Kernel > Restart Kernel…; VS Code: the Restart button of the "
    "notebook toolbar; terminal IPython: exit and start again."
)


def restart_reminder(incident: Incident) -> str:
    """Return the one-paragraph reminder shown after a sticky error."""
    cell = _cell_label(incident)
    simulated = " (simulated)" if incident.run.simulated else ""
    return (
        f"The CUDA context{simulated} has been unusable since {cell}: every later CUDA call in "
        "this process fails and existing GPU tensors are lost. Restart the kernel. A restart "
        "fixes no bad target or index: check the data first."
    )


def sticky_warning_line(incident: Incident) -> str:
    """Return the one line printed before each cell that runs after a sticky error."""
    simulated = " (simulated)" if incident.run.simulated else ""
    return (
        f"cudadiag: the CUDA context{simulated} has been unusable since {_cell_label(incident)} "
        f"({incident.diagnosis.family}); restart the kernel — a restart fixes no bad target "
        "or index."
    )


def render_short(incident: Incident) -> str:
    """Return the few lines shown under a failing cell."""
    d = incident.diagnosis
    lines = [f"cudadiag [{incident.id}] {d.summary}" + _simulated_tag(incident)]
    lines += [f"  {line}" for line in header_lines(incident)[1:]]
    if d.first_checks:
        lines.append(f"  check first: {d.first_checks[0]}")
    if d.sticky:
        lines.append("  " + restart_reminder(incident))
    lines.append(f"  details: %cudadiag show {incident.id}")
    return "\n".join(lines)


@dataclass
class Section:
    """One part of an incident report, independent of the output format."""

    key: str
    """Stable name: `restart`, `error`, `batch`, `checks`, `avoid`, `env`, `later`."""
    title: str
    lines: list[str] = field(default_factory=list)
    bullets: bool = False
    table: list[list[str]] | None = None
    """Rows of a table, the header first."""
    collapsed: bool = False


def header_lines(incident: Incident) -> list[str]:
    """The family and summary, where Python reported the error, and the asynchronous caveat."""
    d, e = incident.diagnosis, incident.error
    lines = [f"{d.family}: {d.summary}" + _simulated_tag(incident)]
    if e.reported_at:
        lines.append(f"reported at {frame_text(e.reported_at)}")
        if d.asynchronous:
            lines.append("this line is an observation point, not necessarily the cause: CUDA "
                         "reports kernel errors asynchronously; re-run isolated with blocking "
                         "launches to find the operator")
    return lines


def sections(incident: Incident) -> list[Section]:
    """Return the report of `incident` as format-independent sections, in reading order."""
    d, e = incident.diagnosis, incident.error
    parts = []
    if d.sticky:
        parts.append(Section("restart", "Restart required",
                             [restart_reminder(incident), RESTART_FRONTENDS]))
    error = [f"{e.type}: {e.message}"]
    if d.evidence and not d.evidence.endswith(e.message):
        error.append(f"first message: {d.evidence}")
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        error.append(f"operator: {incident.op.name}({args})")
        if incident.op.precheck:
            error.append(f"precheck: {incident.op.precheck}")
    error += [f"{k}: {v}" for k, v in d.details.items()]
    error += [f"at {frame_text(f)}" for f in e.traceback if f.user]
    parts.append(Section("error", "First error", error))
    if incident.step or incident.batch:
        parts.append(_batch_section(incident))
    parts.append(Section("checks", "Check first", list(d.first_checks), bullets=True))
    parts.append(Section("avoid", "Do not conclude", list(d.avoid), bullets=True))
    if incident.env:
        parts.append(Section("env", "Environment", _env_lines(incident)))
    if e.later:
        parts.append(Section(
            "later", f"Later errors ({len(e.later)}, probable consequences of the first)",
            [f"In[{x.cell}] {x.type}: {x.message}"
             + ("" if x.probable_consequence else " (unrelated)") for x in e.later],
            collapsed=True))
    return parts


def render_text(incident: Incident) -> str:
    """Return the full plain-text report of one incident."""
    out = [f"Incident {incident.id} — {incident.created_at} — {incident.run.mode} run"
           + _simulated_tag(incident), *header_lines(incident)]
    for part in sections(incident):
        title = part.title.upper() if part.key == "restart" else part.title
        out += ["", title]
        out += [_wrap(line, "- " if part.bullets else "  ") for line in part.lines]
        if part.table:
            out += ["  " + " | ".join(row) for row in part.table]
    return "\n".join(out)


def render_markdown(incident: Incident) -> str:
    """Return the report as Markdown (what "Copy report" gives)."""
    head = header_lines(incident)
    out = [f"## cudadiag incident `{incident.id}`", "", f"**{_md(head[0])}**", ""]
    out += [f"- {_md(line)}" for line in head[1:]]
    for part in sections(incident):
        out += ["", f"### {part.title}", ""]
        if part.key == "restart":
            out += [f"> {_md(line)}" for line in part.lines]
            continue
        out += [f"- {_md(line)}" if part.bullets else f"{_md(line)}  " for line in part.lines]
        if part.table:
            out += ["", "| " + " | ".join(part.table[0]) + " |",
                    "|" + "---|" * len(part.table[0])]
            out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in part.table[1:]]
    return "\n".join(out) + "\n"


def render_html(incident: Incident) -> str:
    """Return the report as one self-contained HTML block (the static fallback of the panel:
    nbconvert, GitHub, a reopened notebook)."""
    head = header_lines(incident)
    out = [f'<div class="cudadiag-report" data-incident="{escape(incident.id)}">',
           f'<div class="cd-header"><b>{escape(head[0])}</b>']
    out += [f"<div>{escape(line)}</div>" for line in head[1:]]
    out.append("</div>")
    out += [section_html(part) for part in sections(incident)]
    out.append("</div>")
    return "\n".join(out)


def section_html(part: Section) -> str:
    """Return one section as HTML (the panel shows each in its own tab)."""
    if part.key == "restart":
        body = "".join(f"<div>{escape(line)}</div>" for line in part.lines)
        return (f'<div class="cd-restart" style="{_BANNER_STYLE}"><b>{escape(part.title)}'
                f"</b>{body}</div>")
    if part.bullets:
        body = "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in part.lines) + "</ul>"
    else:
        body = "".join(f"<div>{escape(line)}</div>" for line in part.lines)
    if part.table:
        header = "".join(f"<th>{escape(c)}</th>" for c in part.table[0])
        rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                       for row in part.table[1:])
        body += (f'<table class="cd-batch-table"><thead><tr>{header}</tr></thead>'
                 f"<tbody>{rows}</tbody></table>")
    inner = f'<section class="cd-{part.key}"><h4>{escape(part.title)}</h4>{body}</section>'
    if part.collapsed:
        return f"<details><summary>{escape(part.title)}</summary>{inner}</details>"
    return inner


def _batch_section(incident: Incident) -> Section:
    lines, flags = [], []
    if incident.step:
        s = incident.step
        lines.append(f"step {s.iteration}, last completed step {s.last_completed}"
                     + (f" ({s.loader})" if s.loader else ""))
        if s.last_incomplete:
            flags.append("last incomplete batch")
        if s.is_last:
            flags.append("the loader's last step")
    batch = incident.batch or {}
    rows = []
    valid = incident.diagnosis.details.get("valid_range")
    for t in batch.get("tensors", []):
        rows.append(_tensor_row(t))
        flags += _tensor_flags(t, valid)
    if batch.get("indices") is not None:
        lines.append(f"dataset indices {batch['indices'][:32]}")
    if batch.get("lengths"):
        lines.append(f"sequence lengths {batch['lengths']}")
    lines += [batch[k] for k in ("note", "replayed") if batch.get(k)]
    if flags:
        lines.insert(0, "flags: " + "; ".join(flags))
    if batch.get("structure"):
        lines.append(f"structure {batch['structure']}")
    table = [list(_TENSOR_COLUMNS), *rows] if rows else None
    return Section("batch", "Batch", lines, table=table)


_TENSOR_COLUMNS = ("path", "shape", "dtype", "device", "stride", "min", "max", "negatives",
                   "distinct", "NaN", "Inf")


def _tensor_row(t: dict[str, Any]) -> list[str]:
    def value(key: str) -> str:
        v = t.get(key)
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    if t.get("values_skipped"):
        values = [t["values_skipped"], "", "", "", "", ""]
    else:
        values = [value(k) for k in ("min", "max", "negatives", "distinct", "nan", "inf")]
    return [t["path"], str(t["shape"]), t["dtype"], t["device"], str(t["stride"]), *values]


def _tensor_flags(t: dict[str, Any], valid: list[int] | None) -> list[str]:
    flags = []
    if t.get("nan") or t.get("inf"):
        flags.append(f"{t['path']}: NaN {t.get('nan') or 0}, Inf {t.get('inf') or 0}")
    low, high = valid if valid else (None, None)
    if valid and t.get("max") is not None and t.get("dtype", "").startswith(("int", "uint")):
        if t["max"] >= high or t["min"] < low:
            flags.append(f"{t['path']}: values {t['min']}..{t['max']} outside "
                         f"[{low}, {high})")
    return flags


def _env_lines(incident: Incident) -> list[str]:
    env = incident.env
    lines = [f"python {env.python}, torch {env.torch}, cuda {env.cuda}, hip {env.hip}, "
             f"cudnn {env.cudnn}, backend {env.backend}",
             f"device {env.device_name}, capability {env.capability}"
             + (f", in the build's arch list: {env.device_in_arch_list}"
                if env.device_in_arch_list is not None else ""),
             f"code revision {env.code_revision}" + (" (dirty)" if env.code_dirty else "")]
    if env.extensions:
        lines.append("extensions: " + ", ".join(f"{k} {v}" for k, v in env.extensions.items()))
    return lines


_BANNER_STYLE = ("border: 2px solid #c62828; background: #ffebee; color: #b71c1c; "
                 "padding: 6px 10px; margin: 6px 0; border-radius: 4px")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def render_isolated(result: Any, plan_text: str) -> str:
    """Return the short text shown after an isolated run (an IsolatedResult)."""
    settings = f"{result.settings.note}; {result.wall_s:.1f} s"
    incident = result.incident
    if incident is None:
        lines = [result.message or "cudadiag: the isolated run did not reproduce the error"]
        return "\n".join([*lines, f"  {plan_text}", f"  settings: {settings}"])
    d = incident.diagnosis
    lines = [f"cudadiag isolated run [{incident.id}]: {d.family} — {d.summary}"
             + _simulated_tag(incident)]
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        lines.append(f"  operator: {incident.op.name}({args})")
    if incident.error.reported_at:
        lines.append(f"  raised at {frame_text(incident.error.reported_at)}")
    if incident.op and incident.op.precheck:
        lines.append(f"  precheck: {incident.op.precheck}")
    elif incident.op:
        lines.append("  precheck: no index contract violated before the kernel ran")
    if incident.run.signal:
        lines.append(f"  the child died by {incident.run.signal}")
    lines += [f"  {plan_text}", f"  settings: {settings}",
              "  (diagnosis only: the kernel's variables, devices and RNG are untouched)"]
    return "\n".join(lines)


def render_export(minimized: Any, exported: Any) -> str:
    """Return the text shown after an export: the verdict, what was kept, the cost."""
    verdict = {True: "yes", False: "no", None: "not checked"}[exported.reproduces]
    kept = ", ".join(f"In[{n}]" for n in minimized.cells)
    kind = "script" if str(exported.path).endswith(".py") else "notebook"
    lines = [
        f"\ncudadiag repro {kind}: {exported.path}",
        f"  reproduces: {verdict}" + (f" (observed: {exported.observed.get('ename')}, "
                                      f"{exported.observed.get('family')})"
                                      if exported.observed else ""),
        f"  kept {len(minimized.cells)} of {minimized.original_cells} cells ({kept}), "
        f"{minimized.statements} of {minimized.original_statements} statements",
        f"  signature: {minimized.signature.family}, {minimized.signature.error_type}"
        + (f", {minimized.signature.op}" if minimized.signature.op else "")
        + (f", value {minimized.signature.value}" if minimized.signature.value is not None
           else ""),
        f"  {minimized.trials} trials in {minimized.wall_s:.1f} s"
        + (f"; stopped early ({minimized.stopped}): the best candidate so far was kept"
           if minimized.stopped else ""),
    ]
    if getattr(minimized, "loop", None):
        lines.append(f"  loop cut to {minimized.loop.description}")
    if exported.side_files:
        folder = exported.path.parent
        names = {f.relative_to(folder).parts[0] for f in exported.side_files}
        lines.append(f"  beside it: {', '.join(sorted(names))}")
    return "\n".join(lines)


def render_table(incidents: Iterable[Incident]) -> str:
    """Return one line per incident: id, time, family, where, summary."""
    rows = [f"{'id':12}  {'time':25}  {'family':19}  {'where':10}  summary"]
    for i in incidents:
        where = f"In[{i.run.cells[0]}]" if i.run.cells else i.run.mode
        rows.append(f"{i.id:12}  {i.created_at:25}  {i.diagnosis.family:19}  {where:10}  "
                    f"{_clip(i.diagnosis.summary, 90)}{_simulated_tag(i)}")
    return "\n".join(rows) if len(rows) > 1 else "no incidents recorded"


def _wrap(text: str, bullet: str = "  ") -> str:
    return textwrap.fill(text, width=100, initial_indent=bullet,
                         subsequent_indent=" " * len(bullet))


def frame_text(frame: Frame) -> str:
    """Return `In[N], line L in f: source` (or `file:line ...`) for a frame."""
    source = f": {frame.source}" if frame.source else ""
    return f"{frame.location()} in {frame.function}{source}"


def arg_text(arg: Any) -> str:
    """Return `target=int64[3]@cuda:0 values 0..4` for an operator argument."""
    if arg.shape is not None:
        text = f"{arg.name}={arg.dtype.replace('torch.', '')}{list(arg.shape)}@{arg.device}"
        if arg.contiguous is False:
            text += f" stride={arg.stride}"
        return text + (f" values {arg.value}" if arg.value else "")
    return f"{arg.name}={arg.value}"


def _cell_label(incident: Incident) -> str:
    return f"In[{incident.run.cells[0]}]" if incident.run.cells else "the failing call"


def _simulated_tag(incident: Incident) -> str:
    return " [simulated]" if incident.run.simulated else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
