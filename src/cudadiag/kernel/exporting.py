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
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag import commands
from cudadiag.commands import STOPPED_EARLY, Budget, ExportOptions, export_intro, progress_line
from cudadiag.errors import ExportError, MinimizeError, MinimizeInterrupted
from cudadiag.i18n import N_, _
from cudadiag.incident import Incident
from cudadiag.log.store import IncidentStore
from cudadiag.repro.view import render_export

if TYPE_CHECKING:
    from cudadiag.repro.export import ReproInputs
    from cudadiag.repro.minimize import Progress

THREAD_NAME = "cudadiag export"


def run_export(shell: Any, incident: Incident, path: Path, inputs: ReproInputs,
               options: ExportOptions, *, store: IncidentStore,
               background: bool = True) -> threading.Thread | None:
    """Export `incident` to `path`. In a notebook kernel: in a background thread named
    THREAD_NAME (returned), its errors shown in the export cell; with `background` False,
    in the kernel's thread with the same progress bar, its errors raised. In a terminal: in
    the foreground with a progress line. Raises ExportError or MinimizeError when it runs
    in the foreground; Ctrl-C before the reference run ended prints "stopped early"."""
    intro = export_intro(incident, inputs, options.timeout)

    def export(progress: Progress) -> tuple[Any, Any]:
        return commands.export(store, incident, path, inputs, options, progress)

    if getattr(shell, "kernel", None) is None:
        print(intro)
        try:
            print(render_export(*export(progress_line(options.max_trials, options.timeout))))
        except MinimizeInterrupted:
            print(f"\ncudadiag export: {_(STOPPED_EARLY)}", file=sys.stderr)
        return None
    view = _ExportView(intro, options.max_trials, options.timeout)
    if not background:  # nbconvert, papermill: the outcome stays in the view's static form
        view.run(export, raise_errors=True)
        return None
    thread = threading.Thread(target=view.run, name=THREAD_NAME, daemon=True, args=(export,))
    thread.start()
    return thread


class _ExportView:
    """The widgets in the export cell: a progress bar (the share of the trial or time
    budget used, whichever is larger) and the result, updated from the export's thread.
    Where widgets do not render (nbconvert, a notebook reopened without its widget state)
    the output reads as text: what the export is doing, then how it ended (the output is
    displayed again with the outcome)."""

    def __init__(self, intro: str, max_trials: int, timeout: float) -> None:
        import ipywidgets
        from IPython.display import display

        self.budget = Budget(max_trials, timeout)
        self.bar = ipywidgets.IntProgress(min=0, max=100, description=_("minimizing"),
                                          bar_style="info")
        self.text = intro
        self.status = ipywidgets.HTML(value=_pre(intro))
        self.box = ipywidgets.VBox([self.bar, self.status])
        self.shown = display(self, display_id=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.box._repr_mimebundle_(**kwargs) or {}
        data: dict[str, Any] = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["text/plain"] = self.text
        data["text/html"] = _pre(self.text)
        return data

    def run(self, export: Any, raise_errors: bool = False) -> str:
        """Run `export(progress)`, show how it ended and return that text; errors are
        shown, and raised again with `raise_errors` (in the kernel's thread)."""
        try:
            minimized, exported = export(self.progress)
        except MinimizeInterrupted:
            return self._finish(f"cudadiag export: {_(STOPPED_EARLY)}", "warning")
        except (MinimizeError, ExportError) as exc:
            self._finish(f"cudadiag export: {exc}", "danger")
            if raise_errors:
                raise
            return str(exc)
        except Exception:  # a bug: shown where the user looks, not lost in a thread
            text = self._finish(_("cudadiag export failed inside cudadiag:") + "\n"
                                + traceback.format_exc(), "danger")
            if raise_errors:
                raise
            return text
        self.bar.value = self.bar.max
        return self._finish(render_export(minimized, exported).strip(),
                            "success" if exported.reproduces else "warning")

    def progress(self, trials: int, size: int, phase: str) -> None:
        self.bar.value = self.budget.percent_used(trials)
        self.bar.description = _(_PHASES.get(phase, phase)) + f": {size}"

    def _finish(self, text: str, style: str) -> str:
        self.bar.bar_style = style
        self.bar.description = _("done") if style == "success" else _("stopped")
        self.status.value = _pre(text)
        self.text = text
        if self.shown is not None:
            self.shown.update(self)
        return text


_PHASES = {"cells": N_("cells"), "statements": N_("statements"), "loop": N_("loop")}
"""The minimizer's phases, as the progress bar names them."""


def _pre(text: str) -> str:
    return f"<pre style='margin:0'>{html.escape(text)}</pre>"
