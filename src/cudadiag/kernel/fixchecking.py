"""`%cuda_compare --before ID [N]`: the recorded failing case of incident ID, old code against
the current version of the failing cell (guide point 9)."""

from __future__ import annotations

import difflib
from typing import Any

from IPython.core.error import UsageError

from cudadiag.errors import IncidentNotFound
from cudadiag.incident import Incident
from cudadiag.isolate.compare import Program
from cudadiag.isolate.fixcheck import check_fix
from cudadiag.kernel.compare_magics import plan_program, print_row
from cudadiag.kernel.magics import capture_for, cell_history
from cudadiag.store import IncidentStore
from cudadiag.ui import results
from cudadiag.ui.fixcheck import FixCheckView, viewable

SIMILAR_ENOUGH = 0.5
"""How alike (difflib ratio) a cell must be to the failing one to be taken as its new
version when no cell is named."""


def check_in_shell(shell: Any, incident_id: str, cell: int | str | None, *,
                   timeout: float | None = None) -> FixCheckView:
    """Run the fix check of incident `incident_id` in `shell`: `cell` is the new version (a
    number, the source of a cell magic's body, or None: the newest cell most like the failing
    one). Returns the check (it displays itself). Raises UsageError when the incident or its
    recorded case cannot be found, KeyboardInterrupt when interrupted."""
    store = capture_for(shell).store
    try:
        incident = store.get(incident_id)
    except IncidentNotFound as exc:
        raise UsageError(str(exc)) from None
    recorded = _recorded(incident, store, shell)
    history = cell_history(shell)
    if isinstance(cell, str):
        target = max(history, default=0) + 1
        history[target] = cell
    else:
        target = cell if cell is not None else _new_version(history, recorded.code)
    after = plan_program(shell, history, target)
    old_states = (recorded.rng_states or {}).get(recorded.target)
    if old_states is not None:  # the new cell starts where the failing one started
        after.rng_states = {**(after.rng_states or {}), target: old_states}
    step = None
    if (incident.step is not None and incident.step.loader
            and incident.step.iteration is not None):
        step = (incident.step.loader, incident.step.iteration)
    print(f"fix check of incident {incident.id}: In[{recorded.target}] as recorded, then "
          f"In[{target}] as it is now" + (f", step {step[1]} only" if step else ""), flush=True)
    try:
        check = check_fix(incident.id, recorded, after, step=step, timeout=timeout,
                          progress=lambda label, row: print_row(row, label))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot run isolated: {exc}") from None
    results.remember(shell, check)
    return viewable(check)


def _recorded(incident: Incident, store: IncidentStore, shell: Any) -> Program:
    """The failing case as recorded: an isolated incident's cells, RNG states, batch and
    shipped values; for a kernel incident, the isolated re-run of its cell when there is one,
    else its cell planned from this kernel's history."""
    from cudadiag.repro.export import stored_inputs

    if incident.run.mode == "kernel":
        rerun = _isolated_rerun(incident, store)
        if rerun is None:
            return _from_this_kernel(incident, shell)
        print(f"using incident {rerun.id}, the isolated re-run of In[{incident.run.cells[0]}] "
              "(its cells, RNG states and batch were kept)")
        incident = rerun
    try:
        inputs = stored_inputs(incident, store)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    target = incident.run.cells[-1]
    return Program(code=inputs.cells[target], target=target,
                   cells=[(n, s) for n, s in inputs.cells.items() if n != target],
                   rng_states=inputs.rng_states, batch=inputs.batch, ship=inputs.ship)


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


def _from_this_kernel(incident: Incident, shell: Any) -> Program:
    history = cell_history(shell)
    cell = incident.run.cells[0] if incident.run.cells else None
    if cell is None or history.get(cell) != incident.run.sources.get(str(cell)):
        raise UsageError(
            f"incident {incident.id} was recorded in a kernel whose cells are gone, and no "
            "isolated re-run of it was kept: after the next failure, run %cuda_isolate "
            "before restarting, then use that incident's id with --before")
    return plan_program(shell, history, cell)


def _new_version(history: dict[int, str], old: str) -> int:
    """The newest cell most like the failing one (its current version)."""
    scored = [(difflib.SequenceMatcher(None, old, source).ratio(), number)
              for number, source in history.items()
              if not source.lstrip().startswith(("%", "!"))]
    alike = [(ratio, number) for ratio, number in scored if ratio >= SIMILAR_ENOUGH]
    if not alike:
        raise UsageError("no cell of this kernel looks like the failing one: name the cell "
                         "holding its new version, e.g. %cuda_compare --before ID 7")
    best = max(ratio for ratio, _ in alike)
    return max(number for ratio, number in alike if ratio >= best - 0.05)
