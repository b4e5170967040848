"""The extension's entry points: what `%load_ext cudadiag` and `%unload_ext cudadiag` do."""

from __future__ import annotations

from typing import Any

from cudadiag.capture.shell_state import capture_for, forget_capture
from cudadiag.kernel.compare_magics import CompareMagics
from cudadiag.kernel.isolate_magics import IsolateMagics
from cudadiag.kernel.magics import CudadiagMagics


def load(shell: Any) -> None:
    """Register the callbacks and magics on `shell`; ingest the error that just happened;
    add cudadiag's callbacks to the trainers of Hugging Face and Lightning; start the
    kernel's warm interpreter in the background."""
    from cudadiag import checkpoint
    from cudadiag.integrations import attach
    from cudadiag.isolate import warm

    capture = capture_for(shell)
    capture.register()
    checkpoint.follow_incidents(capture)
    shell.register_magics(CudadiagMagics)
    shell.register_magics(IsolateMagics)
    from cudadiag.steps import start_profiling

    shell.register_magics(CompareMagics)
    # the running cell is the last of the raw history (IPython 8 and 9 differ on when
    # execution_count moves)
    start_profiling(lambda: len(shell.history_manager.input_hist_raw) - 1)
    capture.ingest_last_error()
    attach.start()
    warm.start()


def unload(shell: Any) -> None:
    """Remove the callbacks and the sticky warnings from `shell`; stop the kernel's warm
    interpreter; profile no more watch() steps; add no more callbacks to trainers."""
    from cudadiag import checkpoint
    from cudadiag.integrations import attach
    from cudadiag.isolate import warm
    from cudadiag.steps import stop_profiling

    stop_profiling()
    attach.stop()
    capture = forget_capture(shell)
    if capture is not None:
        capture.unregister()
        if checkpoint.followed_incidents() is capture:
            checkpoint.follow_incidents(None)
    warm.stop()
