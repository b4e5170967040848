"""A result that displays itself in a notebook (its HTML) and prints as its text: the base of
each feature's view (a comparison, a validation, a fix check)."""

from __future__ import annotations

import contextlib
from html import escape
from typing import Any, TypeVar

from cudadiag.ui.render import Section, section_html

Result = TypeVar("Result")


class Displayed:
    """Mixed in before a result's dataclass: `text()` and `html()` are the feature's."""

    shown_above = False
    """True once CommandOutput.replace() showed it in place of its command's progress: the
    cell's own display of it (Out[N]) then shows nothing more, once."""

    def _ipython_display_(self) -> None:
        if self.shown_above:
            self.shown_above = False
            return
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)

    def text(self) -> str:
        """Return the result as plain text (what `print` and a terminal show)."""
        raise NotImplementedError

    def html(self) -> str:
        """Return the result as one self-contained HTML block."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def __str__(self) -> str:
        return self.text()


def as_view(view: type[Result], result: Any) -> Result:
    """Return `result` as an instance of `view` (a Displayed subclass of its class), with
    the same fields."""
    return view(**vars(result))


def section_block(css_class: str, data: dict[str, Any], section: Section) -> str:
    """Return `section` as one self-contained HTML block: a div of `css_class` whose
    `data-*` attributes are `data` (what a panel or a test finds it by)."""
    attributes = "".join(f' data-{key}="{escape(str(value))}"' for key, value in data.items())
    return f'<div class="{css_class}"{attributes}>{section_html(section)}</div>'


class CommandOutput:
    """What a command prints while it runs, kept in one output of the cell that its result
    replaces at the end: one output per command in a notebook kernel. Elsewhere (a terminal)
    the lines are printed as they come."""

    def __init__(self, shell: Any) -> None:
        self.live = getattr(shell, "kernel", None) is not None
        self.text = ""
        self._handle: Any = None
        self._redirect: Any = None

    def __enter__(self) -> CommandOutput:
        if self.live:
            from IPython.display import display

            self._handle = display({"text/plain": ""}, raw=True, display_id=True)
            self._redirect = contextlib.redirect_stdout(self)
            self._redirect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._redirect is not None:
            self._redirect.__exit__(*exc)
            self._redirect = None

    def write(self, text: str) -> int:
        """Add `text` to the progress shown (a `\r` redraws its line)."""
        self.text += text
        if self._handle is not None:
            shown = "\n".join(line.rsplit("\r", 1)[-1] for line in self.text.split("\n"))
            self._handle.update({"text/plain": shown}, raw=True)
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: every write is shown at once."""

    def replace(self, result: Displayed) -> Displayed:
        """Show `result` in place of the progress (live); return it, marked as shown."""
        if self._handle is not None:
            self._handle.update(result._repr_mimebundle_(), raw=True)
            result.shown_above = True
        return result
