"""`%cuda_compare --before ID [N]`: the recorded failing case of incident ID, old code against
the current version of the failing cell (method point 9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from cudadiag.capture.shell_state import capture_for, cell_history
from cudadiag.comparison.magic import check_plans, plan_program, print_row
from cudadiag.comparison.run import Program
from cudadiag.errors import IncidentNotFound, PlanError
from cudadiag.fixcheck.run import FIX_CHECK_RUN, check_fix
from cudadiag.fixcheck.view import FixCheckView, fixcheck_section
from cudadiag.i18n import _
from cudadiag.incident import Incident
from cudadiag.isolate.plan import newest_version, recorded_plan
from cudadiag.log.store import IncidentStore
from cudadiag.ui import results
from cudadiag.ui.displayed import as_view

if TYPE_CHECKING:
    from cudadiag.isolate.plan import Plan


def check_in_shell(shell: Any, incident_id: str, cell: int | str | None, *,
                   timeout: float | None = None,
                   allow_side_effects: bool = False) -> FixCheckView:
    """Run the fix check of incident `incident_id` in `shell`: `cell` is the new version (a
    number, the source of a cell magic's body, or None: the newest cell most like the failing
    one). Both plans are printed first, their side effects named. Returns the check (it
    displays itself). Raises UsageError when the incident or its recorded case cannot be
    found, or when the two runs would repeat side effects without `allow_side_effects`;
    KeyboardInterrupt when interrupted."""
    store = capture_for(shell).store
    try:
        incident = store.get(incident_id)
    except IncidentNotFound as exc:
        raise UsageError(str(exc)) from None
    recorded, old_plan = _recorded(incident, store, shell, allow_side_effects)
    history = cell_history(shell)
    if isinstance(cell, str):
        target = max(history, default=0) + 1
        history[target] = cell
    else:
        target = cell if cell is not None else _new_version(history, recorded.code)
    after, new_plan = plan_program(shell, history, target, rerun=FIX_CHECK_RUN,
                                   allow_side_effects=allow_side_effects)
    old_states = (recorded.rng_states or {}).get(recorded.target)
    if old_states is not None:  # the new cell starts where the failing one started
        after.rng_states = {**(after.rng_states or {}), target: old_states}
    step = None
    if (incident.step is not None and incident.step.loader
            and incident.step.iteration is not None):
        step = (incident.step.loader, incident.step.iteration)
    fields = {"id": incident.id, "old": recorded.target, "new": target}
    print((_("fix check of incident {id}: In[{old}] as recorded, then In[{new}] as it is now, "
             "step {step} only").format(step=step[1], **fields) if step else
           _("fix check of incident {id}: In[{old}] as recorded, then In[{new}] as it is "
             "now").format(**fields)), flush=True)
    check_plans([(_("old code: "), old_plan), (_("new code: "), new_plan)])
    try:
        check = check_fix(incident.id, recorded, after, step=step, timeout=timeout,
                          progress=lambda label, row: print_row(row, label))
    except (OSError, ValueError) as exc:
        raise UsageError(_("cannot run isolated: {error}").format(error=exc)) from None
    results.remember(shell, "Fix check", ("incident", check.incident), fixcheck_section(check))
    return as_view(FixCheckView, check)


def _recorded(incident: Incident, store: IncidentStore, shell: Any,
              allow_side_effects: bool) -> tuple[Program, Plan]:
    """The failing case as recorded, and its plan: an isolated incident's cells, RNG states,
    batch and shipped values; for a kernel incident, the isolated re-run of its cell when
    there is one, else its cell planned from this kernel's history."""
    from cudadiag.repro.export import stored_inputs

    if incident.run.mode == "kernel":
        rerun = _isolated_rerun(incident, store)
        if rerun is None:
            return _from_this_kernel(incident, shell, allow_side_effects)
        print(_("using incident {id}, the isolated re-run of In[{cell}] (its cells, RNG "
                "states and batch were kept)").format(id=rerun.id, cell=incident.run.cells[0]))
        incident = rerun
    try:
        inputs = stored_inputs(incident, store)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    target = incident.run.cells[-1]
    try:
        plan = recorded_plan(inputs.cells, target, inputs.shipped,
                             allow_side_effects=allow_side_effects, rerun=FIX_CHECK_RUN)
    except PlanError as exc:
        raise UsageError(_("incident {id}: {error}").format(id=incident.id, error=exc)) from None
    program = Program(code=inputs.cells[target], target=target,
                      cells=[(n, s) for n, s in inputs.cells.items() if n != target],
                      rng_states=inputs.rng_states, batch=inputs.batch, ship=inputs.ship)
    return program, plan
def _isolated_rerun(incident: Incident, store: IncidentStore) -> Incident | None:
    cell = str(incident.run.cells[0]) if incident.run.cells else None
    source = incident.run.sources.get(cell) if cell else None
    isolated = [e for e in store.entries() if e.mode == "isolated" and not e.newer]
    for entry in reversed(isolated):
        other = store.read(entry)
        if (other.run.cells and str(other.run.cells[-1]) == cell
                and other.run.sources.get(cell) == source):
            return other
    return None


def _from_this_kernel(incident: Incident, shell: Any,
                      allow_side_effects: bool) -> tuple[Program, Plan]:
    history = cell_history(shell)
    cell = incident.run.cells[0] if incident.run.cells else None
    if cell is None or history.get(cell) != incident.run.sources.get(str(cell)):
        raise UsageError(_(
            "incident {id} was recorded in a kernel whose cells are gone, and no isolated "
            "re-run of it was kept: after the next failure, run %cuda_isolate before "
            "restarting, then use that incident's id with --before").format(id=incident.id))
    return plan_program(shell, history, cell, rerun=FIX_CHECK_RUN,
                        allow_side_effects=allow_side_effects)


def _new_version(history: dict[int, str], old: str) -> int:
    """The newest cell most like the failing one (its current version)."""
    found = newest_version(history, old)
    if found is None:
        raise UsageError(_("no cell of this kernel looks like the failing one: name the "
                           "cell holding its new version, e.g. %cuda_compare --before ID 7"))
    return found
