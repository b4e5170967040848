"""What a kernel shows when cudadiag files an incident there: the panel under the failing cell
in a notebook kernel (its mime bundle carries HTML and text fallbacks), the short text in a
terminal IPython, and the one-line reminder before every cell of a poisoned kernel.

The kernel hook produces incidents and knows nothing of how they are shown: the extension
(kernel/magics.py) gives it a KernelAnnouncer.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from cudadiag.incident import Incident
from cudadiag.log.store import IncidentStore
from cudadiag.ui import render


@dataclass(frozen=True)
class KernelAnnouncer:
    """Shows incidents in `shell`, whose log is `store`."""

    shell: Any
    store: IncidentStore

    def incident(self, incident: Incident, saved: bool) -> None:
        """Show `incident` under the failing cell. One that was not saved gets no `show`
        hint: it could not be opened."""
        if getattr(self.shell, "kernel", None) is None:
            show = render.SHOW_IN_IPYTHON if saved else None
            print(render.render_short(incident, show=show), file=sys.stderr)
            return
        from IPython.display import display

        from cudadiag.panel.widget import Panel

        display(Panel(incident, store=self.store, shell=self.shell))

    def poisoned(self, incident: Incident) -> None:
        """Remind, before a cell runs, that `incident` left the CUDA context unusable. Sent
        at once: a notebook keeps its streams in the order they are flushed, and the cell's
        own output must come after."""
        print(render.sticky_warning_line(incident), file=sys.stderr, flush=True)
