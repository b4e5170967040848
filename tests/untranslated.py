"""English left in Japanese output: what the tests of cudadiag in Japanese scan for.

Output in Japanese may hold English only where it quotes (docs/languages.md): PyTorch's,
CUDA's and the libraries' messages, code, identifiers, paths, option names, numbers. So a
line is scanned without its quotes (`code`, "…", '…', 「…」), its paths, URLs, options and
identifiers, and without the lines that are a traceback's or an error's own text; what is
left and still holds three English words in a row is English cudadiag wrote.
"""

from __future__ import annotations

import re

_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|'[^'\n]*'|「[^」]*」|<[^>]*>")
_VERBATIM_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|File \"|[\w.]*(Error|Exception|Warning)\b|"
    r"CUDA error|HIP error|torch\.|\$ |>>> |\.\.\. |#|[-=─━]{3,}|"
    # PyTorch's own log lines (`W1207 04:40:35.259000 21499 torch/utils/cpp_extension.py:183]`)
    r"[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\])")
_NOT_WORDS = re.compile(
    r"https?://\S+|(?:[\w.~-]*/)+[\w.-]*|--?[\w-]+(=\S+)?|%{1,2}\w+|\b\w+(?:[._]\w+)+\b|"
    r"\b\w*\d\w*\b|\b[A-Z][A-Z0-9]+\b|\b\w+\(\)?|\w+=\S*")
_THREE_WORDS = re.compile(r"\b[A-Za-z]{2,}\b(?:[ ,;:]+\b[A-Za-z]{2,}\b){2,}")


def english_left(text: str, *, verbatim: tuple[str, ...] = ()) -> list[str]:
    """Return the runs of English words cudadiag wrote in `text` (empty when it wrote none).
    `verbatim`: strings quoted as they are (the error message the test raised), skipped."""
    found = []
    for line in text.splitlines():
        for quoted in verbatim:
            line = line.replace(quoted, " ")
        if _VERBATIM_LINE.match(line):
            continue
        line = _NOT_WORDS.sub(" ", _QUOTED.sub(" ", line))
        found += [m.group(0) for m in _THREE_WORDS.finditer(line)]
    return found
