"""Shrink a failing program without losing the trigger (guide point 8).

Delta debugging (ddmin, halving granularity, as PyTorch's FX minifier) first over the cells,
then over the top-level statements of what is left. Every candidate runs in a fresh process
(forked from a pre-started interpreter: milliseconds, not seconds) with the same RNG states
and recorded batch. A candidate still fails only when its signature matches the original:
family, exception type and, when known, the failing operator; failing differently is not
failing.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cudadiag.incident import Incident
from cudadiag.isolate.launcher import ForkServerLauncher, Launcher
from cudadiag.isolate.runner import run_isolated

Progress = Callable[[int, int, str], None]
"""progress(trials so far, size of the best candidate, phase)"""


class MinimizeError(RuntimeError):
    """The program to minimize does not fail the way the incident says."""


@dataclass(frozen=True)
class Signature:
    """What makes two failures the same failure."""

    family: str
    error_type: str
    op: str | None = None

    @classmethod
    def of(cls, incident: Incident) -> Signature:
        """The signature of an incident."""
        return cls(incident.diagnosis.family, incident.error.type,
                   incident.op.name if incident.op else None)

    def matches(self, incident: Incident | None) -> bool:
        """True when `incident` fails the same way (an op is compared only when known)."""
        if incident is None:
            return False
        other = Signature.of(incident)
        return (other.family == self.family and other.error_type == self.error_type
                and (self.op is None or other.op == self.op))

    def to_dict(self) -> dict[str, Any]:
        """The signature as JSON-ready data."""
        return {"family": self.family, "error_type": self.error_type, "op": self.op}


@dataclass
class MinimizeResult:
    """The smallest failing program found, and how it was found."""

    cells: dict[int, str]
    signature: Signature
    trials: int
    wall_s: float
    original_cells: int
    original_statements: int
    statements: int
    stopped: str | None = None
    """Why the search ended early: `interrupted`, `max trials` or `timeout`."""
    history: list[tuple[int, int]] = field(default_factory=list)
    """(trial, size of the best candidate) each time the best improved."""


class _Budget(Exception):
    """Raised inside the search when a trial may not be run."""


class _Search:
    def __init__(self, runner: Callable[[dict[int, str]], Incident | str | None],
                 signature: Signature | None, max_trials: int, deadline: float | None,
                 progress: Progress | None) -> None:
        self.runner = runner
        self.signature = signature
        self.max_trials = max_trials
        self.deadline = deadline
        self.progress = progress
        self.trials = 0
        self.stopped: str | None = None
        self.cache: dict[tuple[Any, ...], bool] = {}
        self.history: list[tuple[int, int]] = []
        self.best_size = 0

    def fails(self, program: dict[int, str], key: tuple[Any, ...], phase: str) -> bool:
        if key in self.cache:
            return self.cache[key]
        if self.stopped:
            raise _Budget
        if self.trials >= self.max_trials:
            self.stopped = "max trials"
            raise _Budget
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.stopped = "timeout"
            raise _Budget
        self.trials += 1
        outcome = self.runner(program)
        if outcome == "interrupted":
            self.stopped = "interrupted"
            raise _Budget
        result = self.signature.matches(outcome) if self.signature else outcome is not None
        self.cache[key] = result
        if self.progress:
            self.progress(self.trials, len(key) if result else self.best_size, phase)
        return result

    def ddmin(self, units: list[Any], build: Callable[[list[Any]], dict[int, str]],
              phase: str) -> list[Any]:
        """Zeller's ddmin: the smallest subsequence of `units` that still fails (1-minimal
        when the budget allows); keeps the best found when the budget runs out."""
        best = list(units)
        self.best_size = len(best)
        granularity = 2
        try:
            while len(best) >= 2:
                chunks = _split(best, granularity)
                reduced = False
                # complements first: the planned cells are mostly needed, so removing a chunk
                # succeeds far more often than keeping only one
                for candidate in [*(_without(best, c) for c in chunks), *chunks]:
                    if candidate and self.fails(build(candidate), _key(candidate), phase):
                        best = candidate
                        self.best_size = len(best)
                        self.history.append((self.trials, len(best)))
                        granularity = max(granularity - 1, 2)
                        reduced = True
                        break
                if not reduced:
                    if granularity >= len(best):
                        break
                    granularity = min(len(best), granularity * 2)
        except _Budget:
            pass
        except KeyboardInterrupt:  # between trials (a trial's own Ctrl-C is caught by it)
            self.stopped = "interrupted"
        return best


def minimize(
    cells: dict[int, str],
    *,
    expected_family: str | None = None,
    rng_states: dict[int, dict[str, Any]] | None = None,
    batch: tuple[int, Any] | None = None,
    env: dict[str, str] | None = None,
    max_trials: int = 200,
    timeout: float | None = None,
    trial_timeout: float = 120.0,
    progress: Progress | None = None,
    launcher: Launcher | None = None,
) -> MinimizeResult:
    """Shrink `cells` ({execution count: source}, in order) to the fewest cells and then
    statements that still fail like the full program.

    The full program runs first, isolated with blocking launches and the tracer: its failure
    is the signature every candidate must match. `expected_family` (the incident's) must
    agree with it. Stops after `max_trials` candidates or `timeout` seconds, or on Ctrl-C,
    keeping the best candidate so far. Raises MinimizeError when the full program does not
    fail, or fails as another family.
    """
    started = time.monotonic()
    owned = launcher is None
    launcher = launcher or ForkServerLauncher()
    try:
        def run(program: dict[int, str]) -> Incident | str | None:
            numbers = list(program)
            result = run_isolated(
                program[numbers[-1]], cells=[(n, program[n]) for n in numbers[:-1]],
                target_cell=numbers[-1], rng_states=rng_states, batch=batch, env=env,
                launcher=launcher, stream=False, store=False, timeout=trial_timeout)
            return "interrupted" if result.interrupted else result.incident

        reference = run(cells)
        if reference == "interrupted":
            raise MinimizeError("interrupted before the first run finished")
        if reference is None:
            raise MinimizeError("the program does not fail when run isolated: nothing to keep")
        if expected_family and reference.diagnosis.family != expected_family:
            raise MinimizeError(
                f"run isolated, the program fails as {reference.diagnosis.family} "
                f"({reference.error.message}), not as {expected_family}")
        signature = Signature.of(reference)
        deadline = started + timeout if timeout else None
        search = _Search(run, signature, max_trials - 1, deadline, progress)
        numbers = search.ddmin(list(cells), lambda keep: {n: cells[n] for n in keep}, "cells")
        kept = {n: cells[n] for n in numbers}
        units = _statements(kept)
        if len(units) > 1 and not search.stopped:
            units = search.ddmin(units, _program, "statements")
        best_units = units
        return MinimizeResult(
            cells=_program(best_units), signature=signature, trials=search.trials + 1,
            wall_s=time.monotonic() - started, original_cells=len(cells),
            original_statements=len(_statements(cells)), statements=len(best_units),
            stopped=search.stopped, history=search.history,
        )
    finally:
        if owned:
            launcher.close()


def _statements(cells: dict[int, str]) -> list[tuple[int, int, str]]:
    """(cell, index, source) of each top-level statement; a cell that does not parse is one
    unit."""
    units = []
    for number, source in cells.items():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            units.append((number, 0, source))
            continue
        lines = source.splitlines()
        for index, node in enumerate(tree.body):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            units.append((number, index, "\n".join(lines[first - 1: node.end_lineno])))
    return units


def _program(units: Sequence[tuple[int, int, str]]) -> dict[int, str]:
    program: dict[int, list[str]] = {}
    for number, _, source in units:
        program.setdefault(number, []).append(source)
    return {n: "\n".join(parts) for n, parts in program.items()}


def _split(items: list[Any], parts: int) -> list[list[Any]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            chunks.append(items[start:end])
        start = end
    return chunks


def _without(items: list[Any], chunk: list[Any]) -> list[Any]:
    removed = {id(x) for x in chunk}
    return [x for x in items if id(x) not in removed]


def _key(units: list[Any]) -> tuple[Any, ...]:
    return tuple(u if isinstance(u, int) else (u[0], u[1]) for u in units)
