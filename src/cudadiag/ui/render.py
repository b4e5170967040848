"""Plain-text renderings of incidents (what `%cudadiag show` and the CLI print).

No widget import here: this module must work in a terminal and in static views.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
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
    if incident.error.reported_at:
        lines.append(f"  reported at {_frame_text(incident.error.reported_at)}")
        if d.asynchronous:
            lines.append("  (an observation point, not necessarily the cause: CUDA reports "
                         "kernel errors asynchronously)")
    if d.first_checks:
        lines.append(f"  check first: {d.first_checks[0]}")
    if d.sticky:
        lines.append("  " + restart_reminder(incident))
    lines.append(f"  details: %cudadiag show {incident.id}")
    return "\n".join(lines)


def render_text(incident: Incident) -> str:
    """Return the full plain-text report of one incident."""
    d, e = incident.diagnosis, incident.error
    out = [
        f"Incident {incident.id} — {incident.created_at} — {incident.run.mode} run"
        + _simulated_tag(incident),
        f"{d.family}: {d.summary}",
    ]
    if d.sticky:
        out += ["", "RESTART REQUIRED", _wrap(restart_reminder(incident)),
                _wrap(RESTART_FRONTENDS)]
    out += ["", "First error", f"  {e.type}: {e.message}"]
    if e.reported_at:
        out.append(f"  reported at {_frame_text(e.reported_at)}")
        if d.asynchronous:
            out.append("  this line is an observation point, not necessarily the cause: "
                       "re-run isolated with blocking launches to find the operator")
    if d.evidence and not d.evidence.endswith(e.message):
        out.append(f"  first message: {d.evidence}")
    out += _section("Details", [f"{k}: {v}" for k, v in d.details.items()])
    if incident.op:
        args = ", ".join(_arg_text(a) for a in incident.op.args)
        out += _section("Operator", [f"{incident.op.name}({args})"]
                        + ([incident.op.precheck] if incident.op.precheck else []))
    if incident.step:
        s = incident.step
        out += _section("Step", [f"iteration {s.iteration}, last completed {s.last_completed}"
                                 + (", last incomplete batch" if s.last_incomplete else "")
                                 + (", the loader's last step" if s.is_last else "")
                                 + (f" ({s.loader})" if s.loader else "")])
    if incident.batch:
        out += _section("Batch", _batch_lines(incident.batch))
    out += _section("Check first", d.first_checks, bullet="- ")
    out += _section("Do not conclude", d.avoid, bullet="- ")
    out += _section("Traceback (user frames)", [_frame_text(f) for f in e.traceback if f.user])
    if incident.env:
        env = incident.env
        out += _section("Environment", [
            f"python {env.python}, torch {env.torch}, cuda {env.cuda}, hip {env.hip}, "
            f"backend {env.backend}",
            f"device {env.device_name}, capability {env.capability}",
            f"code revision {env.code_revision}" + (" (dirty)" if env.code_dirty else ""),
        ] + ([f"extensions: {env.extensions}"] if env.extensions else []))
    if e.later:
        out += _section(
            f"Later errors ({len(e.later)}, probable consequences of the first)",
            [f"In[{x.cell}] {x.type}: {x.message}" + ("" if x.probable_consequence else
                                                       " (unrelated)") for x in e.later],
        )
    return "\n".join(out)


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
        args = ", ".join(_arg_text(a) for a in incident.op.args)
        lines.append(f"  operator: {incident.op.name}({args})")
    if incident.error.reported_at:
        lines.append(f"  raised at {_frame_text(incident.error.reported_at)}")
    if incident.op and incident.op.precheck:
        lines.append(f"  precheck: {incident.op.precheck}")
    elif incident.op:
        lines.append("  precheck: no index contract violated before the kernel ran")
    if incident.run.signal:
        lines.append(f"  the child died by {incident.run.signal}")
    lines += [f"  {plan_text}", f"  settings: {settings}",
              "  (diagnosis only: the kernel's variables, devices and RNG are untouched)"]
    return "\n".join(lines)


def render_table(incidents: Iterable[Incident]) -> str:
    """Return one line per incident: id, time, family, where, summary."""
    rows = [f"{'id':12}  {'time':25}  {'family':19}  {'where':10}  summary"]
    for i in incidents:
        where = f"In[{i.run.cells[0]}]" if i.run.cells else i.run.mode
        rows.append(f"{i.id:12}  {i.created_at:25}  {i.diagnosis.family:19}  {where:10}  "
                    f"{_clip(i.diagnosis.summary, 90)}{_simulated_tag(i)}")
    return "\n".join(rows) if len(rows) > 1 else "no incidents recorded"


def _batch_lines(batch: dict[str, Any]) -> list[str]:
    lines = [f"structure {batch.get('structure')}"]
    if batch.get("indices") is not None:
        lines.append(f"dataset indices {batch['indices'][:32]}")
    for t in batch.get("tensors", []):
        values = ""
        if t.get("min") is not None:
            values = f" min {t['min']} max {t['max']}"
        if t.get("nan"):
            values += f" NaN {t['nan']}"
        if t.get("inf"):
            values += f" Inf {t['inf']}"
        if t.get("values_skipped"):
            values = f" ({t['values_skipped']})"
        lines.append(f"{t['path']}: {t['dtype']}{t['shape']} on {t['device']}{values}")
    if batch.get("lengths"):
        lines.append(f"sequence lengths {batch['lengths']}")
    for key in ("note", "replayed"):
        if batch.get(key):
            lines.append(batch[key])
    return lines


def _section(title: str, lines: list[str], bullet: str = "  ") -> list[str]:
    if not lines:
        return []
    return ["", title, *(_wrap(line, bullet) for line in lines)]


def _wrap(text: str, bullet: str = "  ") -> str:
    return textwrap.fill(text, width=100, initial_indent=bullet,
                         subsequent_indent=" " * len(bullet))


def _frame_text(frame: Frame) -> str:
    source = f": {frame.source}" if frame.source else ""
    return f"{frame.location()} in {frame.function}{source}"


def _arg_text(arg: Any) -> str:
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
