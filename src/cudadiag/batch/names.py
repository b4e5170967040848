"""The names a user's loop gives the parts of a watched batch: `for features, target in
cudadiag.watch(loader)` calls `batch[1]` `target`, `for batch in watch(loader)` keeps
`batch['labels']`. Read from the loop's header as written (the incident's loop context);
nothing is run."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from cudadiag.incident import LoopInfo

ROOT = "batch"
"""How batch summaries name the batch itself (batch/summary.py)."""
_ITEM = re.compile(r"^batch\[(\d+)\](.*)$")


def user_name(path: str, loops: Iterable[LoopInfo]) -> str | None:
    """Return `path` (`batch[1]`, `batch['labels'][0]`) as the user's code names it
    (`target`, `b['labels'][0]`), from the first loop over a watch() call; None when no such
    loop names it."""
    for loop in loops:
        target = _watched_target(loop.header)
        if isinstance(target, ast.Name):
            return target.id + path[len(ROOT):] if path.startswith(ROOT) else None
        if isinstance(target, (ast.Tuple, ast.List)):
            found = _ITEM.match(path)
            if found is None or int(found.group(1)) >= len(target.elts):
                return None
            part = target.elts[int(found.group(1))]
            return part.id + found.group(2) if isinstance(part, ast.Name) else None
    return None


def _watched_target(header: str) -> ast.expr | None:
    """The target of `for TARGET in watch(...)` (or `enumerate(watch(...))`'s second part)."""
    try:
        tree = ast.parse(header.strip() + "\n    pass")
    except SyntaxError:
        return None
    loop = tree.body[0] if tree.body else None
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    iterable, target = loop.iter, loop.target
    if (_called(iterable, "enumerate") and isinstance(iterable, ast.Call) and iterable.args
            and isinstance(target, ast.Tuple) and len(target.elts) == 2):
        iterable, target = iterable.args[0], target.elts[1]
    return target if _called(iterable, "watch") else None


def _called(node: ast.expr, name: str) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name)
