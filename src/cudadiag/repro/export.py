"""The export flow: minimize the failing program, write the repro (a notebook or a script)
with its side files all at once, verify it in a fresh kernel or process, record the verdict
with the incident."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.errors import ExportError
from cudadiag.i18n import _
from cudadiag.incident import Incident, ReproInfo
from cudadiag.isolate.cellfacts import analyse_cell
from cudadiag.isolate.job import BATCH_FILE, RNG_FILE
from cudadiag.log.store import IncidentStore
from cudadiag.own_work import outside_user_modes
from cudadiag.repro.bundle import plan_bundle
from cudadiag.repro.document import Program, build_document
from cudadiag.repro.minimize import TRIAL_FACTOR, MinimizeResult, Progress, minimize
from cudadiag.repro.notebook import VERIFY_TIMEOUT_S, ExportResult, write_and_verify
from cudadiag.repro.options import DEFAULT_MAX_TRIALS, DEFAULT_TIMEOUT_S, SUFFIXES
from cudadiag.repro.rankjob import is_multi_rank, refusal
from cudadiag.repro.script import write_and_verify_script
from cudadiag.repro.staging import check_target

SCRIPT_CELL = 1
"""The cell number a script's source gets in the minimizer and the repro."""

__all__ = ["SUFFIXES", "ExportError", "ReproInputs", "check_target", "export_repro",
           "failed_cells", "stored_inputs"]


@dataclass
class ReproInputs:
    """What a repro starts from: the planned cells, their RNG states, the recorded batch,
    the values shipped from the kernel, the setup code and working directory."""

    cells: dict[int, str]
    rng_states: dict[int, dict[str, Any]] | None = None
    batch: tuple[int, Any] | None = None
    ship: Path | None = None
    """The pickled values the isolated run received (kept beside the incident)."""
    shipped: list[str] = field(default_factory=list)
    setup: str | None = None
    """Code run before the cells: a script's command line."""
    cwd: str | None = None
    failed_at: list[tuple[int, int]] = field(default_factory=list)
    """(cell, line) of the failure's frames in the program, outermost first."""
    environ: dict[str, str | None] = field(default_factory=dict)
    """The environment variables the program read, as its run had them (RunInfo.environ):
    every candidate runs with them."""


def export_repro(incident: Incident, path: str | Path, inputs: ReproInputs, *,
                 max_trials: int = DEFAULT_MAX_TRIALS, timeout: float | None = DEFAULT_TIMEOUT_S,
                 progress: Progress | None = None, verify: bool = True,
                 bundle: bool = False, store: IncidentStore | None = None
                 ) -> tuple[MinimizeResult, ExportResult]:
    """Minimize, write (`.ipynb` or `.py`, side files beside it; `bundle` copies the data
    files the program read) and verify; the incident's `repro` records the outcome in the
    log. cudadiag's own tensor work here never runs under the user's dispatch modes (the
    simulated device).

    Raises ExportError for a bad path (before minimizing) or when the repro cannot be
    written, MinimizeError when the program does not fail like the incident,
    MinimizeInterrupted on Ctrl-C before the full program's run ended.
    """
    path = Path(path)
    check_target(path, SUFFIXES)
    cwd = inputs.cwd or os.getcwd()
    with outside_user_modes():
        minimized = minimize(
            inputs.cells, expected_family=incident.diagnosis.family,
            rng_states=inputs.rng_states, batch=inputs.batch, ship=inputs.ship,
            provided=inputs.shipped, setup=inputs.setup, failed_at=inputs.failed_at, cwd=cwd,
            environ=inputs.environ, max_trials=max_trials, timeout=timeout,
            progress=progress)
        run = minimized.incident.run if minimized.incident else None
        files = run.files_read if run else []
        modules = run.local_modules if run else {}
        program = Program(
            cells=minimized.cells,
            rng_states={**(inputs.rng_states or {}), **minimized.loop_states},
            batch=inputs.batch,
            values=inputs.ship if _uses(minimized.cells, inputs.shipped) else None,
            setup=inputs.setup, cwd=cwd, files_read=files, local_modules=modules,
            environ=run.environ if run else inputs.environ,
            bundle=plan_bundle(files, cwd, path.stem, modules) if bundle else None,
            notes=minimized.notes())
        try:
            doc = build_document(incident, program, path.stem,
                                 signature=minimized.signature.to_dict())
        except OSError as exc:
            raise ExportError(_("could not read {file}: {reason}").format(
                file=exc.filename, reason=exc.strerror)) from None
        write = write_and_verify if path.suffix == ".ipynb" else write_and_verify_script
        # the check runs the whole repro: as long as the reference took, and then some
        exported = write(doc, path, minimized.signature, verify,
                         max(VERIFY_TIMEOUT_S, TRIAL_FACTOR * minimized.reference_s))
    incident.repro = ReproInfo(
        path=str(exported.path),
        cells={str(n): source for n, source in minimized.cells.items()},
        reproduces=exported.reproduces, observed=exported.observed,
        signature=minimized.signature, trials=minimized.trials, stopped=minimized.stopped,
        files_read=files, bundled=bundle)
    try:
        (store or IncidentStore()).append(incident)
    except OSError as exc:
        print(_("cudadiag: the repro was written, but its verdict could not be added to the "
                "incident log: {error}").format(error=exc), file=sys.stderr)
    return minimized, exported


def stored_inputs(incident: Incident, store: IncidentStore | None = None) -> ReproInputs:
    """The inputs an isolated or `cudadiag run` incident left in the log: its cells (or its
    script), and the RNG states, batch and shipped values kept beside it. Raises ExportError
    when the incident has nothing to replay, or its shipped values were not kept."""
    if is_multi_rank(incident):
        reason = refusal(incident)
        raise ExportError(
            _("incident {id} is a multi-rank job's: {reason}").format(id=incident.id,
                                                                      reason=reason)
            if reason else
            _("incident {id} is a multi-rank job's: export it as a job from a terminal: "
              "cudadiag export {id} repro.py").format(id=incident.id))
    if incident.run.mode == "cli":
        return _script_inputs(incident)
    if not incident.run.sources:
        raise ExportError(_(
            "incident {id} ({mode} run) has no cells to replay; in the notebook, run "
            "%cuda_isolate on its cell, then export that isolated incident").format(
                id=incident.id, mode=incident.run.mode))
    import torch

    store = store or IncidentStore()
    folder = store.run_files(incident.id)
    rng_file, batch_file = folder / RNG_FILE, folder / BATCH_FILE
    with outside_user_modes():  # cudadiag's own files, not the user's (simulated) device
        rng = torch.load(rng_file, weights_only=False) if rng_file.exists() else None
        batch = None
        if batch_file.exists() and incident.run.batch_replay is not None:
            batch = (incident.run.batch_replay, torch.load(batch_file, weights_only=False))
    ship = store.shipped_file(incident.id) if incident.run.shipped else None
    if incident.run.shipped and ship is None:
        names = ", ".join(incident.run.shipped)
        raise ExportError(_(
            "incident {id} received {names} from the kernel, and those values were not kept "
            "(too large, or dropped to make room); re-run %cuda_isolate with --ship none and "
            "export that incident").format(id=incident.id, names=names))
    cells = {int(n): source for n, source in sorted(incident.run.sources.items(),
                                                     key=lambda kv: int(kv[0]))}
    return ReproInputs(cells=cells, rng_states=rng, batch=batch, ship=ship,
                       shipped=list(incident.run.shipped), cwd=incident.run.cwd,
                       failed_at=failed_cells(incident), environ=dict(incident.run.environ))


def failed_cells(incident: Incident) -> list[tuple[int, int]]:
    """(cell, line) of the incident's traceback frames that are notebook cells, outermost
    first."""
    return [(f.cell, f.line) for f in incident.error.traceback if f.cell is not None]


def _script_inputs(incident: Incident) -> ReproInputs:
    command = incident.run.command
    if not command or command[0] == "-m":
        raise ExportError(_("incident {id} ran a module (python -m); only scripts can be "
                            "exported: run the module's file with cudadiag run").format(
            id=incident.id))
    cwd = incident.run.cwd or os.getcwd()
    script = os.path.join(cwd, command[0])
    try:
        source = Path(script).read_text()
    except OSError as exc:
        raise ExportError(_("incident {id}: cannot read its script {script}: {reason}").format(
            id=incident.id, script=script, reason=exc.strerror)) from None
    folder = os.path.dirname(command[0])
    setup = "\n".join([
        "# The script's command line, as `cudadiag run` ran it",
        "import os", "import sys", "",
        f"sys.argv = {command!r}",
        f"__file__ = os.path.abspath({command[0]!r})",
        f"sys.path.insert(0, os.path.abspath({folder!r}))  # the script's folder (imports)",
    ])
    real = os.path.realpath(script)
    failed_at = [(SCRIPT_CELL, f.line) for f in incident.error.traceback
                 if os.path.realpath(os.path.join(cwd, f.file)) == real]
    return ReproInputs(cells={SCRIPT_CELL: source}, setup=setup, cwd=cwd, failed_at=failed_at,
                       environ=dict(incident.run.environ))


def _uses(cells: dict[int, str], names: list[str]) -> bool:
    used: set[str] = set()
    for number, source in cells.items():
        used |= analyse_cell(number, source).uses
    return bool(used & set(names))

