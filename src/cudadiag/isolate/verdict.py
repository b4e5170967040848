"""Did the isolated run reproduce the original failure? One line that says so, first.

The isolated run is only evidence about the original error when it fails the same way: same
family, same exception type, same operator when both know it. Its prechecks stop an
index-taking operator before the kernel runs and raise PrecheckError in place of the error
the kernel would have raised (a device assert on a GPU, an IndexError on the CPU), so for a
precheck the family alone decides.
"""

from __future__ import annotations

from cudadiag.i18n import _, localize
from cudadiag.incident import Incident
from cudadiag.isolate.eager import COMPILED_PATH_LINE
from cudadiag.knowledge import FAMILIES, PITFALLS


def same_failure(original: Incident, isolated: Incident, eager: bool = False) -> bool:
    """Return True when `isolated` fails the way `original` did (family, exception type
    unless a precheck stood in for it or the run was `eager`, running compiled code as
    eager operators that raise their own exceptions, operator when both know it)."""
    if isolated.diagnosis.family != original.diagnosis.family:
        return False
    prechecked = isolated.op is not None and isolated.op.precheck is not None
    if not (prechecked or eager) and isolated.error.type != original.error.type:
        return False
    ops = (original.op.name if original.op else None, isolated.op.name if isolated.op else None)
    return None in ops or ops[0] == ops[1]


def verdict_line(original: Incident, isolated: Incident | None, eager: bool = False) -> str:
    """Return the first line shown after an isolated run of the cell that failed as
    `original`: reproduced, failed differently, or did not fail at all — or, when the
    original fell into a pitfall or a family an isolated run avoids, what the run did
    instead. `eager`: the run had compilation disabled, so a run without error puts the
    fault in the compiled path."""
    instead = _what_the_isolated_run_does_instead(original)
    if instead is not None:
        if isolated is None:
            return _("cudadiag: {instead}: they finished without error").format(
                instead=localize(instead))
        return _("cudadiag: {instead}: {outcome}").format(instead=localize(instead),
                                                          outcome=failure_text(isolated))
    if isolated is None and eager:
        return _(COMPILED_PATH_LINE).format(original=failure_text(original))
    if isolated is None:
        return _("cudadiag: the error did not reproduce: the isolated run finished without "
                 "error (original: {original}) — check the plan with --dry-run, or choose "
                 "the cells to replay with --cells N,M,...").format(
            original=failure_text(original))
    if same_failure(original, isolated, eager):
        return _("cudadiag: reproduced: same failure ({family}) as {cell}").format(
            family=original.diagnosis.family, cell=_cell_run(original))
    return _("cudadiag: the isolated run failed differently: {isolated}; original: "
             "{original} — check the plan with --dry-run, or choose the cells to replay "
             "with --cells N,M,...").format(isolated=failure_text(isolated),
                                            original=failure_text(original))


def _what_the_isolated_run_does_instead(original: Incident) -> str | None:
    pitfall = PITFALLS.get(str(original.diagnosis.details.get("pitfall")))
    if pitfall is not None:
        return pitfall.isolated
    family = FAMILIES.get(original.diagnosis.family)
    return family.isolated if family is not None else None


def failure_text(incident: Incident) -> str:
    """Return `device_assert SimulatedAcceleratorError in aten::nll_loss_forward at In[5]:
    print(loss.item())`: the signature of a failure and where it was raised."""
    short_type = incident.error.type.rsplit(".", 1)[-1]
    frame = incident.error.reported_at
    source = f": {frame.source}" if frame is not None and frame.source else ""
    fields = {"family": incident.diagnosis.family, "type": short_type,
              "where": _where(incident)}
    if incident.op:
        return _("{family} {type} in {op} at {where}").format(op=incident.op.name,
                                                                **fields) + source
    return _("{family} {type} at {where}").format(**fields) + source


def _cell_run(incident: Incident) -> str:
    """The cell whose run failed (`In[4]`, that called `trainer.fit`): the outermost frame of
    a cell in the traceback, not the cell of the last one (`In[3]`, that defined the
    `training_step` a library called); where the error was reported when no frame has a
    cell."""
    cell = next((f.cell for f in incident.error.traceback if f.cell is not None), None)
    return f"In[{cell}]" if cell is not None else _where(incident)


def _where(incident: Incident) -> str:
    frame = incident.error.reported_at
    if frame is not None:
        return f"In[{frame.cell}]" if frame.cell is not None else frame.location()
    return f"In[{incident.run.cells[-1]}]" if incident.run.cells else _("an unknown line")
