"""Text laid out by display width: a terminal gives a wide character (Japanese, Chinese,
Korean: Unicode's East Asian Width W or F) two columns, and such text has few spaces to
break at, so its lines break between phrases: after punctuation, before an opening mark,
after a run of hiragana before a word (a kanji, katakana or narrow run), never inside a
word unless it alone is wider than a line, never before a closing mark like `。` or `」`,
never after an opening one like `「`.

Text with no wide character is laid out by `textwrap` exactly as before: English output
does not change.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Callable

NO_LINE_START = frozenset("、。，．,.:;!?)]}）」』】〕〉》’”：；！？ー…‥々ゝゞ"
                          "ぁぃぅぇぉっゃゅょゎァィゥェォッャュョヮ")
"""Characters a line never starts with (Japanese line-breaking rules, kinsoku)."""
NO_LINE_END = frozenset("([{（「『【〔〈《‘“")
"""Characters a line never ends with."""


def char_width(char: str) -> int:
    """Return the columns `char` takes in a terminal: 2 for a wide character, 0 for a
    combining one, else 1."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def display_width(text: str) -> int:
    """Return the columns `text` takes in a terminal (its length when it has no wide
    character)."""
    if text.isascii():
        return len(text)
    return sum(char_width(c) for c in text)


def has_wide(text: str) -> bool:
    """Return True when `text` holds a wide character."""
    return not text.isascii() and any(char_width(c) == 2 for c in text)


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


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "", *,
         hyphens: bool = False) -> list[str]:
    """Return `text` in lines of at most `width` columns (textwrap.wrap's rules: runs of
    whitespace become one space, a word longer than a line is cut, a line breaks after a
    hyphen only with `hyphens`). Text with wide characters breaks between phrases (_chunks);
    a phrase wider than a line breaks between its runs of one script, a run wider than a
    line where the line ends. Empty text gives no line."""
    if not has_wide(text):
        return textwrap.wrap(text, width=width, initial_indent=initial_indent,
                             subsequent_indent=subsequent_indent, break_on_hyphens=hyphens)
    lines = _Lines(width, initial_indent, subsequent_indent)
    for separator, phrase in _chunks(text):
        _put(lines, separator, phrase, whole=True)
    return lines.done()


class _Lines:
    """Lines being filled up to `width` columns."""

    def __init__(self, width: int, initial_indent: str, subsequent_indent: str) -> None:
        self.width, self.indent = width, subsequent_indent
        self.lines: list[str] = []
        self.line, self.fresh = initial_indent, True

    def add(self, separator: str, piece: str) -> bool:
        """Put `piece` at the end of the current line when it fits there; return whether
        it did (a fresh line drops the separator)."""
        joined = self.line + ("" if self.fresh else separator) + piece
        if display_width(joined) > self.width:
            return False
        self.line, self.fresh = joined, False
        return True

    def new_line(self) -> None:
        """End the current line unless nothing was put on it."""
        if not self.fresh:
            self.lines.append(self.line)
            self.line, self.fresh = self.indent, True

    def cut_in(self, piece: str) -> None:
        """Put `piece` character by character, ending a line where it is full."""
        for char in piece:
            if not self.fresh and display_width(self.line + char) > self.width:
                self.new_line()
            self.line, self.fresh = self.line + char, False

    def done(self) -> list[str]:
        """Return the lines, the last one ended."""
        self.new_line()
        return self.lines


def _put(lines: _Lines, separator: str, piece: str, *, whole: bool) -> None:
    """Put a phrase (`whole`) or a run on `lines`: where the line has room, else on a new
    line; one wider than a line is put run by run (a phrase) or cut (a run)."""
    if lines.add(separator, piece):
        return
    lines.new_line()
    if lines.add("", piece):
        return
    if not whole:
        lines.cut_in(piece)
        return
    for run_separator, run in _pieces(piece, _breaks_between_runs):
        _put(lines, run_separator, run, whole=False)


def fill(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "", *,
         hyphens: bool = False) -> str:
    """Return `wrap(...)`'s lines joined by newlines."""
    return "\n".join(wrap(text, width, initial_indent, subsequent_indent, hyphens=hyphens))


def cut(text: str, width: int, marker: str = " …") -> str:
    """Return the first characters of `text` that take at most `width` columns with
    `marker` added (all of `text` when it fits): cut before a phrase (_chunks: a narrow
    word, Japanese up to its next break) that does not fit when that keeps three quarters
    of the room, else within it."""
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
    """The phrases of `text`, each with the separator before it (" " where the text had
    whitespace, "" where it breaks between wide characters): text breaks at whitespace,
    after punctuation (、。）」：), before an opening mark (「（), and after a run of hiragana
    before a run of kanji, katakana or narrow characters (その|演算子を|確認|してください);
    never before a closing mark or small kana, never after an opening mark."""
    return _pieces(text, _breaks_between_phrases)


def _pieces(text: str, breaks: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """`text` split at whitespace and where `breaks(before, after)` allows, each piece with
    the separator before it (" " or "")."""
    pieces: list[tuple[str, str]] = []
    separator, current = "", ""
    for char in text:
        if char.isspace():
            if current:
                pieces.append((separator, current))
                current = ""
            separator = " "
            continue
        if current and _may_break(current[-1], char) and breaks(current[-1], char):
            pieces.append((separator, current))
            current, separator = "", ""
        current += char
    if current:
        pieces.append((separator, current))
    return pieces


def _may_break(before: str, after: str) -> bool:
    """False where a line may never break (kinsoku: before a closing mark or small kana,
    after an opening mark)."""
    return after not in NO_LINE_START and before not in NO_LINE_END


def _breaks_between_phrases(before: str, after: str) -> bool:
    """True where a phrase ends between `before` and `after` (no space between them)."""
    first, second = _script(before), _script(after)
    if first == second == "narrow":
        return False  # a narrow word
    if first == "mark" or second == "mark" or after in NO_LINE_END:
        return True
    return first == "hiragana" and second != "hiragana"


def _breaks_between_runs(before: str, after: str) -> bool:
    """True where the script changes between `before` and `after` (a phrase wider than a
    line breaks there)."""
    return _script(before) != _script(after)


def _script(char: str) -> str:
    """The run `char` belongs to: "hiragana", "katakana", "kanji", "mark" (other wide
    characters: punctuation, brackets, symbols) or "narrow" (a narrow character, a
    full-width letter or digit)."""
    code = ord(char)
    if char in "々〆〇":
        return "kanji"
    if 0x3041 <= code <= 0x309F:
        return "hiragana"
    if 0x30A0 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F:
        return "katakana"
    if char_width(char) != 2 or (char.isalnum() and not _ideograph(code)):
        return "narrow"
    return "kanji" if _ideograph(code) else "mark"


def _ideograph(code: int) -> bool:
    return 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF
