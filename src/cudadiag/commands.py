"""The commands a user runs on the incident log, implemented once: `show`, `report`,
`export` and `explain` (`incidents`, with its filters, paging and retention, is listing.py's).

`cudadiag COMMAND` (cli.py) and `%cudadiag COMMAND` (kernel/magics.py) are adapters: they
parse their words into the typed options below, call these functions and print the text they
return. Every refusal is a CudadiagError whose message says what was wrong and what to do;
the command line prints it as `cudadiag COMMAND: message`, the magic raises it as a
UsageError, so the shell and the notebook say the same thing.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudadiag.errors import ExplainError
from cudadiag.explain.view import render_explanation
from cudadiag.i18n import N_, _
from cudadiag.incident import Incident
from cudadiag.log.store import IncidentStore
from cudadiag.repro.options import DEFAULT_MAX_TRIALS, DEFAULT_TIMEOUT_S, SUFFIXES
from cudadiag.ui.render import render_text

if TYPE_CHECKING:
    from cudadiag.explain import Explanation
    from cudadiag.repro.export import ReproInputs
    from cudadiag.repro.minimize import MinimizeResult, Progress
    from cudadiag.repro.notebook import ExportResult


@dataclass(frozen=True)
class ShowOptions:
    """`show [ID] [--json]`: the newest incident when no id is given."""

    incident: str | None = None
    as_json: bool = False


@dataclass(frozen=True)
class ExportOptions:
    """`export [ID] [PATH] [--max-trials N] [--timeout S] [--bundle] [--no-verify]`."""

    incident: str | None = None
    path: Path | None = None
    """The repro to write (default: `repro-ID.ipynb` in the working directory)."""
    max_trials: int = DEFAULT_MAX_TRIALS
    timeout: float = DEFAULT_TIMEOUT_S
    bundle: bool = False
    verify: bool = True


@dataclass(frozen=True)
class Explained:
    """What `explain` found, and where it read it."""

    explanation: Explanation
    source: str
    """The input as the user named it (a file, "standard input", "the text given")."""

    @property
    def found(self) -> bool:
        """True when the input holds an error (the command's exit status is 0 then)."""
        return self.explanation.first is not None

    def text(self, *, as_json: bool = False) -> str:
        """The diagnosis as the user reads it, or as JSON with `as_json`."""
        if as_json:
            return json.dumps(self.explanation.to_dict(), indent=2, default=str)
        return render_explanation(self.explanation, self.source)


def show(store: IncidentStore, options: ShowOptions) -> str:
    """Return one incident in full (as JSON with `as_json`). Raises IncidentNotFound."""
    incident = store.get(options.incident)
    return incident_json(incident) if options.as_json else render_text(incident)


def incident_json(incident: Incident) -> str:
    """The incident as JSON, every field kept, secret values masked as on the screen (those
    of the environment that recorded it were masked in the log already)."""
    from cudadiag.privacy.redact import Redactor

    return json.dumps(Redactor().secrets_masked_in(incident.to_dict()), indent=2)


def report(store: IncidentStore, incident_id: str | None) -> str:
    """Return the scrubbed Markdown report of an incident (the newest when `incident_id` is
    None), ready for an issue tracker. Raises IncidentNotFound."""
    from cudadiag.repro.report import render_report

    return render_report(store.get(incident_id))


def explain_file(path: str | Path) -> Explained:
    """Explain the log in file `path` (a .gz file is decompressed). Raises ExplainError when
    it cannot be read."""
    from cudadiag.explain import explain_path

    return Explained(explain_path(path), str(path))


def explain_argument(argument: str) -> Explained:
    """Explain what `%cudadiag explain ARGUMENT` names: the log file of that name when there
    is one, else the pasted text it is. Raises ExplainError when the file cannot be read,
    and when the argument looks like a path (`looks_like_a_path`) but names nothing: a
    mistyped file name is not a log to explain."""
    path = os.path.expanduser(argument)
    if os.path.exists(path) or looks_like_a_path(argument):
        return explain_file(path)
    return explain_pasted(argument)


_FILE_SUFFIX = re.compile(r".\.[a-z0-9]{1,5}$")
"""A file name's ending: `job.log`, `slurm-1234.out`, `run.log.gz`, `train.py`."""


def looks_like_a_path(text: str) -> bool:
    """Return True for one word that reads as a file's path: with a folder separator, a
    leading `~` or `.`, or a short lowercase suffix (`slurm-1234.out`). Pasted error text has
    spaces, or reads as a name (`torch.OutOfMemoryError`, `CUBLAS_STATUS_NOT_SUPPORTED`)."""
    word = text.strip()
    if not word or any(c.isspace() for c in word):
        return False
    return ("/" in word or "\\" in word or word.startswith(("~", "."))
            or _FILE_SUFFIX.search(word) is not None)


def explain_standard_input() -> Explained:
    """Explain the log piped or pasted into standard input. Raises ExplainError when it
    cannot be read."""
    from cudadiag.explain import explain_stream

    try:
        return Explained(explain_stream(sys.stdin.buffer), _("standard input"))
    except OSError as exc:
        raise ExplainError(_("standard input cannot be read: {error}").format(
            error=exc)) from None


def explain_pasted(text: str, source: str | None = None) -> Explained:
    """Explain `text`, a log pasted or a traceback at hand (`source`: where it comes from,
    default "the text given"). Never raises for odd input."""
    from cudadiag.explain import explain_text

    return Explained(explain_text(text), _("the text given") if source is None else source)


def export_target(store: IncidentStore, options: ExportOptions) -> tuple[Incident, Path]:
    """Return the incident to export and the repro's path. The path is checked before the
    log is read (a typo costs nothing), and again once the default name is known.

    Raises ExportError for a path that cannot be written (its suffix, its folder),
    IncidentNotFound for an id that names no incident."""
    from cudadiag.repro.staging import check_target

    if options.path is not None:
        check_target(options.path, SUFFIXES)
    incident = store.get(options.incident)
    path = options.path or Path(f"repro-{incident.id}.ipynb")
    check_target(path, SUFFIXES)
    return incident, path


def export_intro(incident: Incident, inputs: ReproInputs, timeout: float) -> str:
    """The line printed when a minimization starts."""
    return _("minimizing incident {id} ({cells} cell(s)), each candidate in a fresh process "
             "(at most {timeout:g} s; Ctrl-C keeps the best so far)...").format(
        id=incident.id, cells=len(inputs.cells), timeout=timeout)


def export(store: IncidentStore, incident: Incident, path: Path, inputs: ReproInputs,
           options: ExportOptions, progress: Progress | None = None
           ) -> tuple[MinimizeResult, ExportResult]:
    """Minimize `incident` from `inputs`, write the repro at `path`, verify it (unless
    `options.verify` is False) and record the verdict in the log.

    Raises MinimizeError when the program does not fail as the incident says
    (MinimizeInterrupted: Ctrl-C before the full program's run ended), ExportError when the
    repro cannot be made or written, KeyboardInterrupt while it is written."""
    from cudadiag.repro.export import export_repro

    return export_repro(incident, path, inputs, max_trials=options.max_trials,
                        timeout=options.timeout, verify=options.verify,
                        bundle=options.bundle, store=store, progress=progress)


STOPPED_EARLY = N_("stopped early: interrupted before the full program's run finished; "
                   "nothing was written")
"""What an export says when Ctrl-C came before there was anything to keep (in English:
shown with `_`)."""


class Budget:
    """How much of an export's budget (trials, seconds) is used."""

    def __init__(self, max_trials: int, timeout: float) -> None:
        self.max_trials = max_trials
        self.timeout = timeout
        self.started = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the export started."""
        return time.monotonic() - self.started

    def percent_used(self, trials: int) -> int:
        """The share of the trial or the time budget used, whichever is larger (0..100)."""
        used = max(trials / self.max_trials, self.elapsed() / self.timeout)
        return min(int(100 * used), 100)


_PHASES = {"cells": N_("cells"), "statements": N_("statements")}
"""The unit of a minimization's phase (repro/minimize.py), as the progress line names it."""


def progress_line(max_trials: int, timeout: float) -> Progress:
    """Return a progress callback that rewrites one terminal line: trials, best size, time
    used."""
    budget = Budget(max_trials, timeout)

    def line(trials: int, size: int, phase: str) -> None:
        sys.stdout.write("\r  " + _("trial {trials}/{most}, best {size} {phase}, {elapsed:.0f} "
                                   "of {timeout:g} s").format(
            trials=trials, most=max_trials, size=size, phase=_(_PHASES.get(phase, phase)),
            elapsed=budget.elapsed(), timeout=timeout) + "   ")
        sys.stdout.flush()

    return line
