"""The first check under a failing cell in Japanese: the short block shows only the first
sentence of the first check (ui/render.first_sentence), so a translation that ends its first
sentence earlier than the English one does drops what the English one names."""

from __future__ import annotations

import re

from cudadiag.i18n import audit
from cudadiag.ui.render import first_sentence

FIELD = re.compile(r"\{(\w+)")
CHECKS = ("knowledge.py", "advice.py")
"""Where the first checks are written (the advice rows and their fitted parts)."""


def _first_sentences() -> list[tuple[str, str, str]]:
    """(message, English first sentence, Japanese first sentence) of each check written in
    more than one sentence."""
    japanese = audit.translations("ja")
    found = []
    for message, places in audit.used_messages().items():
        translated = japanese.get(message)
        if (not any(place.startswith(CHECKS) for place in places)
                or not isinstance(translated, str) or first_sentence(message) == message):
            continue
        found.append((message, first_sentence(message), first_sentence(translated)))
    return found


def test_a_checks_first_sentence_in_japanese_keeps_the_fields_the_english_one_shows():
    sentences = _first_sentences()
    assert any("{num_labels_from}" in english for _, english, _ in sentences)
    for message, english, japanese in sentences:
        assert set(FIELD.findall(english)) <= set(FIELD.findall(japanese)), message


def test_a_checks_first_sentence_in_japanese_closes_its_brackets():
    for message, _, japanese in _first_sentences():
        assert japanese.count("（") == japanese.count("）"), message
