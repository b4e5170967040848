"""The report: Markdown ready for an issue tracker (operator, shapes, dtype, backend,
versions, the first relevant message, not the cascade, the code), all of it scrubbed
(redact.py). The one report renderer: the panel's "Report to copy", `%cudadiag report`,
`cudadiag report` and the exported notebook's header all use it."""

from __future__ import annotations

from cudadiag.incident import Incident
from cudadiag.privacy.redact import Redactor, without_addresses
from cudadiag.ui.render import arg_text, environment_lines, frame_text, loop_code, value_text

MESSAGE_LINES = 12


def render_report(incident: Incident, redactor: Redactor | None = None) -> str:
    """Return the scrubbed Markdown report of `incident` (its code blocks still parse)."""
    scrub = redactor or Redactor()
    versions = without_addresses(scrub)
    d = incident.diagnosis
    out = [f"## {d.family}: {scrub(d.summary)}", ""]
    if incident.run.simulated:
        out += ["_Recorded on cudadiag's simulated CUDA device (CPU tensors)._", ""]
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        out += [f"**Operator:** `{scrub(incident.op.name)}({scrub(args)})`"]
        if incident.op.precheck:
            out += [f"**Precheck:** {scrub(incident.op.precheck)}"]
        out.append("")
    out += ["**First relevant message** (later errors are its consequences):", "", "```text",
            scrub(_first_message(incident)), "```", ""]
    if incident.error.reported_at:
        out += [f"**Reported at:** {scrub(frame_text(incident.error.reported_at))}", ""]
    statement = loop_code(incident)
    if statement:
        out += ["**Failing statement and its loops:**", "", "```python",
                scrub("\n".join(statement)), "```", ""]
    if incident.step:
        s = incident.step
        out += [f"**Step:** {s.iteration} (last completed {s.last_completed})"
                + ("; last incomplete batch" if s.last_incomplete else ""), ""]
    if incident.batch and incident.batch.tensors:
        out += ["**Batch:**", ""] + [
            f"- `{t.path}`: {t.dtype} {t.shape} on {t.device}, stride {t.stride}"
            + (f", values {value_text(t.min)}..{value_text(t.max)}" if t.min is not None
               else "")
            for t in incident.batch.tensors] + [""]
    compat = incident.env.compat if incident.env else []
    out += ["**Environment:**", ""] + [f"- {versions(line)}" for line in [
        *environment_lines(incident.env),
        *(f"compatibility check {c.status}: {c.name}: {c.reason}" for c in compat
          if c.status in ("fail", "warn"))]]
    out += ["", f"**Run:** {incident.run.mode}, blocking launches "
            f"{'on' if incident.run.blocking else 'off'}"
            + (f", {scrub(' '.join(incident.run.command))}" if incident.run.command else ""),
            ""]
    code = _code(incident, scrub)
    if code:
        title = "Minimized code" if incident.repro else "Code that ran"
        out += [f"**{title}:**", "", "```python", code, "```", ""]
    return "\n".join(out)


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
