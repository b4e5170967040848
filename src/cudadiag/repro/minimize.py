"""Shrink a failing program without losing the trigger (method point 8).

First the range loop that holds the failing line is cut to the iterations it needs
(loops.py), which makes every later trial short; then delta debugging (ddmin, halving
granularity, as PyTorch's FX minifier) over the cells, then over the top-level statements of
what is left. Every candidate runs in a fresh
process (forked from a pre-started interpreter: milliseconds, not seconds) in the program's
working directory, with the same RNG states, recorded batch and shipped values. A candidate
still fails only when its signature matches the original: family, exception type and, when
known, the failing operator; failing differently is not failing. Candidates that use a name
whose definition they removed are refused without a trial (dependencies.py); a candidate that
removes a seed but keeps what draws from it is kept only when it fails identically under other
seeds (RESEEDS): same signature, message and position; the failure then does not depend on
the numbers drawn, and the repro needs no seed.
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.errors import MinimizeError, MinimizeInterrupted
from cudadiag.i18n import N_, _
from cudadiag.incident import Incident, Signature
from cudadiag.isolate import warm
from cudadiag.isolate.launcher import Launcher, startup_environment
from cudadiag.isolate.runner import run_isolated
from cudadiag.isolate.warm import WarmLauncher
from cudadiag.privacy.secret_names import masked_value
from cudadiag.repro import loops
from cudadiag.repro.dependencies import Admissible, Unit, statements
from cudadiag.repro.options import DEFAULT_MAX_TRIALS

Progress = Callable[[int, int, str], None]
"""progress(trials so far, size of the best candidate, phase): the size counts cells in the
`cells` phase, statements otherwise."""

SETUP_CELL = 0
"""The number of the setup cell (a script's command line): run first, never removed."""

RESEEDS = (1, 20261203)
"""The seeds a candidate that removes a seed (but keeps draws from its stream) must also fail
under, identically, besides its plain run."""

TRIAL_FACTOR = 3.0
"""A candidate may run this many times as long as the reference run took (then it is
stopped and counts as not failing): removing code seldom makes a program slower."""
TRIAL_MIN_S = 10.0
"""...and at least this long: a short reference run says little about a busy machine."""


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
    refused: int = 0
    """Candidates refused without a trial by the static check."""
    incident: Incident | None = None
    """The failure of the best candidate (what it read, where it failed)."""
    loop: loops.LoopCut | None = None
    """The loop cut to the iterations the failure needs, when one was."""
    loop_states: dict[str, Any] = field(default_factory=dict)
    """Random states the reduced loop starts from, by key (see loop.rng_key)."""
    seeds_dropped: list[str] = field(default_factory=list)
    """Seed statements left out although later statements draw from their stream: the
    failure was the same under other seeds."""
    reference_s: float = 0.0
    """How long the reference run took to fail (seconds)."""
    timeout: float | None = None
    """The time budget it had."""

    def stopped_text(self) -> str:
        """Return why the search ended early and what was kept ("" when it did not): with
        the time to ask for when the budget ran out."""
        if not self.stopped:
            return ""
        if self.stopped == "timeout" and self.timeout:
            return _("stopped early (timeout): the best candidate so far was kept (more time "
                     "may make it smaller: --timeout {seconds})").format(
                seconds=f"{_more_time(self.timeout):g}")
        if self.stopped in _STOPPED:
            return _(_STOPPED[self.stopped])
        return _("stopped early ({reason}): the best candidate so far was kept").format(
            reason=self.stopped)

    def notes(self) -> list[str]:
        """Return the lines that tell what the minimizer changed besides removing code: the
        loop it cut, the seeds it left out."""
        notes = ([_("loop cut to {description}").format(description=self.loop.description)]
                 if self.loop else [])
        notes += [_("seed left out: `{source}` (the failure is the same under other seeds)"
                    ).format(source=source) for source in self.seeds_dropped]
        return notes


_STOPPED = {
    "interrupted": N_("stopped early (interrupted): the best candidate so far was kept"),
    "max trials": N_("stopped early (max trials): the best candidate so far was kept"),
    "timeout": N_("stopped early (timeout): the best candidate so far was kept"),
}
"""Why the search ended early (MinimizeResult.stopped), as stopped_text says it."""


class _Budget(Exception):
    """Raised inside the search when a trial may not be run."""


Runner = Callable[[list[Unit], float | None, int | None, bool], "Incident | str | None"]
"""run(program, seconds left or None, seed to start from or None, traced) -> its failure,
None when it passed, or `interrupted` / `timed out`"""


class _Search:
    def __init__(self, runner: Runner,
                 signature: Signature, admissible: Admissible, max_trials: int,
                 deadline: float | None, progress: Progress | None,
                 trial_cap: float) -> None:
        self.runner = runner
        self.trial_cap = trial_cap
        """The longest one trial may run (see TRIAL_FACTOR)."""
        self.signature = signature
        self.admissible = admissible
        self.max_trials = max_trials
        self.deadline = deadline
        self.progress = progress
        self.trials = 0
        self.refused = 0
        self.stopped: str | None = None
        self.cache: dict[tuple[Any, ...], bool] = {}
        self.history: list[tuple[int, int]] = []
        self.best_size = 0
        """The size of the best candidate so far, in the phase's unit (see _measure)."""
        self.best_incident: Incident | None = None

    def fails(self, units: list[Unit], phase: str) -> bool:
        """True when the candidate `units` fails as the original did (a candidate that
        leaves a seed out: identically under every seed of RESEEDS); raises _Budget when no
        more trials may run."""
        key = tuple((*u.key, u.source) for u in units)
        if key in self.cache:
            return self.cache[key]
        if self.admissible.why_not(units):
            self.refused += 1
            self.cache[key] = False
            return False
        incident = self._trial(units, None)
        result = self.signature.matches(incident)
        if result and self.admissible.unseeded_draws(units):
            result = all(_identical(incident, self._trial(units, seed)) for seed in RESEEDS)
        self.cache[key] = result
        if result:
            self.best_incident = incident
        if self.progress:
            self.progress(self.trials, _measure(units, phase) if result else self.best_size,
                          phase)
        return result

    def _trial(self, units: list[Unit], seed: int | None) -> Incident | None:
        """Run one trial: its failure, or None when it passed or timed out on its own;
        raises _Budget when it was interrupted or cut by the search's budget."""
        left = self._budget_left()
        self.trials += 1
        try:
            outcome = self.runner(units, min(left, self.trial_cap) if left is not None
                                  else self.trial_cap, seed, True)
        except KeyboardInterrupt:  # Ctrl-C while the fork server was starting the trial
            outcome = "interrupted"
        if outcome == "timed out" and self.deadline and time.monotonic() >= self.deadline:
            outcome = "timeout"  # cut by the budget, not by its own trial timeout
        if outcome in ("interrupted", "timeout"):
            self.stopped = str(outcome)
            raise _Budget
        return outcome if isinstance(outcome, Incident) else None

    def _budget_left(self) -> float | None:
        """Seconds left for the next trial (None: no time limit); raises _Budget when no
        trial may run."""
        if self.stopped:
            raise _Budget
        if self.trials >= self.max_trials:
            self.stopped = "max trials"
            raise _Budget
        if self.deadline is None:
            return None
        left = max(self.deadline - time.monotonic(), 0.0)
        if left == 0:
            self.stopped = "timeout"
            raise _Budget
        return left

    def ddmin(self, items: list[Any], expand: Callable[[list[Any]], list[Unit]],
              phase: str) -> list[Any]:
        """Zeller's ddmin: the smallest subsequence of `items` that still fails (1-minimal
        when the budget allows); keeps the best found when the budget runs out."""
        best = list(items)
        self.best_size = _measure(expand(best), phase)
        granularity = 2
        try:
            while len(best) >= 2:
                chunks = _split(best, granularity)
                reduced = False
                # complements first: the planned cells are mostly needed, so removing a chunk
                # succeeds far more often than keeping only one
                for candidate in [*(_without(best, c) for c in chunks), *chunks]:
                    if candidate and self.fails(expand(candidate), phase):
                        best = candidate
                        self.best_size = _measure(expand(best), phase)
                        self.history.append((self.trials, len(expand(best))))
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
    ship: Path | None = None,
    provided: Iterable[str] = (),
    setup: str | None = None,
    failed_at: Sequence[tuple[int, int]] = (),
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    environ: Mapping[str, str | None] | None = None,
    max_trials: int = DEFAULT_MAX_TRIALS,
    timeout: float | None = None,
    progress: Progress | None = None,
    launcher: Launcher | None = None,
) -> MinimizeResult:
    """Shrink `cells` ({execution count: source}, in order): cut the range loop holding one
    of the `failed_at` lines ((cell, line), outermost first) to the iterations it needs,
    then keep the fewest cells and statements that still fail like the full program.

    `ship` is a file of pickled values every candidate receives (their names in `provided`);
    `setup` is code run before every candidate and never removed (a script's command line);
    candidates run in `cwd` (default: this process's working directory), in the environment
    this process started with plus `env` (not os.environ as the user's code left it: a
    statement that sets a variable the program reads must stay), with the variables the
    program read as its run had them (`environ`: None unsets one; a masked secret is left
    as this environment has it). The reference failure (see _start) gives the signature
    every candidate must match; `expected_family` (the incident's) must agree with it. The
    reference run may take all of `timeout`; every later candidate runs at most TRIAL_FACTOR
    times as long as the reference did (at least TRIAL_MIN_S), and none past `timeout`.
    Stops after `max_trials` candidates or `timeout` seconds, or on Ctrl-C, keeping the best
    candidate so far. Raises MinimizeInterrupted on Ctrl-C before the reference failure was
    seen, MinimizeError when the program does not fail (within `timeout`: the message says
    how to give it longer), or fails as another family.
    """
    started = time.monotonic()
    # the kernel's warm interpreter; where none runs, one started for this minimization
    owned = launcher is None and warm.current() is None and warm.unsupported() is None
    if owned:
        warm.start()
    launcher = launcher or WarmLauncher(cwd=cwd, wait=None)
    units = statements(cells)
    site = loops.find_loop(units, list(failed_at))
    try:
        with tempfile.TemporaryDirectory(prefix="cudadiag-minimize-") as scratch:
            paths = _ScratchFiles(scratch)

            fresh = with_program_environ(startup_environment(), environ or {})

            def run(program: list[Unit], limit: float | None, seed: int | None,
                    trace: bool) -> Incident | str | None:
                numbered = _numbered(program, setup, paths.loop_states, seed)
                result = run_isolated(
                    numbered[-1][1], cells=numbered[:-1], target_cell=numbered[-1][0],
                    rng_states=rng_states, batch=batch, ship=ship, env=env, trace=trace,
                    precheck=trace, launcher=launcher, stream=False, store=False,
                    base_env=fresh, timeout=limit)
                if result.interrupted:
                    return "interrupted"
                return "timed out" if result.timed_out else result.incident

            clock = _Clock(started, timeout)
            begin = _start(run, units, site, paths, expected_family, clock)
            signature = Signature.of(begin.reference)
            restored = [n for n in cells if rng_states and n in rng_states]
            admissible = Admissible(begin.units, [*provided, "restore_rng"], restored)
            search = _Search(run, signature, admissible, max_trials - begin.runs,
                             clock.deadline, progress,
                             max(TRIAL_MIN_S, TRIAL_FACTOR * begin.seconds))
            search.best_incident = begin.reference
            units, cut, states = begin.units, begin.cut, begin.states
            if cut is None and begin.probed is not None and site is not None:
                units, cut, states = _cut_loop(search, units, site, begin.probed,
                                               paths.loop_states)
            kept_cells = search.ddmin(list(cells), lambda keep: [
                u for u in units if u.cell in set(keep)], "cells")
            best = [u for u in units if u.cell in set(kept_cells)]
            if len(best) > 1 and not search.stopped:
                best = search.ddmin(best, list, "statements")
            _forget_own_files(search.best_incident, scratch)
            return MinimizeResult(
                cells=_program(best), signature=signature, trials=search.trials + begin.runs,
                wall_s=time.monotonic() - started, original_cells=len(cells),
                original_statements=len(units), statements=len(best),
                stopped=search.stopped, history=search.history, refused=search.refused,
                incident=search.best_incident, loop=cut, loop_states=states,
                seeds_dropped=[u.source for u in admissible.unseeded_draws(best)],
                reference_s=begin.seconds, timeout=timeout,
            )
    finally:
        if owned:
            warm.stop(N_("stopped by the minimizer that started it"))


def with_program_environ(base: Mapping[str, str], environ: Mapping[str, str | None]
                         ) -> dict[str, str]:
    """`base` with the variables a program read set as its run had them (None: unset); a
    masked secret (the log keeps none) stays as `base` has it."""
    env = dict(base)
    for name, value in environ.items():
        if value is None:
            env.pop(name, None)
        elif value != masked_value(name):
            env[name] = value
    return env


@dataclass
class _Clock:
    """The minimization's time budget: `timeout` seconds from `started` (None: no limit)."""

    started: float
    timeout: float | None

    @property
    def deadline(self) -> float | None:
        return self.started + self.timeout if self.timeout else None

    def left(self) -> float | None:
        """Seconds left (never below zero), None without a limit."""
        deadline = self.deadline
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    def out_of_time(self) -> str:
        """What to say when the full program did not fail within the budget."""
        timeout = self.timeout or 0.0
        return _("the program did not fail within {seconds} s, the export's time budget "
                 "(--timeout {seconds}): nothing was written. If it takes longer to fail, "
                 "export again with more time, e.g. --timeout {more}").format(
            seconds=f"{timeout:g}", more=f"{_more_time(timeout):g}")


def _more_time(timeout: float) -> float:
    """A budget worth suggesting after `timeout` ran out: four times as long, rounded up to
    a whole minute."""
    return 60.0 * math.ceil(4 * timeout / 60)


@dataclass
class _ScratchFiles:
    """The minimizer's own files: the loop probe's record, the reduced loop's states."""

    folder: str

    @property
    def probe(self) -> str:
        return os.path.join(self.folder, "loop.probe")

    @property
    def loop_states(self) -> str:
        return os.path.join(self.folder, "loop-states.pkl")


@dataclass
class _Begin:
    """Where the search starts: the reference failure, the program (its loop maybe cut)."""

    reference: Incident
    units: list[Unit]
    runs: int
    seconds: float
    """How long the reference run took."""
    probed: tuple[Any, dict[str, Any]] | None = None
    cut: loops.LoopCut | None = None
    states: dict[str, Any] = field(default_factory=dict)


def _start(run: Runner, units: list[Unit], site: loops.LoopSite | None,
           paths: _ScratchFiles, expected_family: str | None, clock: _Clock) -> _Begin:
    """The reference failure. With a range loop around the failing line, the full program
    first runs untraced with the loop probed (the tracer costs tens of milliseconds per
    training step), then the loop cut to the failing iteration alone runs traced: when it
    fails as the full program did, its failure is the reference, and every later trial is
    one iteration long. Otherwise the full program runs traced. Each run may take what is
    left of the budget."""
    runs = 0
    probed = None
    if site is not None:
        probe = site.unit.replaced(loops.instrumented(site, paths.probe))
        quick, _ = _failure(run, [probe if u is site.unit else u for u in units], False,
                            expected_family, clock)
        runs += 1
        probed = loops.read_probe(paths.probe)
        value, rng_states = probed if probed is not None else (None, {})
        alone = loops.cuts(site, value)[:1] if probed is not None else []
        for cut in alone:
            states = {cut.rng_key: rng_states} if cut.rng_key else {}
            Path(paths.loop_states).write_bytes(pickle.dumps(states))
            program = [site.unit.replaced(cut.source) if u is site.unit else u for u in units]
            began = time.monotonic()
            outcome = _outcome(run, program, True, clock)
            runs += 1
            if isinstance(outcome, Incident) and \
                    outcome.diagnosis.family == quick.diagnosis.family:
                return _Begin(outcome, program, runs, time.monotonic() - began, probed, cut,
                              states)
    reference, seconds = _failure(run, units, True, expected_family, clock)
    return _Begin(reference, units, runs + 1, seconds, probed)


def _outcome(run: Runner, program: list[Unit], trace: bool,
             clock: _Clock) -> Incident | str | None:
    left = clock.left()
    if left == 0:
        return "timed out"
    try:
        return run(program, left, None, trace)
    except KeyboardInterrupt:  # Ctrl-C while the fork server was starting
        return "interrupted"


def _failure(run: Runner, program: list[Unit], trace: bool, expected_family: str | None,
             clock: _Clock) -> tuple[Incident, float]:
    """The failure of `program` and how long it took; raises MinimizeInterrupted or
    MinimizeError."""
    began = time.monotonic()
    outcome = _outcome(run, program, trace, clock)
    seconds = time.monotonic() - began
    if outcome == "interrupted":
        raise MinimizeInterrupted(_("interrupted before the full program's run finished"))
    if outcome == "timed out":
        raise MinimizeError(clock.out_of_time())
    if not isinstance(outcome, Incident):
        raise MinimizeError(_("the program does not fail when run isolated: nothing to keep"))
    if expected_family and outcome.diagnosis.family != expected_family:
        raise MinimizeError(_("run isolated, the program fails as {family} ({message}), not as "
                              "{expected}").format(family=outcome.diagnosis.family,
                                                   message=outcome.error.message,
                                                   expected=expected_family))
    return outcome, seconds


def _cut_loop(search: _Search, best: list[Unit], site: loops.LoopSite,
              probed: tuple[Any, dict[str, Any]], states_path: str
              ) -> tuple[list[Unit], loops.LoopCut | None, dict[str, Any]]:
    """Try the loop cut to the iterations up to the failing one (the failing iteration
    alone did not fail the same way); keep it when it still fails the same way."""
    for cut in loops.cuts(site, probed[0])[1:]:
        candidate = [site.unit.replaced(cut.source) if u is site.unit else u for u in best]
        try:
            if search.fails(candidate, "loop"):
                search.history.append((search.trials, len(candidate)))
                return candidate, cut, {}
        except _Budget:
            break
    return best, None, {}


def _measure(units: list[Unit], phase: str) -> int:
    """The size of a candidate as progress shows it: cells in the `cells` phase, statements
    otherwise."""
    return len({u.cell for u in units}) if phase == "cells" else len(units)


def _identical(plain: Incident | None, reseeded: Incident | None) -> bool:
    """True when a reseeded trial failed exactly as the plain one: same signature, message
    and offending position (a failure that moves when other numbers are drawn depends on
    them, even when the value is the same)."""
    if plain is None or reseeded is None:
        return False
    return (Signature.of(plain) == Signature.of(reseeded)
            and plain.error.message == reseeded.error.message
            and plain.diagnosis.details.get("position")
            == reseeded.diagnosis.details.get("position"))


def _forget_own_files(incident: Incident | None, scratch: str) -> None:
    """Drop the minimizer's own files (the reduced loop's random states) from what the
    program read."""
    if incident is not None:
        own = os.path.join(os.path.realpath(scratch), "")
        incident.run.files_read = [f for f in incident.run.files_read if not f.startswith(own)]


def _numbered(program: list[Unit], setup: str | None, loop_states: str,
              seed: int | None = None) -> list[tuple[int, str]]:
    """The candidate as (cell number, source) pairs, the setup cell first when there is
    one; a reduced loop's `restore_rng` is defined there, and the streams are seeded there
    with `seed` when one is given."""
    loops_module = "__import__('cudadiag.repro.loops', fromlist=['x'])"
    lines = [setup] if setup else []
    if any("restore_rng(" in u.source for u in program):
        lines.append(f"restore_rng = {loops_module}.rng_restorer({loop_states!r})")
    if seed is not None:
        lines.append(f"{loops_module}.reseed({seed})")
    cells = list(_program(program).items())
    return [(SETUP_CELL, "\n".join(lines)), *cells] if lines else cells


def _program(units: Sequence[Unit]) -> dict[int, str]:
    program: dict[int, list[str]] = {}
    for unit in units:
        program.setdefault(unit.cell, []).append(unit.source)
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
