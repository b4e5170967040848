"""Text laid out by display width: a terminal gives a wide character (Japanese, Chinese,
Korean: Unicode's East Asian Width W or F) two columns, and such text has no spaces to break
at, so its lines may break between any two wide characters (never before a closing mark
like `。` or `」`, never after an opening one like `「`).

Text with no wide character is laid out by `textwrap` exactly as before: English output
does not change.
"""

from __future__ import annotations

import textwrap

from cudadiag.i18n.width import char_width, display_width

NO_LINE_START = frozenset("、。，．,.:;!?)]}）」』】〕〉》’”：；！？ー…‥々ゝゞ"
                          "ぁぃぅぇぉっゃゅょゎァィゥェォッャュョヮ")
"""Characters a line never starts with (Japanese line-breaking rules, kinsoku)."""
NO_LINE_END = frozenset("([{（「『【〔〈《‘“")
"""Characters a line never ends with."""


def has_wide(text: str) -> bool:
    """Return True when `text` holds a wide character."""
    return not text.isascii() and any(char_width(c) == 2 for c in text)


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "", *,
         hyphens: bool = False) -> list[str]:
    """Return `text` in lines of at most `width` columns (textwrap.wrap's rules: runs of
    whitespace become one space, a word longer than a line is cut, a line breaks after a
    hyphen only with `hyphens`); a line may also break between wide characters. Empty text
    gives no line."""
    if not has_wide(text):
        return textwrap.wrap(text, width=width, initial_indent=initial_indent,
                             subsequent_indent=subsequent_indent, break_on_hyphens=hyphens)
    lines: list[str] = []
    line, fresh = initial_indent, True
    for separator, chunk in _chunks(text):
        joined = line + ("" if fresh else separator) + chunk
        if display_width(joined) <= width:
            line, fresh = joined, False
            continue
        if not fresh:
            lines.append(line)
            line, fresh = subsequent_indent, True
        for char in chunk:  # a chunk longer than a line is cut where the line ends
            if not fresh and display_width(line + char) > width:
                lines.append(line)
                line = subsequent_indent
            line, fresh = line + char, False
    if not fresh:
        lines.append(line)
    return lines


def fill(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "", *,
         hyphens: bool = False) -> str:
    """Return `wrap(...)`'s lines joined by newlines."""
    return "\n".join(wrap(text, width, initial_indent, subsequent_indent, hyphens=hyphens))


def cut(text: str, width: int, marker: str = " …") -> str:
    """Return the first characters of `text` that take at most `width` columns with
    `marker` added (all of `text` when it fits): cut before a word (a katakana run, a
    narrow word) that does not fit when that keeps three quarters of the room, else within
    it."""
    if display_width(text) <= width:
        return text
    room, kept, used = width - display_width(marker), "", 0
    for separator, chunk in _chunks(text):
        piece = (separator if kept else "") + chunk
        if used + display_width(piece) > room:
            if used < room * 3 // 4:  # a long word: cut within it
                for char in piece:
                    if used + char_width(char) > room:
                        break
                    kept, used = kept + char, used + char_width(char)
            break
        kept, used = kept + piece, used + display_width(piece)
    return kept.rstrip().rstrip("".join(NO_LINE_END)) + marker


def _chunks(text: str) -> list[tuple[str, str]]:
    """The unbreakable chunks of `text`, each with the separator before it (" " where the text
    had whitespace, "" between wide characters): a run of narrow characters is one chunk, a
    run of katakana (a word: カーネル) another, any other wide character another; a closing
    mark joins the chunk before it, an opening one the chunk after it."""
    chunks: list[tuple[str, str]] = []
    separator, current = "", ""
    for char in text:
        if char.isspace():
            if current:
                chunks.append((separator, current))
                current = ""
            separator = " "
            continue
        if current and _breaks_between(current[-1], char):
            chunks.append((separator, current))
            current, separator = "", ""
        current += char
    if current:
        chunks.append((separator, current))
    return _kinsoku(chunks)


def _breaks_between(before: str, after: str) -> bool:
    """True when a line may break between `before` and `after` (no space between them)."""
    if char_width(before) != 2 and char_width(after) != 2:
        return False  # a narrow word
    return not (_katakana(before) and _katakana(after))


def _katakana(char: str) -> bool:
    return "\u30a1" <= char <= "\u30ff"


def _kinsoku(chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for separator, chunk in chunks:
        glued = merged and not separator and (chunk[0] in NO_LINE_START
                                              or merged[-1][1][-1] in NO_LINE_END)
        if glued:
            merged[-1] = (merged[-1][0], merged[-1][1] + chunk)
        else:
            merged.append((separator, chunk))
    return merged
