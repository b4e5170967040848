"""The child side of `%cudadiag validate` and of the fix check: only the chosen steps of a
watch() run, and what happened in each is recorded.

- The watch() named in the options yields only the chosen steps (still numbered as in the
  full loop; the loader reads the others, the loop body does not see them) and stops after
  the last one; with no choice it yields every step.
- A step is *completed* when the loop body asks for the next one.
- A trace of the notebook cells' frames (`<cudadiag In[N]>`, functions defined in cells
  included) sees every exception raised or passing through them; the ones that never reach
  the worker are the exceptions user code caught and swallowed. A swallowed GuardError names
  the rejected samples: its positions are rows of the batch, mapped to dataset indices.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

PROGRESS_FILE = "progress"
PROGRESS_EVERY_S = 0.2
_IGNORED = (GeneratorExit, StopIteration, StopAsyncIteration)


@dataclass
class _Step:
    """One step the loop body was given."""

    run: int
    """Which run of the watch() (a loop over epochs runs it again): 0, 1, ..."""
    step: int
    size: int | None
    indices: list[int] | None
    completed: bool = False


@dataclass
class _State:
    watch: str | None
    steps: set[int] | None
    folder: Path
    seen: list[_Step] = field(default_factory=list)
    runs: dict[int, int] = field(default_factory=dict)
    """id(WatchRecord) -> its run number."""
    current: _Step | None = None
    raised: dict[int, tuple[BaseException, int | None, int, _Step | None]] = \
        field(default_factory=dict)
    escaped: set[int] = field(default_factory=set)
    tracing: bool = False
    last_progress: float = 0.0


_state: list[_State] = []


def setup(options: dict[str, Any]) -> None:
    """Choose the steps (before any cell runs): `options["steps"]` (a list, or None for all)
    of the watch named `options["watch"]` (None: every watch)."""
    from cudadiag.step_hooks import add_step_hook

    steps = options.get("steps")
    _state.append(_State(options.get("watch"), None if steps is None else set(steps),
                         Path(options["dir"])))
    add_step_hook(_select)


def start() -> None:
    """Start tracing exceptions in notebook cells (right before the validated cell)."""
    from cudadiag.isolate import worker

    state = _state[-1]
    # by name and file: the worker runs as __main__, a second copy of its module
    runner = (worker._run_cell.__code__.co_name, worker._run_cell.__code__.co_filename)

    def local_cell(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception" and not isinstance(arg[1], _IGNORED):
            exc = arg[1]
            if id(exc) not in state.raised:
                state.raised[id(exc)] = (exc, worker.cell_of(frame.f_code.co_filename),
                                         frame.f_lineno, state.current)
        return local_cell

    def local_runner(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception":
            state.escaped.add(id(arg[1]))
        return local_runner

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        if (frame.f_code.co_name, frame.f_code.co_filename) == runner:
            return local_runner
        if worker.cell_of(frame.f_code.co_filename) is None:
            return None
        frame.f_trace_lines = False
        return local_cell

    state.tracing = True
    sys.settrace(calls)


def finish(info: dict[str, Any]) -> None:
    """Stop tracing; add what the steps saw to the run's info (`info["validation"]`)."""
    sys.settrace(None)
    state = _state[-1]
    _progress(state, final=True)
    excluded = set(state.escaped)
    for exc_id in state.escaped:
        exc = state.raised.get(exc_id, (None,))[0]
        while exc is not None:  # an exception converted into the one that escaped
            excluded.add(id(exc))
            exc = exc.__cause__ or exc.__context__
    swallowed = [entry for exc_id, entry in state.raised.items() if exc_id not in excluded]
    info["validation"] = {
        "watch": state.watch,
        "steps": [asdict(s) for s in state.seen],
        "swallowed": _grouped(swallowed),
        "rejected": [r for entry in swallowed for r in _rejected(entry)],
    }


def _select(record: Any, item: Any, done: bool) -> str:
    from cudadiag.step_hooks import SKIP, STOP, YIELD

    state = _state[-1]
    if state.watch is not None and record.name != state.watch:
        return YIELD
    if done:
        if state.current is not None:
            state.current.completed = True
        _progress(state)
        return YIELD
    if state.steps is not None and record.step not in state.steps:
        return STOP if record.step > max(state.steps, default=-1) else SKIP
    run = state.runs.setdefault(id(record), len(state.runs))
    state.current = _Step(run, record.step, record.current_size, record.current_indices)
    state.seen.append(state.current)
    return YIELD


def _progress(state: _State, final: bool = False) -> None:
    now = time.monotonic()
    if final or now - state.last_progress >= PROGRESS_EVERY_S:
        state.last_progress = now
        done = sum(s.completed for s in state.seen)
        (state.folder / PROGRESS_FILE).write_text(str(done))


def _grouped(swallowed: list[tuple[BaseException, int | None, int, _Step | None]]
             ) -> list[dict[str, Any]]:
    """Swallowed exceptions grouped by type, place and step, with a count."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for exc, cell, line, step in swallowed:
        key = (type(exc).__name__, cell, line, step.run if step else None,
               step.step if step else None)
        if key not in groups:
            groups[key] = {"type": type(exc).__name__,
                           "message": (str(exc).strip().splitlines() or [""])[0][:300],
                           "cell": cell, "line": line, "count": 0,
                           "run": key[3], "step": key[4]}
        groups[key]["count"] += 1
    return list(groups.values())


def _rejected(entry: tuple[BaseException, int | None, int, _Step | None]
              ) -> list[dict[str, Any]]:
    """The samples a swallowed GuardError named: batch rows and dataset indices."""
    from cudadiag.errors import GuardError

    exc, _cell, _line, step = entry
    if not isinstance(exc, GuardError):
        return []
    firsts = {p[0] if isinstance(p, (tuple, list)) and p else p for p in exc.positions
              if isinstance(p, (int, tuple, list))}
    rows = sorted(r for r in firsts if isinstance(r, int))
    indices = step.indices if step is not None else None
    dataset = [indices[r] for r in rows if indices is not None and 0 <= r < len(indices)]
    return [{"run": step.run if step else None, "step": step.step if step else None,
             "argument": exc.argument, "rule": exc.rule, "values": exc.values[:10],
             "rows": rows, "dataset_indices": dataset or None}]
