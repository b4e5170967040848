"""Text measured as a terminal shows it: a wide character (Japanese, East Asian Width W or F)
takes two columns, so columns are aligned and lines cut by display width, never by `len()`."""

from __future__ import annotations

import unicodedata


def char_width(char: str) -> int:
    """Return the columns `char` takes: 2 for a wide one, 0 for a combining mark, else 1."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def display_width(text: str) -> int:
    """Return the columns `text` takes in a terminal."""
    return sum(char_width(c) for c in text)


def cut_to_width(text: str, width: int) -> str:
    """Return the longest start of `text` that fits in `width` columns."""
    used = 0
    for n, char in enumerate(text):
        used += char_width(char)
        if used > width:
            return text[:n]
    return text


def pad_to_width(text: str, width: int) -> str:
    """Return `text` followed by spaces up to `width` columns (unchanged when wider), as
    `f"{text:{width}}"` pads English."""
    return text + " " * max(0, width - display_width(text))
