"""The kernel's warm interpreter: one fork server per kernel process, started in the
background by `%load_ext cudadiag` (loading does not wait for it), which every isolated run
of the kernel forks from: `%%blocking_launch`, `%cuda_isolate`, the panel's re-run button and
the minimizer of `%cudadiag export`.

When it cannot serve a run, the run gets a cold start (a new interpreter) and says why in one
line: not ready yet, dead, refused (CUDA was initialised in it, an installed module changed),
started under other start-up variables (`OMP_NUM_THREADS`...), no safe `fork` on this platform.
A server that died, refused or has other start-up variables is restarted in the background
for the next run. It is stopped at `%unload_ext cudadiag` and at exit; a server whose kernel
died sees its control socket close and exits, killing the runs it started.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from cudadiag.i18n import N_, _
from cudadiag.isolate import refusals
from cudadiag.isolate.launcher import (
    ChildProcess,
    ForkRefused,
    ForkServer,
    SubprocessLauncher,
    child_environment,
    startup_difference,
)

_lock = threading.Lock()
_server: ForkServer | None = None
_stopped_by = N_("the extension is not loaded")
"""Why there is no server, when there is none."""
_not_warm: set[str] = set()
"""Top-level modules whose import initialised CUDA in a server: never imported there again."""


def unsupported() -> str | None:
    """Return why this platform gets no warm interpreter (fork is missing, or unsafe once
    system frameworks are loaded, as on macOS), or None on Linux."""
    if sys.platform.startswith("linux") and hasattr(os, "fork"):
        return None
    return _("warm starts need Linux (fork is missing or unsafe on {platform})").format(
        platform=sys.platform)


def start() -> None:
    """Start the kernel's warm interpreter in the background, unless one runs already or
    the platform has none; returns at once. Raises nothing: a server that cannot be
    started is a cold start later, said then."""
    global _server, _stopped_by
    with _lock:
        if unsupported() or (_server is not None and _server.alive):
            return
        try:
            _server = ForkServer(child_environment({}))
        except OSError as exc:
            _server, _stopped_by = None, _("the warm interpreter could not be started: "
                                           "{error}").format(error=exc)
            return
    atexit.register(stop)


def stop(reason: str = N_("stopped at %unload_ext cudadiag")) -> None:
    """Stop the kernel's warm interpreter (it kills the runs it still has), if one runs, and
    forget the modules it refused to import (the next `start()` begins afresh)."""
    global _server, _stopped_by
    with _lock:
        server, _server, _stopped_by = _server, None, reason
        _not_warm.clear()
    atexit.unregister(stop)
    if server is not None:
        server.close()


def current() -> ForkServer | None:
    """Return the kernel's warm interpreter (running or starting), or None."""
    return _server


def wait_ready(timeout: float | None = None) -> bool:
    """Wait up to `timeout` seconds (None: until it is ready or dies) for the kernel's warm
    interpreter; return True when it is ready."""
    server = _server
    return server is not None and server.ready(wait=timeout)


class WarmLauncher:
    """Forks each run from the kernel's warm interpreter, in `cwd` (default: this process's
    working directory at each run), with the warm imports of the run's cells; falls back to a
    cold start (see the module). `cold` asks for a cold start (`--cold`); `wait` is how long
    a run waits for a server that is still starting before it goes cold (None: as long as
    it takes, for a caller with many runs)."""

    def __init__(self, cwd: str | None = None, cold: bool = False,
                 wait: float | None = 0) -> None:
        self.cwd = cwd
        self.cold = cold
        self.wait = wait

    def start(self, job_path: str, env: dict[str, str]) -> ChildProcess:
        """Start the job's process, warm or cold (its `how` and `fallback` say which and
        why); raises OSError when no process can be started at all."""
        process: ChildProcess
        if self.cold:
            process = SubprocessLauncher(cwd=self.cwd).start(job_path, env)
            process.how = _("cold start (--cold)")
            return process
        reason = _why_not_warm(env, self.wait)
        if reason is None:
            try:
                process = _server_or_raise().fork(job_path, env, self.cwd or os.getcwd(),
                                                  _not_warm)
                process.how = _("warm start (forked from the kernel's warm interpreter)")
                return process
            except ForkRefused as exc:
                if exc.kind == refusals.IMPORT_INITIALISED_CUDA:
                    _not_warm.add(exc.module.partition(".")[0])
                reason = _("the warm interpreter refused the run ({error}); restarting "
                           "it").format(error=exc)
                _restart(env)
            except OSError as exc:
                reason = _("the warm interpreter failed ({error}); restarting it").format(
                    error=exc)
                _restart(env)
        process = SubprocessLauncher(cwd=self.cwd).start(job_path, env)
        process.how = _("cold start: {reason}").format(reason=reason)
        process.fallback = reason
        return process


def _why_not_warm(env: dict[str, str], wait: float | None) -> str | None:
    """Return why this run cannot fork from the warm interpreter (restarting it when that
    helps the next run), or None when it can."""
    platform = unsupported()
    if platform:
        return platform
    server = _server
    if server is None:
        return _("no warm interpreter ({why})").format(why=_(_stopped_by))
    if not server.alive:
        reason = _("the warm interpreter died ({how}); restarting it").format(
            how=server.why_dead())
        _restart(env)
        return reason
    changed = startup_difference(server.env, env)
    if changed:
        _restart(env)
        return _("{name} differs from the warm interpreter's, which is read at start-up; "
                 "restarting it with the new value").format(name=changed)
    if not server.ready(wait=wait):
        if not server.alive:
            return _why_not_warm(env, 0)
        return _("the warm interpreter is still starting ({seconds:.1f} s since it was "
                 "started)").format(seconds=time.monotonic() - server.started_at)
    return None


def _server_or_raise() -> ForkServer:
    server = _server
    if server is None:
        raise OSError(_("the warm interpreter was stopped"))
    return server


def _restart(env: dict[str, str]) -> None:
    """Replace the server by a new one started under `env`, in the background."""
    global _server, _stopped_by
    with _lock:
        old, _server = _server, None
    if old is not None:
        threading.Thread(target=old.close, name="cudadiag warm stop", daemon=True).start()
    try:
        server = ForkServer(env)
    except OSError as exc:
        _stopped_by = _("the warm interpreter could not be restarted: {error}").format(
            error=exc)
        return
    with _lock:
        if _server is None:
            _server = server
            return
    server.close()  # another thread restarted it first
