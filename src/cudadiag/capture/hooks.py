"""Capture in the live kernel: `pre_run_cell` / `post_run_cell` callbacks.

The first error of the kernel is *the* incident. After a sticky error, later errors are its
probable consequences and are appended to it; every later cell is preceded by a one-line
warning. Nothing here touches the user's variables, devices or RNG streams (reading an RNG
state does not advance it).
"""

from __future__ import annotations

import atexit
import contextlib
import random
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from cudadiag import probes
from cudadiag.capture.fdtail import DeviceMessageTail
from cudadiag.capture.folded_traceback import TracebackHandler
from cudadiag.classification import classify
from cudadiag.diagnose import (
    incident_from_exception,
    is_diagnosable,
    is_simulated,
    later_error,
)
from cudadiag.errors import IncidentNotSaved
from cudadiag.incident import ErrorInfo, Incident, RunInfo, qualified_type_name
from cudadiag.log.store import IncidentStore
from cudadiag.spawn_report import read_spawn_report

RNG_CELLS_KEPT = 256
STATE_ATTRIBUTE = "_cudadiag_kernel_state"
OWN_COMMANDS = ("%cuda_isolate", "%cuda_compare", "%%cuda_compare", "%cudadiag",
                "%%blocking_launch")
"""cudadiag's magics: a cell that starts with one gets no restart reminder."""
DIAGNOSED = "_cudadiag_diagnosed"
"""Set on an error the traceback handler filed before its traceback: post_run_cell leaves
it alone."""


@dataclass
class KernelState:
    """What the extension knows of one kernel session. It lives on the shell, not in the
    extension: `%reload_ext cudadiag` or `%unload_ext` + `%load_ext` leave the CUDA context
    as unusable as it was, and the cells' RNG states as they were."""

    session: int
    """The shell's history session: a new one numbers its cells from 1 again."""
    current: Incident | None = None
    """The kernel's incident that decides what later errors are (the first one, or the
    latest after a non-sticky error)."""
    rng_states: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)
    """The RNG states each cell started from, by execution count, the latest last."""
    failed: set[int] = field(default_factory=set)
    """The cells whose code raised an exception (an interrupt does not count): a replay
    never re-runs them (isolate/plan.py)."""


def kernel_state(shell: Any) -> KernelState:
    """Return the state kept on `shell` for its current history session: a new, empty one
    when there is none yet or when the shell started a new session (`reset(new_session=True)`),
    whose cell numbers are not those the old state refers to. Raises nothing."""
    session = getattr(getattr(shell, "history_manager", None), "session_number", 0)
    kept = getattr(shell, STATE_ATTRIBUTE, None)
    # compared by field, not by class: a state made before `importlib.reload` of this module
    # is still this kernel's
    if getattr(kept, "session", None) == session:
        return cast(KernelState, kept)
    state = KernelState(session)
    setattr(shell, STATE_ATTRIBUTE, state)
    return state


class Announcer(Protocol):
    """How the kernel's incidents are shown (ui/announce.py: the panel, the short text)."""

    def incident(self, incident: Incident, saved: bool) -> None:
        """Show a new incident (`saved`: it is in the log, so it can be opened by id)."""

    def poisoned(self, incident: Incident) -> None:
        """Remind, before a cell runs, that `incident` made the CUDA context unusable."""


class KernelCapture:
    """The extension's state in one IPython shell."""

    def __init__(self, shell: Any, store: IncidentStore, announcer: Announcer) -> None:
        self.shell = shell
        self.store = store
        self.announcer = announcer
        self._rng_at_start: dict[str, Any] | None = None
        self._device_lines_cell: int | None = None
        """The first cell that ended without error while the device printed its own lines
        (an error caught by the cell's try/except): the cell the next incident names."""
        self.device_tail = DeviceMessageTail()
        self.tracebacks = TracebackHandler(shell, self.diagnose_before_traceback)

    def register(self) -> None:
        """Register the cell callbacks on the shell, the traceback handler that shows the
        diagnosis before the traceback, and watch the shell's output for device lines."""
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        if hasattr(self.shell, "set_custom_exc"):
            self.tracebacks.install()
        self.device_tail.attach(1, 2)
        atexit.register(self.device_tail.detach)  # forward what is still in the pipe

    def unregister(self) -> None:
        """Remove the cell callbacks (IPython cannot unregister magics; they stay)."""
        self.device_tail.detach()
        atexit.unregister(self.device_tail.detach)
        self.tracebacks.uninstall()
        for event, callback in (("pre_run_cell", self.pre_run_cell),
                                ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(event, callback)
            except ValueError:
                pass

    @property
    def current(self) -> Incident | None:
        """The kernel's incident that decides what later errors are (the first one, or the
        latest after a non-sticky error); kept on the shell (KernelState)."""
        return kernel_state(self.shell).current

    @current.setter
    def current(self, incident: Incident | None) -> None:
        kernel_state(self.shell).current = incident

    @property
    def rng_states(self) -> OrderedDict[int, dict[str, Any]]:
        """The RNG states each cell started from, by execution count; kept on the shell."""
        return kernel_state(self.shell).rng_states

    @property
    def failed_cells(self) -> set[int]:
        """The cells of this session whose code raised an exception; kept on the shell."""
        return kernel_state(self.shell).failed

    @property
    def cell_running(self) -> bool:
        """True between a cell's pre_run_cell and post_run_cell."""
        return self._rng_at_start is not None

    @property
    def poisoned_by(self) -> Incident | None:
        """The sticky incident that made this kernel's CUDA context unusable, if any."""
        return self.current if self.current and self.current.diagnosis.sticky else None

    def pre_run_cell(self, info: Any = None, **_: Any) -> None:
        """Record the RNG states this cell starts from; warn when the context is poisoned,
        unless the cell is one of cudadiag's own commands (they run in fresh processes or
        read the log: the reminder would only land in the middle of their output)."""
        self._rng_at_start = self._read_rng_states()
        probes.new_cell()
        raw = str(getattr(info, "raw_cell", "") or "").lstrip()
        if self.poisoned_by is not None and not raw.startswith(OWN_COMMANDS):
            self.announcer.poisoned(self.poisoned_by)

    def post_run_cell(self, result: Any = None, **_: Any) -> None:
        """Turn the cell's error, if any, into an incident or a later error of one."""
        # The execution count is known for sure only here (IPython 9 increments it before
        # pre_run_cell, IPython 8 after).
        count = getattr(result, "execution_count", None)
        if self._rng_at_start is not None and count is not None:
            self.rng_states[count] = self._rng_at_start
            while len(self.rng_states) > RNG_CELLS_KEPT:
                self.rng_states.popitem(last=False)
        self._rng_at_start = None
        exc = getattr(result, "error_in_exec", None)
        if isinstance(exc, Exception) and count is not None:
            self.failed_cells.add(count)
        if exc is not None and not getattr(exc, DIAGNOSED, False):
            self.capture(exc, cell=count)
        else:
            self._note_device_lines(count)

    def diagnose_before_traceback(self, exc: BaseException) -> bool:
        """File `exc`, raised by the running cell, before IPython shows its traceback (the
        traceback handler calls this). Returns True when it showed a new incident for it, or
        filed it as a probable consequence of the incident that made the CUDA context
        unusable (the cell's reminder said so), so that its traceback can be folded."""
        with contextlib.suppress(AttributeError):
            setattr(exc, DIAGNOSED, True)
        before = self.poisoned_by
        incident = self.capture(exc, cell=_running_cell(self.shell))
        if incident is None:
            return False
        if incident is not before:
            return True
        return bool(incident.error.later) and incident.error.later[-1].probable_consequence

    def _note_device_lines(self, cell: int | None) -> None:
        """Remember `cell`, which ended without error, as the one the device printed its
        lines during, unless an earlier cell is remembered or the context is already known
        to be unusable."""
        if self._device_lines_cell is not None or cell is None or self.poisoned_by:
            return
        self.device_tail.settle()
        if self.device_tail.scanner.lines:
            self._device_lines_cell = cell

    def capture(self, exc: BaseException, cell: int | None,
                ingested_late: bool = False) -> Incident | None:
        """Record `exc` raised by cell `cell`. Returns the incident it was filed under, or
        None for an error unrelated to PyTorch (a NameError, a KeyError...) and for one
        that cudadiag itself raised after recording it (a failed `%%blocking_launch`)."""
        if getattr(exc, "cudadiag_reported", False):
            return None
        with contextlib.suppress(AttributeError):
            exc._cudadiag_seen = True  # type: ignore[attr-defined]
        diagnosis = classify(exc)
        report = read_spawn_report(exc)
        # a spawned child that died without a traceback may have printed why, just before
        exited_child = report is not None and report.ended == "exited"
        device_lines = self.device_tail.take(
            wait_for_lines=diagnosis.asynchronous or exited_child)
        if device_lines:
            diagnosis = classify(exc, context=device_lines)
        relevant = is_diagnosable(qualified_type_name(exc), diagnosis.family,
                                  is_simulated(exc))
        poisoned = self.poisoned_by
        if poisoned is not None:
            poisoned.error.later.append(later_error(exc, cell, family=diagnosis.family,
                                                    probable_consequence=relevant))
            self._save(poisoned)
            return poisoned
        if not relevant:
            return None
        if cell is None:
            cell = self._raising_cell(exc)
        elif self._device_lines_cell is not None:
            # the device failed during that cell, whose code caught the error it raised
            cell = self._device_lines_cell
        self._device_lines_cell = None
        source = self._cell_source(cell) if cell is not None else None
        # no violation here: a real device tells the kernel, not the values (the simulator's
        # knowledge of them stays out of the kernel's incident)
        incident = incident_from_exception(
            exc, RunInfo(mode="kernel", cells=[cell] if cell is not None else [],
                         ingested_late=ingested_late,
                         sources={str(cell): source} if source else {}),
            diagnosis=diagnosis, locate_cell=self._locate_cell, cell_source=self._cell_source,
            device_lines=device_lines)
        self.current = incident
        saved = self._save(incident)
        self.announcer.incident(incident, saved)
        return incident

    def ingest_last_error(self) -> Incident | None:
        """Capture the error that failed the last cell before the extension was loaded."""
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if exc is None or getattr(exc, "_cudadiag_seen", False):
            return None
        return self.capture(exc, cell=None, ingested_late=True)

    def rng_states_including_running(self, running: int) -> dict[int, dict[str, Any]]:
        """Return the recorded RNG states by cell, plus those of the cell now running (its
        post_run_cell has not filed them yet) under `running`."""
        states = dict(self.rng_states)
        if self._rng_at_start is not None and running not in states:
            states[running] = self._rng_at_start
        return states

    def rng_state_before(self, cell: int) -> dict[str, Any] | None:
        """Return the RNG states recorded at the start of cell `cell` (None if not kept)."""
        return self.rng_states.get(cell)

    def _save(self, incident: Incident) -> bool:
        """Write `incident` to the log; return False, after one line that says what failed
        and that the record waits in memory, when it could not be written."""
        try:
            self.store.append(incident)
        except IncidentNotSaved as exc:
            print(f"cudadiag: {exc}", file=sys.stderr)
            return False
        return True

    def _read_rng_states(self) -> dict[str, Any]:
        states: dict[str, Any] = {"random": random.getstate()}
        torch = sys.modules.get("torch")
        if torch is not None:
            states["torch"] = torch.get_rng_state()
            if self.poisoned_by is None and torch.cuda.is_initialized():
                try:
                    states["cuda"] = torch.cuda.get_rng_state_all()
                except RuntimeError:
                    pass  # the context broke since the last cell: the next error says so
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            states["numpy"] = numpy.random.get_state()
        return states

    def _raising_cell(self, exc: BaseException) -> int | None:
        """The cell that was running when `exc` was raised (an error ingested late): the
        outermost cell frame of its traceback, since deeper ones are cells that only defined
        the functions it called."""
        traceback = ErrorInfo.from_exception(exc, self._locate_cell).traceback
        return next((frame.cell for frame in traceback if frame.cell is not None), None)

    def _locate_cell(self, filename: str) -> int | None:
        filename_map = getattr(self.shell.compile, "_filename_map", {})
        return filename_map.get(filename)

    def _cell_source(self, cell: int) -> str | None:
        history = getattr(self.shell.history_manager, "input_hist_raw", None) or []
        return history[cell] if 0 <= cell < len(history) else None


def _running_cell(shell: Any) -> int | None:
    """The execution count of the cell running in `shell`: IPython 9 moves the count on
    before the cell runs, IPython 8 after."""
    import IPython

    count = getattr(shell, "execution_count", None)
    if not isinstance(count, int):
        return None
    return count - 1 if IPython.version_info[0] >= 9 else count
