"""The report: Markdown ready for an issue tracker (operator, shapes, dtype, backend,
versions, the first relevant message, not the cascade, the code), all of it scrubbed
(redact.py). The one report renderer: the panel's "Report to copy", `%cudadiag report`,
`cudadiag report` and the exported notebook's header all use it."""

from __future__ import annotations

from cudadiag.i18n import _, localize
from cudadiag.incident import Incident, StepInfo, TensorSummary
from cudadiag.privacy.redact import Redactor, without_addresses
from cudadiag.ui.render import arg_text, environment_lines, frame_text, loop_code, value_text

MESSAGE_LINES = 12


def render_report(incident: Incident, redactor: Redactor | None = None) -> str:
    """Return the scrubbed Markdown report of `incident` (its code blocks still parse), in
    the current language: its sentences and labels translated, its facts (the error's own
    lines, names, shapes, versions, code) as they are."""
    scrub = redactor or Redactor()
    versions = without_addresses(scrub)
    d = incident.diagnosis
    out = [f"## {d.family}: {scrub(localize(d.summary))}", ""]
    if incident.run.simulated:
        out += [_("_Recorded on cudadiag's simulated CUDA device (CPU tensors)._"), ""]
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        call = f"{scrub(incident.op.name)}({scrub(args)})"
        out += [_("**Operator:** `{call}`").format(call=call)]
        if incident.op.precheck:
            out += [_("**Precheck:** {precheck}").format(
                precheck=scrub(localize(incident.op.precheck)))]
        out.append("")
    out += [_("**First relevant message** (later errors are its consequences):"), "",
            "```text", scrub(_first_message(incident)), "```", ""]
    if incident.error.reported_at:
        out += [_("**Reported at:** {frame}").format(
            frame=scrub(frame_text(incident.error.reported_at))), ""]
    statement = loop_code(incident)
    if statement:
        out += [_("**Failing statement and its loops:**"), "", "```python",
                scrub("\n".join(statement)), "```", ""]
    if incident.step:
        out += [_step_line(incident.step), ""]
    if incident.batch and incident.batch.tensors:
        out += [_("**Batch:**"), ""] + [_tensor_line(t) for t in incident.batch.tensors] + [""]
    compat = incident.env.compat if incident.env else []
    out += [_("**Environment:**"), ""] + [f"- {versions(line)}" for line in [
        *environment_lines(incident.env),
        *(_("compatibility check {status}: {name}: {reason}").format(
            status=c.status, name=c.name, reason=localize(c.reason)) for c in compat
          if c.status in ("fail", "warn"))]]
    out += ["", _run_line(incident, scrub), ""]
    code = _code(incident, scrub)
    if code:
        title = _("**Minimized code:**") if incident.repro else _("**Code that ran:**")
        out += [title, "", "```python", code, "```", ""]
    return "\n".join(out)


def _step_line(step: StepInfo) -> str:
    """The step in flight and the last one completed."""
    if step.last_incomplete:
        return _("**Step:** {step} (last completed {completed}); last incomplete batch"
                 ).format(step=step.iteration, completed=step.last_completed)
    return _("**Step:** {step} (last completed {completed})").format(
        step=step.iteration, completed=step.last_completed)


def _tensor_line(t: TensorSummary) -> str:
    """One tensor of the batch: its path, dtype, shape, device, stride and value range."""
    if t.min is not None:
        return _("- `{path}`: {dtype} {shape} on {device}, stride {stride}, values "
                 "{low}..{high}").format(path=t.path, dtype=t.dtype, shape=t.shape,
                                         device=t.device, stride=t.stride,
                                         low=value_text(t.min), high=value_text(t.max))
    return _("- `{path}`: {dtype} {shape} on {device}, stride {stride}").format(
        path=t.path, dtype=t.dtype, shape=t.shape, device=t.device, stride=t.stride)


def _run_line(incident: Incident, scrub: Redactor) -> str:
    """How the failing program ran: its mode, whether launches were blocking, its command."""
    run = incident.run
    if run.command:
        template = (_("**Run:** {mode}, blocking launches on, {command}") if run.blocking
                    else _("**Run:** {mode}, blocking launches off, {command}"))
        return template.format(mode=run.mode, command=scrub(" ".join(run.command)))
    template = (_("**Run:** {mode}, blocking launches on") if run.blocking
                else _("**Run:** {mode}, blocking launches off"))
    return template.format(mode=run.mode)


def _first_message(incident: Incident) -> str:
    """The device's lines, then the exception as Python printed it (type: message)."""
    error = incident.error
    lines = error.text.strip().splitlines()[:MESSAGE_LINES] or [error.message]
    if not error.type.startswith("ProcessDied") and error.message in lines:
        at = lines.index(error.message)
        lines[at] = f"{error.type}: {error.message}"
    return "\n".join(lines)


def _code(incident: Incident, scrub: Redactor) -> str:
    cells = (incident.repro.cells if incident.repro else None) or incident.run.sources
    return "\n\n".join(f"# In[{n}]\n{scrub.code(source)}" for n, source in
                       sorted(cells.items(), key=lambda kv: int(kv[0])))
