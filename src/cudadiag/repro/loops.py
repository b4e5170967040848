"""Cut a `for … in range(...)` loop down to the iterations the failure needs.

The failing line of the incident often sits in a training loop that failed at iteration 597
of 1000. The reference run records, at the start of each iteration of that loop, the
iteration value and the random states (a probe line inserted at the top of its body); the
last record is the failing iteration. Two candidates follow, each verified by the signature
oracle like any other: the failing iteration alone, started from the random states it had
(holds when nothing else carries over from earlier iterations), else the iterations up to and
including it.
"""

from __future__ import annotations

import ast
import os
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from cudadiag.i18n import _
from cudadiag.repro.dependencies import Unit

PROBE_CALL = "__import__('cudadiag.repro.loops', fromlist=['probe']).probe({path!r}, {target})"


@dataclass
class LoopSite:
    """A top-level statement's `for NAME in range(...)` loop whose body holds the failing
    line."""

    unit: Unit
    target: str
    for_line: int
    """Line of the `for` in the statement's source (1-based)."""
    body_line: int
    indent: str
    body_indent: str
    range_call: ast.Call


@dataclass
class LoopCut:
    """A loop reduced by the minimizer: the new statement and how it was cut."""

    site: LoopSite
    source: str
    description: str
    rng_key: str | None = None
    """The key of the random states restored before the loop, when it starts at the failing
    iteration."""


def find_loop(units: list[Unit], failed_at: list[tuple[int, int]]) -> LoopSite | None:
    """The innermost range loop (outside any function body) whose body holds one of the
    failing lines ((cell, line) pairs, outermost frame first), or None."""
    for cell, line in failed_at:
        for unit in units:
            if unit.cell != cell:
                continue
            site = _site_in(unit, line - unit.line + 1)
            if site is not None:
                return site
    return None


def instrumented(site: LoopSite, probe_path: str) -> str:
    """The statement with a probe at the top of the loop body: each iteration records its
    value and the random states in `probe_path`."""
    lines = site.unit.source.splitlines()
    probe = PROBE_CALL.format(path=probe_path, target=site.target)
    lines.insert(site.body_line - 1, f"{site.body_indent}{probe}")
    return "\n".join(lines)


def probe(path: str, value: Any) -> None:
    """Record `value` and the random states at the start of an iteration (runs inside the
    isolated child, called by the probe line)."""
    data = pickle.dumps((value, current_states()))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, len(data).to_bytes(8, "little") + data, 0)
    finally:
        os.close(fd)


def read_probe(path: str) -> tuple[Any, dict[str, Any]] | None:
    """The last (iteration value, random states) the probe recorded, or None."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            probe: tuple[Any, dict[str, Any]] = pickle.loads(f.read(size))
            return probe
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def current_states() -> dict[str, Any]:
    """The torch (CPU), random and numpy states as plain Python values (unpickling them
    never runs a torch operator)."""
    import sys

    import torch

    states: dict[str, Any] = {"torch": torch.get_rng_state().tolist(),
                              "random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    return states


def cuts(site: LoopSite, value: Any) -> list[LoopCut]:
    """The reduced loops to try, best first: the failing iteration alone with its random
    states restored, then the iterations up to it."""
    if not isinstance(value, int) or isinstance(value, bool):
        return []
    args = site.range_call.args
    step = args[2] if len(args) == 3 else None
    if step is not None and not (isinstance(step, ast.Constant) and isinstance(step.value, int)
                                 and step.value > 0):
        return []
    start = ast.unparse(args[0]) if len(args) > 1 else None
    step_text = f", {ast.unparse(step)}" if step is not None else ""
    key = f"In[{site.unit.cell}] {site.target}={value}"
    width = step.value if isinstance(step, ast.Constant) and isinstance(step.value, int) else 1
    alone = f"range({value}, {value + width}{step_text})"
    upto = f"range({start}, {value + 1}{step_text})" if start else f"range({value + 1})"
    restore = (f"{site.indent}restore_rng({key!r})  # the random states iteration {value} "
               "started from")
    candidates = [
        (alone, restore, _("{target}: only {value}, from its random states").format(
            target=site.target, value=value), key),
        (upto, None, _("{target}: up to {value}").format(target=site.target, value=value), None),
    ]
    return [LoopCut(site, source, description, rng_key)
            for new_range, line, description, rng_key in candidates
            if (source := _with_range(site, new_range, line)) is not None]


def rng_restorer(path: str) -> Callable[[str], None]:
    """`restore_rng(key)` for trials: puts back the random states recorded under `key` in
    the pickle at `path` (a dict key -> states)."""
    with open(path, "rb") as f:
        recorded = pickle.load(f)

    def restore_rng(key: str) -> None:
        restore_states(recorded.get(key, {}))

    return restore_rng


def reseed(seed: int) -> None:
    """Seed the torch and random streams, and numpy's when numpy is installed, with `seed`
    (a trial that checks a failure does not depend on the numbers drawn)."""
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def restore_states(states: dict[str, Any]) -> None:
    """Set the torch, random and numpy streams to `states` (as current_states() gives)."""
    import torch

    if "torch" in states:
        torch.set_rng_state(torch.as_tensor(states["torch"], dtype=torch.uint8))
    if "random" in states:
        random.setstate(states["random"])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])


def _site_in(unit: Unit, line: int) -> LoopSite | None:
    try:
        tree = ast.parse(unit.source)
    except SyntaxError:
        return None
    found: tuple[ast.For, ast.Name, ast.Call] | None = None
    for node in _outside_functions(tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                and _is_range(node.iter) and node.body[0].lineno > node.lineno
                and node.body[0].lineno <= line <= (node.end_lineno or 0)):
            # walk order: an inner loop comes after the loop around it
            found = (node, node.target, node.iter)
    if found is None:
        return None
    loop, target, range_call = found
    lines = unit.source.splitlines()
    first = loop.body[0]
    return LoopSite(unit=unit, target=target.id, for_line=loop.lineno,
                    body_line=first.lineno, indent=lines[loop.lineno - 1][:loop.col_offset],
                    body_indent=lines[first.lineno - 1][:first.col_offset],
                    range_call=range_call)


def _outside_functions(tree: ast.AST) -> list[ast.AST]:
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop(0)
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                 ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return nodes


def _is_range(node: ast.expr) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "range" and 1 <= len(node.args) <= 3 and not node.keywords)


def _with_range(site: LoopSite, new_range: str, restore: str | None) -> str | None:
    """The statement with the loop's range replaced (and the restore line before it); None
    for a range(...) written over several lines."""
    lines = site.unit.source.splitlines()
    call = site.range_call
    row = call.lineno - 1
    if call.end_lineno != call.lineno:
        return None
    text = lines[row]
    lines[row] = text[:call.col_offset] + new_range + text[call.end_col_offset:]
    if restore is not None:
        lines.insert(site.for_line - 1, restore)
    return "\n".join(lines)
