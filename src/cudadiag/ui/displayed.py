"""A result that displays itself in a notebook (its HTML) and prints as its text: the base of
each feature's view (a comparison, a validation, a fix check)."""

from __future__ import annotations

from html import escape
from typing import Any, TypeVar

from cudadiag.ui.render import Section, section_html

Result = TypeVar("Result")


class Displayed:
    """Mixed in before a result's dataclass: `text()` and `html()` are the feature's."""

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
