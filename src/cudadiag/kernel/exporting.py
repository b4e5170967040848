"""`%cudadiag export` inside IPython: where the minimization runs and where its progress goes.

In a notebook kernel it runs in a background thread, so the kernel stays usable; a progress
bar and the final result are widgets in the export cell's output area (widget messages reach
that cell whichever cell runs when they are sent). In a terminal IPython it runs in the
foreground with a progress line, and Ctrl-C stops it early, keeping the best candidate.
"""

from __future__ import annotations

import html
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from cudadiag.incident import Incident
from cudadiag.repro.export import ExportError, ReproInputs, export_repro
from cudadiag.repro.minimize import MinimizeError, MinimizeInterrupted, Progress
from cudadiag.store import IncidentStore
from cudadiag.ui.render import render_export

THREAD_NAME = "cudadiag export"


def run_export(shell: Any, incident: Incident, path: Path, inputs: ReproInputs, *,
               max_trials: int, timeout: float, bundle: bool, store: IncidentStore,
               background: bool = True) -> threading.Thread | None:
    """Export `incident` to `path`. In a notebook kernel: in a background thread named
    THREAD_NAME (returned), its errors shown in the export cell; with `background` False,
    in the kernel's thread with the same progress bar, its errors raised. In a terminal: in
    the foreground with a progress line. Raises ExportError or MinimizeError when it runs
    in the foreground; Ctrl-C before the reference run ended prints "stopped early"."""
    intro = (f"minimizing {len(inputs.cells)} cell(s) of incident {incident.id}, each "
             f"candidate in a fresh process (at most {timeout:g} s)...")

    def export(progress: Progress) -> tuple[Any, Any]:
        return export_repro(incident, path, inputs, max_trials=max_trials, timeout=timeout,
                            progress=progress, bundle=bundle, store=store)

    if getattr(shell, "kernel", None) is None:
        print(intro)
        try:
            print(render_export(*export(progress_line(max_trials, timeout))))
        except MinimizeInterrupted:
            print(f"\n{STOPPED_EARLY}", file=sys.stderr)
        return None
    view = _ExportView(intro, max_trials, timeout)
    if not background:  # nbconvert, papermill: the printed result stays in the notebook
        print(view.run(export, raise_errors=True))
        return None
    thread = threading.Thread(target=view.run, name=THREAD_NAME, daemon=True, args=(export,))
    thread.start()
    return thread


STOPPED_EARLY = ("cudadiag export: stopped early: interrupted before the full program's run "
                 "finished; nothing was written")


class _ExportView:
    """The widgets in the export cell: a progress bar (the share of the trial or time
    budget used, whichever is larger) and the result, updated from the export's thread."""

    def __init__(self, intro: str, max_trials: int, timeout: float) -> None:
        import ipywidgets
        from IPython.display import display

        self.budget = _Budget(max_trials, timeout)
        self.bar = ipywidgets.IntProgress(min=0, max=100, description="minimizing",
                                          bar_style="info")
        self.status = ipywidgets.HTML(value=_pre(intro))
        display(ipywidgets.VBox([self.bar, self.status]))

    def run(self, export: Any, raise_errors: bool = False) -> str:
        """Run `export(progress)`, show how it ended and return that text; errors are
        shown, and raised again with `raise_errors` (in the kernel's thread)."""
        try:
            minimized, exported = export(self.progress)
        except MinimizeInterrupted:
            return self._finish(STOPPED_EARLY, "warning")
        except (MinimizeError, ExportError) as exc:
            self._finish(f"cudadiag export: {exc}", "danger")
            if raise_errors:
                raise
            return str(exc)
        except Exception:  # a bug: shown where the user looks, not lost in a thread
            text = self._finish("cudadiag export failed inside cudadiag:\n"
                                + traceback.format_exc(), "danger")
            if raise_errors:
                raise
            return text
        self.bar.value = self.bar.max
        return self._finish(render_export(minimized, exported).strip(),
                            "success" if exported.reproduces else "warning")

    def progress(self, trials: int, size: int, phase: str) -> None:
        self.bar.value = self.budget.percent_used(trials)
        self.bar.description = f"{phase}: {size}"

    def _finish(self, text: str, style: str) -> str:
        self.bar.bar_style = style
        self.bar.description = "done" if style == "success" else "stopped"
        self.status.value = _pre(text)
        return text


class _Budget:
    """How much of an export's budget (trials, seconds) is used."""

    def __init__(self, max_trials: int, timeout: float) -> None:
        self.max_trials = max_trials
        self.timeout = timeout
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def percent_used(self, trials: int) -> int:
        used = max(trials / self.max_trials, self.elapsed() / self.timeout)
        return min(int(100 * used), 100)


def progress_line(max_trials: int, timeout: float) -> Progress:
    """A progress callback that rewrites one terminal line: trials, best size, time used."""
    budget = _Budget(max_trials, timeout)

    def line(trials: int, size: int, phase: str) -> None:
        sys.stdout.write(f"\r  trial {trials}/{max_trials}, best {size} {phase}, "
                         f"{budget.elapsed():.0f} of {timeout:g} s   ")
        sys.stdout.flush()

    return line


def _pre(text: str) -> str:
    return f"<pre style='margin:0'>{html.escape(text)}</pre>"
