"""The incident panel: an ipywidgets view over render.py's sections, with actions and a
browser over the incident log.

Where widgets do not render (nbconvert, GitHub, terminal IPython, a reopened notebook) the
displayed object's mime bundle still carries `text/html` and `text/plain` renderings.
"""

from __future__ import annotations

import html
import textwrap
from operator import itemgetter
from typing import Any

import ipywidgets as widgets

from cudadiag.classification import summary_line
from cudadiag.errors import IncidentNotFound
from cudadiag.i18n import N_, _, localize
from cudadiag.i18n.width import cut_to_width, display_width
from cudadiag.incident import Incident
from cudadiag.knowledge import FAMILIES
from cudadiag.log.entry import LogEntry, by_id, entry_for_incident, failing_cell
from cudadiag.log.store import IncidentStore
from cudadiag.repro.report import render_report
from cudadiag.ui import render, results

PAGE_SIZE = 50
"""Incidents per page of the selector (newest first)."""
TABS = (
    (N_("First error"), ("restart", "error", "loop")),
    (N_("Batch"), ("batch",)),
    (N_("Next checks"), ("checks", "avoid")),
    (N_("Environment"), ("compat", "env")),
    (N_("Later errors"), ("later", "ranks")),
)
"""Each tab's title (shown in the reader's language) and the sections it holds."""
ALL_FAMILIES = N_("all families")
"""The family filter's first choice, in English (the panel shows it in its language)."""
NO_INCIDENT = N_("cudadiag: no incident recorded yet")
by_family = itemgetter(2)


class Panel(widgets.VBox):
    """Shows one incident (the newest of the log by default) and lets the user browse the
    others, re-run its cell isolated, and copy a Markdown report."""

    def __init__(self, incident: Incident | str | None = None, *,
                 store: IncidentStore | None = None, shell: Any = None) -> None:
        super().__init__(layout=widgets.Layout(border="1px solid #ccc", padding="6px"))
        self.add_class("cudadiag-panel")
        self.store = store or IncidentStore()
        self.shell = shell
        self._given = incident if isinstance(incident, Incident) else None
        self._load_entries(self._given)
        self.incident = self._pick(incident)
        self.page = 0
        self.header = widgets.HTML()
        self.tabs = widgets.Tab()
        self.output = widgets.Output()
        self.report = widgets.Textarea(layout=widgets.Layout(width="100%", height="12em",
                                                             display="none"))
        self.all_families = _(ALL_FAMILIES)
        """The family filter's first choice, as this panel shows it."""
        self.family = widgets.Dropdown(description=_("Family"), options=self._families(),
                                       value=self.all_families)
        self.selector = widgets.Dropdown(description=_("Incident"),
                                         layout=widgets.Layout(width="60%"))
        self.newer = widgets.Button(description=_("newer"), icon="chevron-left",
                                    tooltip=_("the {count} newer incidents").format(
                                        count=PAGE_SIZE),
                                    layout=widgets.Layout(width="auto"))
        self.older = widgets.Button(description=_("older"), icon="chevron-right",
                                    tooltip=_("the {count} older incidents").format(
                                        count=PAGE_SIZE),
                                    layout=widgets.Layout(width="auto"))
        self.position = widgets.Label()
        self.rerun = widgets.Button(description=_("Re-run isolated with blocking launches"),
                                    icon="play", layout=widgets.Layout(width="auto"))
        # A kernel cannot write to the browser's clipboard: the report is shown ready to copy.
        self.copy = widgets.Button(description=_("Report to copy"), icon="copy",
                                   tooltip=_("show the Markdown report, ready to copy"),
                                   layout=widgets.Layout(width="auto"))
        self._filling = False
        """True while the selector's options are replaced (it then selects their first)."""
        self._output_of: str | None = None
        """The incident whose report or action output the panel shows, if any."""
        self.family.observe(self._on_family, names="value")
        self.selector.observe(self._on_select, names="value")
        self.newer.on_click(lambda _button: self._turn(-1))
        self.older.on_click(lambda _button: self._turn(+1))
        self.rerun.on_click(self._on_rerun)
        self.export = widgets.Button(description=_("Export repro notebook"), icon="download",
                                     layout=widgets.Layout(width="auto"),
                                     tooltip=_("minimize, write and verify a repro notebook"))
        self.copy.on_click(self._on_copy)
        self.export.on_click(self._on_export)
        self._fill_selector()
        # what a user reads first comes first (at most render.LEAD_BUDGET lines before the
        # tabs); browsing the log comes last
        self.children = [
            self.header,
            self.tabs,
            widgets.HBox([self.rerun, self.copy, self.export]),
            self.report,
            self.output,
            widgets.HBox([self.selector, self.family, self.newer, self.position, self.older]),
        ]
        self.show(self.incident)

    def show(self, incident: Incident | None) -> None:
        """Show `incident` in the lead and the tabs; the report box and the
        actions' output of another incident are closed, so that nothing on the panel
        belongs to an incident it no longer shows."""
        if self._output_of is not None and (incident is None or self._output_of != incident.id):
            self._close_outputs()
        self.incident = incident
        if incident is None:
            self.header.value = f"<b>{html.escape(_(NO_INCIDENT))}</b>"
            self.tabs.children = []
            self.rerun.disabled = self.copy.disabled = self.export.disabled = True
            return
        parts = {p.key: p for p in render.sections(incident)}
        self.header.value = render.lead_html(incident)
        tabs, titles = [], []
        for title, keys in TABS:
            body = "".join(render.section_html(parts[k]) for k in keys if k in parts)
            tabs.append(_tab(body or f"<i>{html.escape(_('nothing recorded'))}</i>"))
            titles.append(_(title))
        for title, part in results.sections_for(self.shell, incident):
            tabs.append(_tab(render.section_html(part)))
            titles.append(title)
        self.tabs.children = tabs
        self.tabs.titles = tuple(titles)
        self.rerun.disabled = not incident.run.cells or self.shell is None
        self.rerun.tooltip = (_("needs the notebook's kernel") if self.shell is None else
                              f"%cuda_isolate {failing_cell(incident)}"
                              if incident.run.cells
                              else _("no cell to re-run"))
        self.copy.disabled = False
        self.export.disabled = self.shell is None

    def _close_outputs(self) -> None:
        self._close_report()
        self.output.clear_output()
        self._output_of = None

    def _close_report(self) -> None:
        self.report.value = ""
        self.report.layout.display = "none"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if self.incident is not None:
            data["text/html"] = render.render_html(self.incident) + "".join(
                render.section_html(part)
                for _, part in results.sections_for(self.shell, self.incident))
            saved = self.store.is_saved(self.incident.id)
            data["text/plain"] = render.render_short(
                self.incident, show=render.SHOW_IN_IPYTHON if saved else None)
        else:
            data["text/html"] = f"<b>{html.escape(_(NO_INCIDENT))}</b>"
            data["text/plain"] = _(NO_INCIDENT)
        return bundle

    def _load_entries(self, shown: Incident | None = None) -> None:
        """Read the log's index: one entry per incident, newest first (and `shown`, an
        incident given that the log does not hold)."""
        entries = self.store.entries()
        if shown is not None and all(e.id != shown.id for e in entries):
            entries.append(entry_for_incident(shown))
        self.entries = entries[::-1]
        self._by_id = dict(zip(map(by_id, self.entries), self.entries, strict=True))

    def _pick(self, incident: Incident | str | None) -> Incident | None:
        if isinstance(incident, Incident):
            return incident
        if isinstance(incident, str):
            return self.store.get(incident)
        newest = next((e for e in self.entries if not e.newer), None)
        return self.store.read(newest) if newest is not None else None

    def _families(self) -> list[str]:
        return [self.all_families, *sorted(set(map(by_family, self.entries)) - {None})]

    def _shown(self) -> list[LogEntry]:
        """The entries the family filter lets through, newest first."""
        family = self.family.value
        if family == self.all_families:
            return self.entries
        return [e for e in self.entries if e.family == family]

    def _fill_selector(self, keep_page: bool = False) -> None:
        """Fill the selector with one page of incidents: the page of the incident shown
        when it is among them (unless `keep_page`), else the current page."""
        shown = self._shown()
        current = self.incident.id if self.incident is not None else None
        at = next((n for n, e in enumerate(shown) if e.id == current), None)
        if at is not None and not keep_page:
            self.page = at // PAGE_SIZE
        self.page = max(0, min(self.page, (len(shown) - 1) // PAGE_SIZE))
        start = self.page * PAGE_SIZE
        page = [e for e in shown[start: start + PAGE_SIZE] if not e.newer]
        # new options select their first one: the incident shown stays until the page is set
        self._filling = True
        try:
            summaries = self.store.summaries(page)
            self.selector.options = [(_option_label(e, summaries[e.id]), e.id) for e in page]
            if current is not None and any(e.id == current for e in page):
                self.selector.value = current
            elif page:
                self.selector.value = page[0].id
        finally:
            self._filling = False
        if self.selector.value is not None and self.selector.value != current:
            self._open(self.selector.value)
        end = min(start + PAGE_SIZE, len(shown))
        self.position.value = (_("{first:,}–{last:,} of {count:,}, newest first").format(
            first=start + 1, last=end, count=len(shown)) if shown else _("no incident"))
        self.newer.disabled = self.page == 0
        self.older.disabled = end >= len(shown)
        paged = "flex" if len(shown) > PAGE_SIZE else "none"  # one page: nothing to turn
        for control in (self.newer, self.position, self.older):
            control.layout.display = paged

    def _turn(self, pages: int) -> None:
        self.page += pages
        self._fill_selector(keep_page=True)

    def _on_family(self, change: dict[str, Any]) -> None:
        self._fill_selector()

    def _on_select(self, change: dict[str, Any]) -> None:
        if not self._filling:
            self._open(change["new"])

    def _open(self, incident_id: str | None) -> None:
        """Show the incident of the log whose id is `incident_id`, unless it is shown."""
        chosen = self._by_id.get(incident_id) if incident_id is not None else None
        if chosen is None or (self.incident is not None and chosen.id == self.incident.id):
            return
        if self._given is not None and chosen.id == self._given.id:
            self.show(self._given)
            return
        try:
            self.show(self.store.read(chosen))
        except IncidentNotFound as exc:  # pruned since the panel listed it
            with self.output:
                print(_("cudadiag: {error}").format(error=exc))

    def _on_rerun(self, _button: Any) -> None:
        incident = self.incident
        if incident is None or not incident.run.cells or self.shell is None:
            return
        cell = failing_cell(incident)
        self.rerun.disabled = True
        self._close_report()  # the re-run may end showing its own incident
        self.output.clear_output()
        self._output_of = incident.id
        with self.output:
            print(_("re-running In[{cell}] isolated with blocking launches...").format(
                cell=cell))
            self.shell.run_line_magic("cuda_isolate", str(cell))
        self.rerun.disabled = False
        self._load_entries()
        self.family.options = self._families()
        newest = self.entries[0] if self.entries else None
        if newest is not None and newest.mode == "isolated":
            self.incident = self.store.read(newest)
            self._output_of = newest.id  # the re-run's output is the new incident's
        self._fill_selector()
        self.show(self.incident)

    def _on_export(self, _button: Any) -> None:
        if self.incident is None or self.shell is None:
            return
        self.export.disabled = True
        self.output.clear_output()
        self._output_of = self.incident.id
        with self.output:
            self.shell.run_line_magic("cudadiag", f"export {self.incident.id}")
        self.export.disabled = False

    def _on_copy(self, _button: Any) -> None:
        if self.incident is None:
            return
        self.output.clear_output()
        self.report.value = report_for_the_box(self.incident)
        self.report.layout.display = "block"
        self._output_of = self.incident.id
        with self.output:
            print(_("The Markdown report (personal data and secrets removed) is in the box "
                    "above: select it and copy (Ctrl+C)."))


TAB_HEIGHT = "32em"
"""Every tab is this high (its content scrolls): the buttons under the tabs stay put."""


def _tab(content: str) -> widgets.HTML:
    return widgets.HTML(content, layout=widgets.Layout(height=TAB_HEIGHT, overflow="auto"))


def report_for_the_box(incident: Incident) -> str:
    """The Markdown report of `incident` as the report box holds it: a first line naming
    the incident (its id, time and cell or script), then the report."""
    entry = entry_for_incident(incident)
    when = incident.created_at[:16].replace("T", " ")
    return (_("**cudadiag incident** `{id}` ({when}, {where})").format(
        id=incident.id, when=when, where=entry.where()) + "\n\n" + render_report(incident))


def _option_label(entry: LogEntry, summary: str) -> str:
    """`12-04 02:38  In[4]  device_assert: target 4 at position 3 … (isolated)`: when,
    where, and what failed in a few words (`summary`, in the language of the moment,
    without its family's title)."""
    what = _without_family_title(summary, entry.family)
    return (f"{entry.created_at[5:16].replace('T', ' ')}  {entry.where()}  "
            f"{entry.family or 'unknown'}: {_shortened(what, 64)}  ({entry.mode or '?'})")


def _without_family_title(summary: str, family: str | None) -> str:
    """`summary` less the family's title that begins it (`Device-side assertion: `, as the
    language of the moment words it), which the label names by the family; the whole
    summary where another title begins it (a pitfall's) or none does (a job's ranks)."""
    known = FAMILIES.get(family or "")
    if known is None:
        return summary
    title = localize(summary_line(known.title, ""))
    return summary.removeprefix(title)


def _shortened(text: str, width: int) -> str:
    """`text` in at most `width` columns (a wide character takes two), cut at a word where
    it has spaces, ending with ` …` when cut."""
    if display_width(text) <= width:
        return text
    if " " in text and display_width(text) == len(text):
        return textwrap.shorten(text, width, placeholder=" …")
    return cut_to_width(text, width - 2) + " …"
