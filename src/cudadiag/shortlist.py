"""Lists cut for display: the first items, then how many were left out (`… and 61 more`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def cut_list(items: Iterable[Any], limit: int, text: Callable[[Any], str] = repr) -> str:
    """Return `[a, b, c, … and N more]` (or the whole `[a, b]` when it fits in `limit`),
    each item written by `text`. Raises ValueError for a limit below 1."""
    if limit < 1:
        raise ValueError(f"a list is cut to at least 1 item, not {limit}")
    items = list(items)
    shown = ", ".join(text(item) for item in items[:limit])
    left = len(items) - limit
    return f"[{shown}, … and {left} more]" if left > 0 else f"[{shown}]"


def cut_pairs(pairs: Iterable[tuple[str, str]], limit: int, omitted: int = 0) -> str:
    """Return `a=1, b=2, … and N more` for (name, value text) pairs; `omitted` counts pairs
    already left out before these."""
    pairs = list(pairs)
    shown = ", ".join(f"{name}={value}" for name, value in pairs[:limit])
    left = max(0, len(pairs) - limit) + omitted
    return f"{shown}, … and {left} more" if left else shown
