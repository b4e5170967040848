"""Lists cut for display: the first items, then how many were left out (`… and 61 more`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cudadiag.i18n import _


def cut_join(items: Iterable[Any], limit: int, text: Callable[[Any], str] = str,
             omitted: int = 0) -> str:
    """Return `a, b, c, … and N more`: at most `limit` items written by `text`; N counts the
    items past the limit plus `omitted`, those already left out by the caller. Raises
    ValueError for a limit below 1."""
    if limit < 1:
        raise ValueError(f"a list is cut to at least 1 item, not {limit}")
    items = list(items)
    shown = ", ".join(text(item) for item in items[:limit])
    left = max(0, len(items) - limit) + omitted
    if not left:
        return shown
    if shown:
        return _("{shown}, … and {count} more").format(shown=shown, count=left)
    return _("… {count} more").format(count=left)


def cut_list(items: Iterable[Any], limit: int, text: Callable[[Any], str] = repr) -> str:
    """Return `[a, b, c, … and N more]` (`[a, b]` when it fits in `limit`)."""
    return f"[{cut_join(items, limit, text)}]"


def cut_pairs(pairs: Iterable[tuple[str, str]], limit: int, omitted: int = 0) -> str:
    """Return `a=1, b=2, … and N more` for (name, value text) pairs."""
    return cut_join((f"{name}={value}" for name, value in pairs), limit, omitted=omitted)
