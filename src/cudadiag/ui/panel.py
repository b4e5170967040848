"""The incident panel: an ipywidgets view over render.py's sections, with actions and a
browser over the incident log.

Where widgets do not render (nbconvert, GitHub, terminal IPython, a reopened notebook) the
displayed object's mime bundle still carries `text/html` and `text/plain` renderings.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as widgets

from cudadiag.incident import Incident
from cudadiag.kernel.store import IncidentStore
from cudadiag.repro.report import render_report
from cudadiag.ui import render

TABS = (
    ("First error", ("error", "loop")),
    ("Batch", ("batch",)),
    ("Next checks", ("checks", "avoid")),
    ("Environment", ("env",)),
    ("Later errors", ("later", "ranks")),
)
ALL_FAMILIES = "all families"


class Panel(widgets.VBox):
    """Shows one incident (the newest of the log by default) and lets the user browse the
    others, re-run its cell isolated, and copy a Markdown report."""

    def __init__(self, incident: Incident | str | None = None, *,
                 store: IncidentStore | None = None, shell: Any = None) -> None:
        super().__init__(layout=widgets.Layout(border="1px solid #ccc", padding="6px"))
        self.add_class("cudadiag-panel")
        self.store = store or IncidentStore()
        self.shell = shell
        self.known = self.store.load()
        if isinstance(incident, Incident) and all(i.id != incident.id for i in self.known):
            self.known.append(incident)
        self.incident = self._pick(incident)
        self.header = widgets.HTML()
        self.banner = widgets.HTML()
        self.tabs = widgets.Tab()
        self.output = widgets.Output()
        self.report = widgets.Textarea(layout=widgets.Layout(width="100%", height="12em",
                                                             display="none"))
        self.family = widgets.Dropdown(description="Family", options=self._families(),
                                       value=ALL_FAMILIES)
        self.selector = widgets.Dropdown(description="Incident",
                                         layout=widgets.Layout(width="60%"))
        self.rerun = widgets.Button(description="Re-run isolated with blocking launches",
                                    icon="play", layout=widgets.Layout(width="auto"))
        # A kernel cannot write to the browser's clipboard: the report is shown ready to copy.
        self.copy = widgets.Button(description="Report to copy", icon="copy",
                                   tooltip="show the Markdown report, ready to copy")
        self.family.observe(self._on_family, names="value")
        self.selector.observe(self._on_select, names="value")
        self.rerun.on_click(self._on_rerun)
        self.export = widgets.Button(description="Export repro notebook", icon="download",
                                     layout=widgets.Layout(width="auto"),
                                     tooltip="minimize, write and verify a repro notebook")
        self.copy.on_click(self._on_copy)
        self.export.on_click(self._on_export)
        self._fill_selector()
        self.children = [
            widgets.HBox([self.selector, self.family]),
            self.header,
            self.banner,
            self.tabs,
            widgets.HBox([self.rerun, self.copy, self.export]),
            self.report,
            self.output,
        ]
        self.show(self.incident)

    def show(self, incident: Incident | None) -> None:
        """Show `incident` in the header, the banner and the tabs."""
        self.incident = incident
        if incident is None:
            self.header.value = "<b>cudadiag: no incident recorded yet</b>"
            self.banner.value = ""
            self.tabs.children = []
            self.rerun.disabled = self.copy.disabled = self.export.disabled = True
            return
        parts = {p.key: p for p in render.sections(incident)}
        head = render.header_lines(incident)
        self.header.value = "<b>{}</b>{}".format(
            escape(head[0]), "".join(f"<div>{escape(x)}</div>" for x in head[1:]))
        self.banner.value = render.section_html(parts["restart"]) if "restart" in parts else ""
        tabs, titles = [], []
        for title, keys in TABS:
            html = "".join(render.section_html(parts[k]) for k in keys if k in parts)
            tabs.append(widgets.HTML(html or "<i>nothing recorded</i>"))
            titles.append(title)
        self.tabs.children = tabs
        self.tabs.titles = tuple(titles)
        self.rerun.disabled = not incident.run.cells or self.shell is None
        self.rerun.tooltip = ("needs the notebook's kernel" if self.shell is None else
                              f"%cuda_isolate {incident.run.cells[0]}" if incident.run.cells
                              else "no cell to re-run")
        self.copy.disabled = False
        self.export.disabled = self.shell is None

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if self.incident is not None:
            data["text/html"] = render.render_html(self.incident)
            saved = self.store.is_saved(self.incident.id)
            data["text/plain"] = render.render_short(
                self.incident, show=render.SHOW_IN_IPYTHON if saved else None)
        else:
            data["text/html"] = "<b>cudadiag: no incident recorded yet</b>"
            data["text/plain"] = "cudadiag: no incident recorded yet"
        return bundle

    def _pick(self, incident: Incident | str | None) -> Incident | None:
        if isinstance(incident, Incident):
            return incident
        if isinstance(incident, str):
            return self.store.get(incident)
        return self.known[-1] if self.known else None

    def _families(self) -> list[str]:
        return [ALL_FAMILIES, *sorted({i.diagnosis.family for i in self.known})]

    def _fill_selector(self) -> None:
        family = self.family.value
        shown = [i for i in reversed(self.known)
                 if family == ALL_FAMILIES or i.diagnosis.family == family]
        self.selector.options = [(_option_label(i), i.id) for i in shown]
        if self.incident is not None and any(i.id == self.incident.id for i in shown):
            self.selector.value = self.incident.id
        elif shown:
            self.selector.value = shown[0].id

    def _on_family(self, change: dict[str, Any]) -> None:
        self._fill_selector()

    def _on_select(self, change: dict[str, Any]) -> None:
        chosen = next((i for i in self.known if i.id == change["new"]), None)
        if chosen is not None and chosen is not self.incident:
            self.show(chosen)

    def _on_rerun(self, _button: Any) -> None:
        incident = self.incident
        if incident is None or not incident.run.cells or self.shell is None:
            return
        cell = incident.run.cells[0]
        self.rerun.disabled = True
        self.output.clear_output()
        with self.output:
            print(f"re-running In[{cell}] isolated with blocking launches...")
            self.shell.run_line_magic("cuda_isolate", str(cell))
        self.rerun.disabled = False
        self.known = self.store.load()
        self.family.options = self._families()
        newest = self.known[-1] if self.known else None
        if newest is not None and newest.run.mode == "isolated":
            self.incident = newest
        self._fill_selector()
        self.show(self.incident)

    def _on_export(self, _button: Any) -> None:
        if self.incident is None or self.shell is None:
            return
        self.export.disabled = True
        self.output.clear_output()
        with self.output:
            self.shell.run_line_magic("cudadiag", f"export {self.incident.id}")
        self.export.disabled = False

    def _on_copy(self, _button: Any) -> None:
        if self.incident is None:
            return
        self.report.value = render_report(self.incident)
        self.report.layout.display = "block"
        with self.output:
            print("The Markdown report (personal data and secrets removed) is in the box "
                  "above: select it and copy (Ctrl+C).")


def _option_label(incident: Incident) -> str:
    where = f"In[{incident.run.cells[0]}]" if incident.run.cells else incident.run.mode
    return (f"{incident.created_at[:19].replace('T', ' ')}  {incident.diagnosis.family}  "
            f"{where}  {incident.run.mode}  {incident.id}")
