"""What an isolated run prints when it ends: the verdict against the original failure, the
operator with its arguments, where it was raised, the precheck, the plan and the settings."""

from __future__ import annotations

from cudadiag.i18n import _, join_clauses, localize
from cudadiag.isolate.result import IsolatedResult
from cudadiag.ui.render import arg_text, frame_text, iteration_lines, one_line, simulated_tag


def render_isolated(result: IsolatedResult, plan_text: str, verdict: str | None = None) -> str:
    """Return the short text shown after an isolated run (an IsolatedResult); `verdict`, the
    comparison with the original failure, comes first when there is one."""
    settings = join_clauses(filter(None, [localize(result.settings.note),
                                          localize(result.start), f"{result.wall_s:.1f} s"]))
    settings_line = "  " + _("settings: {settings}").format(settings=settings)
    incident = result.incident
    first = [verdict] if verdict else []
    if incident is None:
        lines = first or [localize(result.message)]
        return "\n".join([*lines, f"  {plan_text}", settings_line])
    lines = [*first, _("cudadiag isolated run [{id}]: {summary}").format(
        id=incident.id, summary=one_line(incident)) + simulated_tag(incident)]
    if incident.op:
        args = ", ".join(arg_text(a) for a in incident.op.args)
        lines.append("  " + _("operator: {call}").format(call=f"{incident.op.name}({args})"))
    if incident.error.reported_at:
        lines.append("  " + _("raised at {frame}").format(
            frame=frame_text(incident.error.reported_at)))
    if incident.op and incident.op.precheck:
        lines.append("  " + _("precheck: {precheck}").format(
            precheck=localize(incident.op.precheck)))
    elif incident.op:
        lines.append("  " + _("precheck: no index contract violated before the kernel ran"))
    lines += [f"  {line}" for line in iteration_lines(incident)]
    if incident.diagnosis.first_checks:
        lines.append("  " + _("check first: {check}").format(
            check=localize(incident.diagnosis.first_checks[0])))
    lines += [f"  {plan_text}", settings_line,
              "  " + _("(diagnosis only: the kernel's variables, devices and RNG are "
                       "untouched)")]
    return "\n".join(lines)
