"""The names a user's loop gives the parts of a watched batch, read from the loop's header."""

from __future__ import annotations

import pytest

from cudadiag.batch.names import user_name
from cudadiag.incident import LoopInfo


def loop(header: str) -> list[LoopInfo]:
    return [LoopInfo("for", 1, header, {})]


@pytest.mark.parametrize(("header", "path", "named"), [
    ("for features, target in cudadiag.watch(loader):", "batch[1]", "target"),
    ("for xb, yb in watch(train_dl, name='train'):", "batch[0]", "xb"),
    ("for i, (x, y) in enumerate(cudadiag.watch(loader)):", "batch[1]", "y"),
    ("for batch in cudadiag.watch(loader):", "batch['labels']", "batch['labels']"),
    ("for b in cudadiag.watch(loader):", "batch['labels'][0]", "b['labels'][0]"),
    ("    for x, y in cudadiag.watch(loader):", "batch[0]", "x"),
])
def test_a_batch_part_is_named_as_the_loop_names_it(header, path, named):
    assert user_name(path, loop(header)) == named


@pytest.mark.parametrize(("header", "path"), [
    ("for x, y in loader:", "batch[1]"),  # no watch(): the batch is not cudadiag's
    ("for x, y in cudadiag.watch(loader):", "batch[2]"),  # no third name
    ("for x, (y, z) in cudadiag.watch(loader):", "batch[1]"),  # no one name for it
    ("while step < 10:", "batch[0]"),
])
def test_no_name_where_the_loop_gives_none(header, path):
    assert user_name(path, loop(header)) is None
