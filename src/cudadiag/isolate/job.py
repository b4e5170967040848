"""The job of an isolated run: what the runner (parent) asks the worker (child) to do, and the
files of its run folder.

The runner fills a Job and writes it (`job.json`, with the values, RNG states and batch it
needs beside it); the worker reads it, runs it and writes its JobResult (`result.json`). The
store keeps the RNG states and the batch of a run that failed under the same names beside its
incident, so an export can replay that run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag.own_work import outside_user_modes

if TYPE_CHECKING:
    from cudadiag.incident import Incident

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
SHIP_FILE = "ship.pkl"
"""The values shipped from the kernel, cloudpickled."""
RNG_FILE = "rng.pt"
"""The RNG states each cell started from in the kernel, by cell number (torch.save)."""
BATCH_FILE = "batch.pt"
"""The one batch a watch() replays (torch.save)."""
LAUNCH_FILE = "launch.json"
"""For a run forked from a fork server: how its child becomes the run (a Launch)."""


@dataclass
class JobCell:
    """A cell to run: its execution count in the kernel and its source."""

    number: int
    source: str


@dataclass
class ScriptTarget:
    """A script (or, with `module`, a module run as `python -m`) and its arguments."""

    target: str
    argv: list[str] = field(default_factory=list)
    module: bool = False

    def command(self) -> list[str]:
        """The command line as the incident records it: `[-m] target args...`."""
        return (["-m"] if self.module else []) + [self.target, *self.argv]


@dataclass
class Job:
    """One isolated run. The cells run in order, the last one is the suspect; a script runs
    before them (a `cudadiag run` job has no cells)."""

    folder: Path
    cells: list[JobCell]
    blocking: bool = True
    trace: bool = True
    precheck: bool = True
    env_vars: dict[str, str] = field(default_factory=dict)
    ship: Path | None = None
    """Pickled values loaded into the namespace first: the folder's SHIP_FILE, or the file a
    stored incident kept."""
    rng: bool = False
    """The folder holds RNG_FILE."""
    batch_step: int | None = None
    """The folder holds BATCH_FILE, the batch of this step."""
    batch_indices: list[int] | None = None
    """The dataset indices of that batch, when its loader's sampler gave them."""
    batch_full_size: int | None = None
    """The size of its loader's first batch (a smaller one is the last incomplete batch)."""
    script: ScriptTarget | None = None
    ranks: str | None = None
    """A multi-process run: the folder where each rank writes its record (isolate/rankfiles)
    instead of the one result file."""
    spawn: bool = False
    """The ranks are the processes the cells start with torch.multiprocessing
    (isolate/spawn.py); the child itself is no rank and writes the result file."""

    @property
    def path(self) -> Path:
        """The job file."""
        return self.folder / JOB_FILE

    @property
    def result_path(self) -> Path:
        """Where the worker writes its JobResult."""
        return self.folder / RESULT_FILE

    @property
    def rng_path(self) -> Path | None:
        """The RNG states file, when the job has one."""
        return self.folder / RNG_FILE if self.rng else None

    @property
    def batch_path(self) -> Path | None:
        """The replayed batch's file, when the job has one."""
        return self.folder / BATCH_FILE if self.batch_step is not None else None

    def ship_values(self, values: dict[str, Any]) -> None:
        """Pickle `values` into the folder for the worker (cloudpickle: functions and
        classes defined in the notebook travel too)."""
        import cloudpickle

        self.ship = self.folder / SHIP_FILE
        with open(self.ship, "wb") as f:
            cloudpickle.dump(values, f)

    def save_rng_states(self, states: dict[int, dict[str, Any]]) -> None:
        """Save the RNG states of the job's cells (those in `states`) for the worker."""
        wanted = {c.number: states[c.number] for c in self.cells if c.number in states}
        if wanted:
            _torch_save(wanted, self.folder / RNG_FILE)
            self.rng = True

    def save_batch(self, step: int, batch: Any, indices: list[int] | None = None,
                   full_size: int | None = None) -> None:
        """Save the batch the worker's first watch() yields, as step `step`, with its
        dataset `indices` and its loader's first batch size, when known."""
        _torch_save(batch, self.folder / BATCH_FILE)
        self.batch_step, self.batch_indices, self.batch_full_size = step, indices, full_size

    def write(self) -> None:
        """Write the job file."""
        data = asdict(self)
        data["folder"] = str(self.folder)
        data["ship"] = str(self.ship) if self.ship is not None else None
        self.path.write_text(json.dumps(data))

    @classmethod
    def read(cls, path: Path) -> Job:
        """Read a job file written by `write`."""
        data = json.loads(path.read_text())
        script = data.pop("script")
        ship = data.pop("ship")
        return cls(**{**data, "folder": Path(data["folder"]),
                      "cells": [JobCell(**c) for c in data["cells"]],
                      "ship": Path(ship) if ship else None,
                      "script": ScriptTarget(**script) if script else None})

    def kept_files(self) -> list[Path]:
        """The files a stored incident keeps beside it: RNG states and the replayed batch."""
        return [p for p in (self.rng_path, self.batch_path) if p is not None]


@dataclass
class Launch:
    """How a child forked from a fork server becomes the run a new interpreter would have
    been: the run's environment and working directory, and the top-level modules the server
    must not import for it (their import initialised CUDA once)."""

    env: dict[str, str]
    cwd: str
    skip: list[str] = field(default_factory=list)

    def write(self, job_path: Path) -> None:
        """Write it beside the job file, private (0600: the environment may hold secrets)."""
        target = job_path.with_name(LAUNCH_FILE)
        with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(asdict(self), f)

    @classmethod
    def read(cls, job_path: Path) -> Launch:
        """Read the launch beside the job file; raises OSError, ValueError or TypeError for
        a missing or damaged one."""
        return cls(**json.loads(job_path.with_name(LAUNCH_FILE).read_text()))


@dataclass
class JobResult:
    """What the worker answers: the incident (None when nothing failed) and its exit code."""

    incident: Incident | None
    exit_code: int
    wall_s: float | None = None
    """The worker's own time, from reading the job to writing this result."""
    blocking_check: str = ""
    """Whether the run's blocking variables were in effect in the child (one line)."""

    def write(self, path: Path) -> None:
        """Write the result as JSON (values that JSON cannot hold as text)."""
        incident = self.incident.to_dict() if self.incident is not None else None
        path.write_text(json.dumps({"incident": incident, "exit_code": self.exit_code,
                                    "wall_s": self.wall_s,
                                    "blocking_check": self.blocking_check}, default=str))

    @classmethod
    def read(cls, path: Path) -> JobResult | None:
        """The result the worker wrote, or None when it wrote none (it died first)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        incident = data["incident"]
        return cls(_incident_from(incident) if incident else None, data["exit_code"],
                   data.get("wall_s"), data.get("blocking_check", ""))


def _torch_save(value: Any, path: Path) -> None:
    import torch

    with outside_user_modes():  # cudadiag's own file, not the user's (simulated) device
        torch.save(value, path)


def _incident_from(record: dict[str, Any]) -> Incident:
    """The incident a failed run's worker wrote (imported here: a clean run needs none)."""
    from cudadiag.incident import Incident

    return Incident.from_dict(record)
