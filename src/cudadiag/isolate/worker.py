"""The isolated child: `python -m cudadiag.isolate.worker JOB.json`.

Its environment (blocking launches) was fixed by the launcher before anything could initialise
CUDA (before this interpreter started, or first thing after a fork server forked it); the
worker checks it and says so in the run's result. It replays the planned cells in a fresh
`__main__`, each from the RNG states recorded before it ran in the kernel, compiled under
`<cudadiag In[N]>` so tracebacks point at notebook cells, with the op tracer active. The first
exception becomes the incident; later ones are its consequences. The incident is written as
JSON to the job's result path.
"""

from __future__ import annotations

import builtins
import functools
import linecache
import os
import random
import re
import runpy
import sys
import time
import types
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag.i18n import _
from cudadiag.isolate import program_files, rankfiles, spawn
from cudadiag.isolate.eager import disable_compilation_if_asked
from cudadiag.isolate.job import Job, JobResult, ScriptTarget
from cudadiag.isolate.launcher import NVIDIA_BLOCKING, ROCM_BLOCKING
from cudadiag.isolate.output import REPLAY, TARGET, cell_marker
from cudadiag.privacy.secret_names import looks_secret, masked_value

BLOCKING_VARIABLES = (*NVIDIA_BLOCKING, *ROCM_BLOCKING)

if TYPE_CHECKING:
    from cudadiag.contracts import Violation
    from cudadiag.incident import Incident, LoopContext
    from cudadiag.trace import OpTracer, PrecheckError

CELL_FILENAME = "<cudadiag In[{}]>"
_CELL_FILENAME_RE = re.compile(r"^<cudadiag In\[(\d+)\]>$")


def cell_of(filename: str) -> int | None:
    """Return N for a `<cudadiag In[N]>` filename, else None."""
    m = _CELL_FILENAME_RE.match(filename)
    return int(m.group(1)) if m else None


def main(argv: list[str]) -> int:
    """Run the job named in argv[1]; exit status 1 when an incident was recorded.

    The device's own lines (kernel assertion printf, ROCm faults) go straight to the parent
    through fds 1/2, which reads them there: a pipe inside this process would lose the last
    ones when the process aborts.
    """
    job = Job.read(Path(argv[1]))
    rankfiles.begin(None if job.spawn else job.ranks)
    started = time.perf_counter()
    check = blocking_check(job)
    try:
        result = run_job(job)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    result.wall_s = time.perf_counter() - started
    result.blocking_check = check
    if not rankfiles.finish(result.exit_code, result.incident):
        result.write(job.result_path)
    return result.exit_code


@functools.cache
def c_getenv() -> Any:
    """The C library's getenv (what the CUDA and HIP runtimes read), looked up once: a fork
    server looks it up for all its children."""
    import ctypes

    getenv = ctypes.CDLL(None).getenv
    getenv.argtypes, getenv.restype = [ctypes.c_char_p], ctypes.c_char_p
    return getenv


def blocking_check(job: Job) -> str:
    """Return one line saying whether the run's blocking variables are in effect: set in the
    process's C environment (what the CUDA and HIP runtimes read when they initialise) with
    the run's values, CUDA not yet initialised. Reads only; call it before any CUDA work."""
    import torch

    getenv = c_getenv()
    seen = {name: (getenv(name.encode()) or b"").decode() for name in BLOCKING_VARIABLES}
    wanted = {k: v for k, v in job.env_vars.items() if k in BLOCKING_VARIABLES}
    if torch.cuda.is_initialized():
        return _("NOT in effect: CUDA was initialised before the run's variables could act")
    wrong = [f"{k}={seen[k] or '(unset)'}" for k, v in wanted.items() if seen[k] != v]
    if wrong:
        return _("NOT in effect in the child: {variables}").format(variables=", ".join(wrong))
    if not wanted:
        return _("no blocking variable in the child") if not any(seen.values()) else (
            _("set in the child: {variables}").format(
                variables=", ".join(f"{k}={v}" for k, v in seen.items() if v)))
    return _("checked in the child before CUDA initialised")


def run_job(job: Job) -> JobResult:
    """Execute the job's script and cells; return the incident of the first failure (None
    when nothing failed) and the exit code."""
    import torch  # only now: the environment is already final

    disable_compilation_if_asked(torch)
    from cudadiag.batch import new_cell
    from cudadiag.integrations import attach
    from cudadiag.trace import OpTracer

    namespace = _fresh_main()
    namespace.update(_load_shipped(job.ship))
    if job.batch_path is not None and job.batch_step is not None:
        from cudadiag.batch import replay_batch

        replay_batch(job.batch_step, torch.load(job.batch_path, weights_only=False),
                     job.batch_indices, job.batch_full_size)
    if job.script is None:  # the trainers' steps in incidents; one step for --batch
        attach.start()
    elif attach.wanted_in_scripts(os.environ):
        attach.start(off=attach.OFF_IN_A_SCRIPT)
    rng = torch.load(job.rng_path, weights_only=False) if job.rng_path else {}
    tracer = OpTracer(precheck=job.precheck) if job.trace else None
    at_raise: list[LoopContext | None] = []
    if tracer is not None:
        tracer.on_first_raise = lambda error: at_raise.append(_loop_at_raise(error))
    failures: list[tuple[BaseException, int | None]] = []
    loop = None
    exit_code = 0
    cwd = os.getcwd()
    environ = dict(os.environ)  # as the program starts: what its reads see first
    opened = program_files.record_files_read(exclude=[str(job.folder)])
    ranks = spawn.ranks_as_processes(
        Path(job.ranks), lambda exc: _rank_incident(exc, job, tracer)
    ) if job.spawn and job.ranks else nullcontext()
    with tracer or nullcontext(), ranks:
        if job.script is not None:
            exit_code = _run_script(job.script, failures)
        for position, cell in enumerate(job.cells, start=1):
            _restore_rng(rng.get(cell.number), torch)
            new_cell()
            _mark(cell.number, TARGET if position == len(job.cells) else REPLAY)
            try:
                _run_cell(cell.number, cell.source, namespace)
            except (Exception, SystemExit) as exc:
                rankfiles.note_exception(exc)
                failures.append((exc, cell.number))
                if len(failures) == 1:  # read now: later cells change the namespace
                    from cudadiag.loopvars import loop_context  # only where a cell failed

                    loop = loop_context(exc, cell_of)
    files_read = list(opened)  # before cudadiag's own reading of the incident
    caught = _caught_precheck(tracer, failures)
    if caught is not None:
        print(_("cudadiag: the program caught {type} ({message}) and went on; on the GPU the "
                "device's error leaves the CUDA context unusable: it is the first error").format(
            type=type(caught).__name__, message=caught.violation.message()), file=sys.stderr)
        failures.insert(0, (caught, None))
        loop = at_raise[0] if at_raise else None  # the loop has moved on since
    if not failures:
        return JobResult(None, exit_code)
    incident = _incident(failures, job, tracer, loop)
    incident.run.cwd = cwd
    incident.run.files_read = files_read
    incident.run.local_modules = program_files.local_modules(exclude=[str(job.folder)])
    incident.run.environ = _environ_read(job, incident.run.local_modules.values(), environ)
    return JobResult(incident, exit_code if caught is not None and len(failures) == 1 else 1)


def _caught_precheck(tracer: OpTracer | None, failures: list[tuple[BaseException, int | None]]
                     ) -> PrecheckError | None:
    """The precheck error the program caught and did not re-raise (nor raised another error
    from), or None: the first error, though nothing reached cudadiag."""
    if tracer is None or tracer.raised is None:
        return None
    from cudadiag.incident import exception_chain

    if failures and any(e is tracer.raised for e in exception_chain(failures[0][0])):
        return None
    return tracer.raised


def _loop_at_raise(error: BaseException) -> LoopContext | None:
    """The loops and variables of the frames that are raising `error`, read now: a program
    that catches it goes on and changes them."""
    from cudadiag.loopvars import loop_context

    stack: list[tuple[types.FrameType, int, int]] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        stack.append((frame, frame.f_lasti, frame.f_lineno))
        frame = frame.f_back
    probe = RuntimeError(str(error))
    probe.__traceback__ = _linked(reversed(stack))
    return loop_context(probe, cell_of)


def _linked(entries: Iterable[tuple[types.FrameType, int, int]]) -> types.TracebackType | None:
    """A traceback through `entries` ((frame, last instruction, line), outermost first)."""
    tb = None
    for frame, lasti, line in reversed(list(entries)):
        tb = types.TracebackType(tb, frame, lasti, line)
    return tb


def _rank_incident(exc: BaseException, job: Job, tracer: OpTracer | None) -> Incident:
    """The incident of a rank's own error, in a process the cells started
    (isolate/spawn.py): as a cell's, with the loop it failed in."""
    from cudadiag.loopvars import loop_context

    incident = _incident([(exc, None)], job, tracer, loop_context(exc, cell_of))
    incident.run.cwd = os.getcwd()
    return incident


def _environ_read(job: Job, modules: Iterable[str], environ: dict[str, str]
                  ) -> dict[str, str | None]:
    """The variables the program's code (its cells, its script, its own modules) reads, as
    it started with them: None when unset, a secret-named one's value masked (the log never
    holds it); those that describe the machine, and those cudadiag set for the run (the
    blocking variables), are left out."""
    from cudadiag.isolate.envreads import describes_the_machine, environ_reads  # IPython's

    sources = [cell.source for cell in job.cells]
    files = [*([job.script.target] if job.script and not job.script.module else []), *modules]
    for path in files:
        try:
            sources.append(Path(path).read_text())
        except (OSError, UnicodeDecodeError):
            continue
    ours = {*BLOCKING_VARIABLES, *job.env_vars}  # set for the run by cudadiag, not the user
    names = dict.fromkeys(name for source in sources for name in environ_reads(source)
                          if not describes_the_machine(name) and name not in ours)
    return {name: masked_value(name) if name in environ and looks_secret(name)
            else environ.get(name) for name in names}


def _run_script(script: ScriptTarget, failures: list[tuple[BaseException, int | None]]
                ) -> int:
    """Run a script or module as `python SCRIPT ARGS` / `python -m MODULE ARGS` would;
    return its exit code (an uncaught exception is recorded and gives 1)."""
    target = script.target
    sys.argv = [target, *script.argv]
    try:
        if script.module:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            path = os.path.abspath(target)  # as Python 3.9+ makes __main__.__file__
            sys.path.insert(0, os.path.dirname(path))
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # sys.exit("message"), as Python does
        return 1
    except Exception as exc:
        failures.append((exc, None))
        _print_traceback(exc)
        return 1
    return 0


def _print_traceback(exc: BaseException) -> None:
    """Print `exc` as `python SCRIPT` would (through sys.excepthook, which the script may have
    replaced): from the script's frame down to the call that failed, without the frames of
    this worker and runpy above it, nor those of cudadiag's tracer or simulator below it.
    In a rank of a multi-process run, record it with the same frames (torchrun's summary
    shows them)."""
    tb = _linked((f.tb_frame, f.tb_lasti, f.tb_lineno) for f in _script_frames(exc.__traceback__))
    recorded = exc.__traceback__
    exc.__traceback__ = tb  # the hook may read the exception's own traceback
    try:
        sys.excepthook(type(exc), exc, tb)
        rankfiles.note_exception(exc)
    finally:
        exc.__traceback__ = recorded
        sys.stderr.flush()


_RUNNER_FILES = {__file__, runpy.run_path.__code__.co_filename}
"""Frames of the runner, not the user's: this module's and runpy's (`<frozen runpy>`)."""
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_DISPATCH_WRAPPERS = ("torch/_compile.py", "torch/_dynamo/")
"""Frames PyTorch puts between an operator and a dispatch mode's __torch_dispatch__."""


def _script_frames(tb: types.TracebackType | None) -> list[types.TracebackType]:
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    while frames and frames[0].tb_frame.f_code.co_filename in _RUNNER_FILES:
        frames.pop(0)
    files = [f.tb_frame.f_code.co_filename for f in frames]
    inside = next((i for i, name in enumerate(files) if i and name.startswith(_PACKAGE_DIR)),
                  None)
    if inside is None:
        return frames
    while inside > 1 and any(w in files[inside - 1].replace("\\", "/")
                             for w in _DISPATCH_WRAPPERS):
        inside -= 1
    return frames[:inside]


def _mark(number: int, role: str) -> None:
    """Tell the parent, on both streams, that cell `number` starts (see isolate.output)."""
    sys.stdout.flush()
    sys.stderr.flush()
    marker = cell_marker(number, role)
    os.write(1, marker)
    os.write(2, marker)


def _run_cell(number: int, source: str, namespace: dict[str, Any]) -> None:
    filename = CELL_FILENAME.format(number)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def _fresh_main() -> dict[str, Any]:
    """A new `__main__` module, so cloudpickled functions and classes find their globals."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def _load_shipped(path: Path | None) -> dict[str, Any]:
    if not path:
        return {}
    import cloudpickle

    with open(path, "rb") as f:
        values: dict[str, Any] = cloudpickle.load(f)
    return values


def _restore_rng(states: dict[str, Any] | None, torch: Any) -> None:
    """Put the RNG streams back where they were when this cell started in the kernel."""
    if not states:
        return
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "random" in states:
        random.setstate(states["random"])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _incident(failures: list[tuple[BaseException, int | None]], job: Job,
              tracer: OpTracer | None, loop: LoopContext | None) -> Incident:
    """The incident of the first failure; the later ones are its probable consequences."""
    from cudadiag.diagnose import incident_from_exception, later_error
    from cudadiag.incident import RunInfo

    exc, _cell = failures[0]
    script = job.script
    # a script's incident is a `cudadiag run` one from the start: its advice is worded so
    incident = incident_from_exception(
        exc, RunInfo(mode="cli" if script is not None else "isolated", blocking=job.blocking,
                     env_vars=job.env_vars, cells=[c.number for c in job.cells],
                     batch_replay=job.batch_step,
                     command=script.command() if script is not None else []),
        locate_cell=cell_of, op=tracer.failed if tracer is not None else None,
        violation=_violation_in(exc), loop=loop)
    incident.error.later = [later_error(later, cell) for later, cell in failures[1:]]
    return incident


def _violation_in(exc: BaseException) -> Violation | None:
    """The index contract a precheck found broken (its PrecheckError's `violation`) anywhere
    in `exc`'s chain, or None: a program may raise its own error from the precheck's."""
    from cudadiag.incident import exception_chain

    found = (getattr(e, "violation", None) for e in exception_chain(exc))
    return next((v for v in found if v is not None), None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
