"""The parent side of an isolated run: write the job, start the child, stream its output,
enforce the timeout, kill its whole process group on an interrupt, read the incident back.

The kernel never touches CUDA on this path: everything CUDA happens in the child.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag.i18n import _, join_clauses, ngettext
from cudadiag.interrupts import interrupt_pressed
from cudadiag.isolate.job import Job, JobCell, JobResult, ScriptTarget
from cudadiag.isolate.launcher import (
    NVIDIA_BLOCKING,
    ROCM_BLOCKING,
    Launcher,
    SubprocessLauncher,
    blocking_settings,
    child_environment,
)
from cudadiag.isolate.output import ChildOutput
from cudadiag.isolate.procgroup import (
    KILL_WAIT_S,
    describe,
    group_members,
    kill_and_wait,
    kill_group,
    wait_until_gone,
)
from cudadiag.isolate.result import IsolatedResult

if TYPE_CHECKING:
    from cudadiag.incident import Incident
    from cudadiag.isolate.ranks import RankJob

KILL_GRACE_S = 2.0
"""After SIGTERM, how long the child may take to exit before its group gets SIGKILL."""
IDLE_AFTER_EXIT_S = 0.3
"""Once the child has exited, its pipes are read until they stay idle this long..."""
DRAIN_AFTER_EXIT_S = 2.0
"""...or at most this long (a left-over process may write for ever)."""


def run_isolated(
    code: str,
    *,
    blocking: bool = True,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cells: Sequence[tuple[int, str]] | Sequence[str] | None = None,
    ship: dict[str, Any] | Path | None = None,
    trace: bool = True,
    precheck: bool = True,
    target_cell: int | None = None,
    rng_states: dict[int, dict[str, Any]] | None = None,
    batch: tuple[int, Any] | None = None,
    launcher: Launcher | None = None,
    stream: bool = True,
    store: bool = True,
    show_replay: bool = False,
    ranks: RankJob | None = None,
    base_env: Mapping[str, str] | None = None,
) -> IsolatedResult:
    """Run `code` in a fresh Python process with blocking launches, the op tracer and the
    index prechecks; return an IsolatedResult.

    `cells` are earlier cells replayed first (sources, or (execution count, source) pairs);
    `ship` holds values pickled into the child's namespace (or names a file that holds them
    already pickled, as a stored incident keeps them); `env` adds variables to the
    child's environment, which starts from `base_env` (default: this process's);
    `rng_states` maps a cell number to the RNG states it started from;
    `batch` = (step, data) makes the child's first watch() yield only that recorded batch.
    With `blocking=False` the re-run is faithful and asynchronous: no tracer, no prechecks.
    With `stream`, `code` prints live and each replayed cell's output is folded into one
    line (`show_replay`: printed live too). The incident, if any, is appended to the incident
    log unless `store` is False. An interrupt (KeyboardInterrupt) kills the child's process
    group and returns a result with `interrupted` set: the caller decides whether to raise.
    With `ranks`, the cells run as every rank of a torchrun job, or start their ranks with
    torch.multiprocessing.spawn (isolate/ranks.py).
    Raises ValueError for a timeout that is not a positive finite number and OSError when
    no process can be started (or on Windows).
    """
    numbered = _numbered(cells or [], code, target_cell)
    return _execute(numbered, None, blocking=blocking, timeout=timeout, env=env, ship=ship,
                    trace=trace, precheck=precheck, rng_states=rng_states, batch=batch,
                    launcher=launcher, output=ChildOutput(stream, show_replay), store=store,
                    ranks=ranks, base_env=base_env)


def run_script(
    target: str,
    argv: Sequence[str] = (),
    *,
    module: bool = False,
    python: str | None = None,
    blocking: bool = True,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    trace: bool = True,
    precheck: bool = True,
    stream: bool = True,
    store: bool = True,
    ranks: RankJob | None = None,
) -> IsolatedResult:
    """Run a script (or `python -m` module when `module`) the way
    `CUDA_LAUNCH_BLOCKING=1 python train.py` does, plus the tracer, prechecks and watch(),
    under the interpreter `python` (default: this one, which must be able to import
    cudadiag). The script's output, and its traceback as Python prints it, stream live.
    Returns an IsolatedResult whose returncode is the script's; the incident, if any, has
    `run.mode = "cli"`. With `ranks`, the script runs as every rank of a torchrun job
    (isolate/ranks.py) and the returncode is torchrun's. Raises ValueError for a timeout that
    is not a positive finite number, OSError when the interpreter cannot be started."""
    script = ScriptTarget(target, list(argv), module)
    launcher = SubprocessLauncher(python, keep_stdin=True)
    return _execute([], script, blocking=blocking, timeout=timeout, env=env, ship=None,
                    trace=trace, precheck=precheck, rng_states=None, batch=None,
                    launcher=launcher, output=ChildOutput(stream, shown_limit=None),
                    store=store, ranks=ranks)


def _execute(numbered: list[tuple[int, str]], script: ScriptTarget | None, *,
             blocking: bool, timeout: float | None, env: dict[str, str] | None,
             ship: dict[str, Any] | Path | None, trace: bool, precheck: bool,
             rng_states: dict[int, dict[str, Any]] | None, batch: tuple[int, Any] | None,
             launcher: Launcher | None, output: ChildOutput, store: bool,
             ranks: RankJob | None = None,
             base_env: Mapping[str, str] | None = None) -> IsolatedResult:
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(_("timeout must be a positive number of seconds, not {timeout}").format(
            timeout=timeout))
    if os.name == "nt":
        raise OSError(_("isolated runs need process groups and select() on pipes: Linux or "
                        "macOS (the live-kernel capture works on Windows)"))
    settings = blocking_settings(blocking)
    extra = {**settings.env, **(env or {})}
    child_env = child_environment(extra, base_env)
    if not blocking:
        for name in (*NVIDIA_BLOCKING, *ROCM_BLOCKING):
            if name not in (env or {}):
                child_env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="cudadiag-isolate-") as workdir:
        job = Job(Path(workdir), [JobCell(n, s) for n, s in numbered], blocking=blocking,
                  trace=trace and blocking, precheck=precheck and blocking,
                  env_vars=extra, script=script)
        _fill_job(job, ship, rng_states, batch)
        if ranks is not None:
            launcher = ranks.prepare(job, launcher)
            job.write()
        started = time.perf_counter()
        what = (_("the job") if ranks is not None else _("the script") if script is not None
                else _("the isolated run"))
        if interrupt_pressed():  # a Ctrl-C that an import swallowed: the program never starts
            raise KeyboardInterrupt
        with _interrupt_deferred() as interrupted:
            process = (launcher or SubprocessLauncher()).start(str(job.path), child_env)
            pump = _Pump(process, timeout, output, what)
        if output.stream and process.fallback:
            print(_("cudadiag: cold start: {reason}").format(reason=process.fallback), flush=True)
        pump.run(interrupted=bool(interrupted))
        wall = time.perf_counter() - started
        child_result: JobResult | None
        if ranks is not None:
            child_result = ranks.collect(pump.timed_out or pump.interrupted, process.returncode)
        else:
            child_result = JobResult.read(job.result_path)
        result = IsolatedResult(
            incident=None, returncode=process.returncode, stdout=output.text("stdout"),
            stderr=output.text("stderr"), wall_s=wall, settings=settings,
            timed_out=pump.timed_out, interrupted=pump.interrupted,
            cells=[n for n, _ in numbered], pid=process.pid,
            # the child words its check in the run's language (child_environment)
            start=join_clauses(filter(None, [child_result.blocking_check if child_result
                                             else "", process.how])),
        )
        result.incident = _incident_of(result, child_result, blocking, extra)
        if result.incident is not None:
            _complete(result.incident, output, wall, process.returncode, numbered, script)
            if ranks is not None:
                ranks.complete(result.incident)
                result.incident.run.cwd = os.getcwd()  # where the launcher ran the script
            if script is not None and ranks is None:
                result.unrelated = _unrelated_to_pytorch(result.incident, child_result)
            result.incident.run.shipped = sorted(ship) if isinstance(ship, dict) else []
        if result.unrelated:
            result.incident = None
        if result.incident is not None and store:
            _store(result.incident, job)
    result.message = _message(result, timeout, what)
    if ranks is not None and result.incident is None:
        result.message = ranks.message(result.message, result)
    return result


def _unrelated_to_pytorch(incident: Incident, child: JobResult | None) -> str:
    """`KeyError: 'lr'` when `incident` is the child's Python exception and no incident by
    the kernel's rule (diagnose.is_diagnosable: a KeyError, a NameError), read with the
    device's own lines; "" otherwise. A process that died without an exception (a crash in
    a library) is always an incident."""
    from cudadiag.diagnose import is_diagnosable  # the diagnosis only where one failed

    if child is None or child.incident is not incident or is_diagnosable(
            incident.error.type, incident.diagnosis.family, incident.run.simulated):
        return ""
    return f"{incident.error.type}: {incident.error.message}"


def _complete(incident: Incident, output: ChildOutput, wall: float, returncode: int | None,
              numbered: list[tuple[int, str]], script: ScriptTarget | None) -> None:
    device_lines = output.device_lines.take()
    if device_lines:
        from cudadiag.diagnose import add_device_lines

        add_device_lines(incident, device_lines)
    incident.run.wall_s = wall
    incident.run.exit_status = returncode
    incident.run.sources = {str(n): source for n, source in numbered}
    if script is not None:
        incident.run.mode = "cli"
        incident.run.command = script.command()


def _numbered(cells: Sequence[Any], code: str, target: int | None) -> list[tuple[int, str]]:
    pairs = [c if isinstance(c, tuple) else (i + 1, c) for i, c in enumerate(cells)]
    target = target if target is not None else (max((n for n, _ in pairs), default=0) + 1)
    return [*[(int(n), s) for n, s in pairs if n != target], (target, code)]


def _fill_job(job: Job, ship: dict[str, Any] | Path | None,
              rng_states: dict[int, dict[str, Any]] | None,
              batch: tuple[int, Any] | None) -> None:
    """Put the shipped values, RNG states and replayed batch in the job's folder (a Path
    `ship` is a file of values already pickled), then write the job file."""
    if isinstance(ship, Path):
        job.ship = ship
    elif ship:
        job.ship_values(ship)
    if rng_states:
        job.save_rng_states(rng_states)
    if batch is not None:
        from cudadiag.batch.watcher import replay_facts  # torch is loaded: a batch exists

        job.save_batch(*batch, *replay_facts(batch[0]))
    job.write()


class _Pump:
    """Reads a child's stdout/stderr into a ChildOutput as they come, and ends the run: at
    the timeout or on an interrupt (killing the child's whole process group), or when the
    child has exited and its pipes stay idle (a left-over grandchild may hold them open for
    ever). Left-over processes of the group are killed and named."""

    def __init__(self, process: Any, timeout: float | None, output: ChildOutput,
                 what: str) -> None:
        self.process = process
        self.deadline = time.monotonic() + timeout if timeout else None
        self.output = output
        self.what = what
        self.timed_out = False
        self.interrupted = False

    def run(self, interrupted: bool = False) -> None:
        """Pump until the run has ended; never raises KeyboardInterrupt (see `interrupted`).
        `interrupted`: the user interrupted while the child was starting: end it at once."""
        selector = selectors.DefaultSelector()
        try:
            selector.register(self.process.stdout, selectors.EVENT_READ, "stdout")
            selector.register(self.process.stderr, selectors.EVENT_READ, "stderr")
            if interrupted:
                raise KeyboardInterrupt
            self._read(selector)
            self.process.wait()
        except KeyboardInterrupt:
            self.interrupted = True
            self._kill_group()
        finally:
            selector.close()
            self.output.finish()
            self._kill_leftovers()
            for pipe in (self.process.stdout, self.process.stderr):
                pipe.close()

    def _read(self, selector: selectors.BaseSelector) -> None:
        exited_at: float | None = None
        last_data = time.monotonic()
        while selector.get_map():
            now = time.monotonic()
            if self.deadline is not None and now > self.deadline:
                self.timed_out = True
                self._kill_group()
                return
            if exited_at is None and self.process.poll() is not None:
                exited_at = now
            if exited_at is not None and (now - last_data > IDLE_AFTER_EXIT_S
                                          or now - exited_at > DRAIN_AFTER_EXIT_S):
                return
            for key, _mask in selector.select(timeout=0.05):
                data = os.read(key.fd, 65536)
                if data:
                    self.output.take(key.data, data)
                    last_data = time.monotonic()
                else:
                    selector.unregister(key.fileobj)

    def _kill_group(self) -> None:
        """SIGTERM to the whole group; SIGKILL to it when the child has not exited within
        KILL_GRACE_S. The rest of the group (which had SIGTERM too) gets what is left of the
        grace to end before it counts as left over."""
        deadline = time.monotonic() + KILL_GRACE_S
        kill_group(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_group(self.process.pid, signal.SIGKILL)
            self.process.wait()
        wait_until_gone(self.process.pid, max(0.0, deadline - time.monotonic()))

    def _kill_leftovers(self) -> None:
        """Kill what is left in the child's group and name it once it is gone (or, if some
        of it outlives SIGKILL, name that too)."""
        left = group_members(self.process.pid)
        if not left:
            return
        alive = kill_and_wait(self.process.pid)
        killed = [member for member in left if member not in alive]
        if killed:
            print(ngettext("cudadiag: killed {count} left-over process of {what}: {which}",
                           "cudadiag: killed {count} left-over processes of {what}: {which}",
                           len(killed)).format(count=len(killed), what=self.what,
                                               which=describe(killed)),
                  file=sys.stderr, flush=True)
        if alive:
            print(_("cudadiag: {count} process(es) of {what} still running {seconds:g} s after "
                    "SIGKILL: {which}").format(count=len(alive), what=self.what,
                                               seconds=KILL_WAIT_S, which=describe(alive)),
                  file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[list[bool]]:
    """Hold Ctrl-C (SIGINT) back while the child is started: an interrupt inside Popen
    would leave a child in its own session that nobody kills. Yields a list that holds True
    once an interrupt came. Off the main thread (where no signal arrives) it holds nothing
    back."""
    received: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def _incident_of(result: IsolatedResult, child: JobResult | None, blocking: bool,
                 env_vars: dict[str, str]) -> Incident | None:
    if child is not None:
        return child.incident
    if result.timed_out or result.interrupted or result.returncode == 0:
        return None
    from cudadiag.diagnose import incident_of_dead_process
    from cudadiag.incident import RunInfo

    code = result.returncode or 0
    return incident_of_dead_process(result.stdout, result.stderr, RunInfo(
        mode="isolated", blocking=blocking, env_vars=env_vars, exit_status=code,
        signal=signal.Signals(-code).name if code < 0 else None, cells=result.cells))


def _message(result: IsolatedResult, timeout: float | None, what: str) -> str:
    if result.timed_out:
        return _("cudadiag: {what} exceeded the timeout of {timeout:g} s; its whole "
                 "process group was killed").format(what=what, timeout=timeout)
    if result.interrupted:
        return _("cudadiag: interrupted; {what}'s process group was killed").format(what=what)
    if result.unrelated:
        return _("cudadiag: {what} failed with {error}, an error unrelated to PyTorch: no "
                 "incident recorded").format(what=what, error=result.unrelated)
    if result.incident is None and result.returncode not in (0, None):
        return _("cudadiag: {what} exited with status {status}, with no exception to "
                 "diagnose (sys.exit or an error handled by the program; {note})").format(
            what=what, status=result.returncode, note=_(result.settings.note))
    if result.incident is None:
        return _("cudadiag: {what} finished without error ({note})").format(
            what=what, note=_(result.settings.note))
    return ""


def _store(incident: Incident, job: Job) -> None:
    """Append the incident to the log and keep the run's RNG states, recorded batch and
    shipped values beside it, so a later export can replay the same run."""
    from cudadiag.log.store import IncidentStore  # a clean run never opens the log

    store = IncidentStore()
    try:
        store.append(incident)
        for path in job.kept_files():
            store.keep_run_file(incident.id, path)
        not_kept = store.keep_shipped(incident.id, job.ship) if job.ship else None
    except OSError as exc:
        print(_("cudadiag: could not write the incident log: {error}").format(error=exc),
              file=sys.stderr)
        return
    if not_kept:
        print(_("cudadiag: the shipped values were not kept with incident {id} ({why}); to "
                "export it, re-run with --ship none").format(id=incident.id, why=not_kept),
              file=sys.stderr)
