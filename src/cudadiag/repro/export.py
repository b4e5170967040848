"""The export flow: minimize the failing program, write the repro notebook, verify it in a
fresh kernel, record the verdict with the incident."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudadiag.incident import Incident
from cudadiag.kernel.store import IncidentStore
from cudadiag.own_work import outside_user_modes
from cudadiag.repro.minimize import MinimizeResult, Progress, minimize
from cudadiag.repro.notebook import ExportResult, export_notebook


@dataclass
class ReproInputs:
    """What a repro starts from: the planned cells, their RNG states, the recorded batch."""

    cells: dict[int, str]
    rng_states: dict[int, dict[str, Any]] | None = None
    batch: tuple[int, Any] | None = None


def export_repro(incident: Incident, path: str | Path, inputs: ReproInputs, *,
                 max_trials: int = 200, timeout: float | None = None,
                 progress: Progress | None = None, verify: bool = True,
                 store: IncidentStore | None = None) -> tuple[MinimizeResult, ExportResult]:
    """Minimize, export and verify; the incident's `repro` records the outcome in the log.

    Raises MinimizeError when the program does not fail like the incident, ValueError for a
    bad path.
    """
    minimized = minimize(inputs.cells, expected_family=incident.diagnosis.family,
                         rng_states=inputs.rng_states, batch=inputs.batch,
                         max_trials=max_trials, timeout=timeout, progress=progress)
    exported = export_notebook(incident, path, minimized.cells,
                               signature=minimized.signature, batch=inputs.batch,
                               rng_states=inputs.rng_states, verify=verify)
    incident.repro = {
        "cells": {str(n): source for n, source in minimized.cells.items()},
        "notebook": str(exported.path),
        "reproduces": exported.reproduces,
        "observed": exported.observed,
        "signature": minimized.signature.to_dict(),
        "trials": minimized.trials,
        "stopped": minimized.stopped,
    }
    (store or IncidentStore()).append(incident)
    return minimized, exported


def stored_inputs(incident: Incident, store: IncidentStore | None = None) -> ReproInputs:
    """The inputs an isolated incident left in the log: its cells, and the RNG states and
    batch kept beside it. Raises ValueError when the incident has no cells to replay."""
    import torch

    if not incident.run.sources:
        raise ValueError(
            f"incident {incident.id} ({incident.run.mode} run) has no cells to replay; in the "
            "notebook, run %cuda_isolate on its cell, then export that isolated incident")
    folder = (store or IncidentStore()).run_files(incident.id)
    rng_file, batch_file = folder / "rng.pt", folder / "batch.pt"
    with outside_user_modes():  # cudadiag's own files, not the user's (simulated) device
        rng = torch.load(rng_file, weights_only=False) if rng_file.exists() else None
        batch = None
        if batch_file.exists() and incident.run.batch_replay is not None:
            batch = (incident.run.batch_replay, torch.load(batch_file, weights_only=False))
    cells = {int(n): source for n, source in sorted(incident.run.sources.items(),
                                                     key=lambda kv: int(kv[0]))}
    return ReproInputs(cells=cells, rng_states=rng, batch=batch)
