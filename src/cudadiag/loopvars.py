"""Where in its loops a failure happened, read from the frames of its traceback.

For each user frame (a notebook cell, the user's script or modules) the source of the frame
(what Python compiled: the cell as IPython transformed it, the file) is parsed; the `for` and
`while` loops of the frame's own scope that enclose the failing line give their variables:
the targets of a `for` (`epoch`, `batch_idx, (x, y)`), the counters of a `while` (names of
its condition that its body assigns, names it increments). Their values are those at the
raise, with the frame's other scalars (ints, floats, bools, short strings).

Nothing here runs user code: names and attributes are evaluated by pure_eval (which reads
attributes statically, never through properties or `__getattr__`), and a value is written as
text only when its type is exactly a built-in scalar or a numpy scalar; tensors are described
by dtype, shape and device, never by their data; other objects by their type. String values
of names that look like secrets (`token`, `password`, `api_key`...) are masked before they
are stored.
"""

from __future__ import annotations

import ast
import linecache
import re
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from pure_eval import Evaluator

from cudadiag.incident import ErrorInfo, FrameContext, LoopContext, LoopInfo

MAX_FRAMES = 8
MAX_SCALARS = 12
MAX_STRING = 40
MAX_INT_DIGITS = 30
MAX_FLOAT = 10
SECRET_MASK = "'***'"

_SECRET_NAME = re.compile(
    r"(?i)pass(?:word|wd|phrase)?|secret|token|api_?key|access_?key|private_?key|credential"
    r"|auth"
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = {ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>",
                   ast.DictComp: "<dictcomp>", ast.GeneratorExp: "<genexpr>"}
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
Loop = ast.For | ast.AsyncFor | ast.While


def loop_context(exc: BaseException,
                 locate_cell: Callable[[str], int | None] = lambda filename: None
                 ) -> LoopContext | None:
    """Return the loops around the failing line of each user frame of `exc`'s traceback,
    their variables and the frames' scalars at the raise; None when no user frame is left.

    `locate_cell(filename)` returns the execution count of the cell a code object was
    compiled from (None for files). Never raises: a frame whose source cannot be read or
    parsed is recorded with its location only.
    """
    summaries = ErrorInfo.from_exception(exc, locate_cell).traceback
    entries = list(_walk(exc.__traceback__))
    if len(entries) != len(summaries):  # sys.tracebacklimit cut the summaries
        return None
    frames = [(tb.tb_frame, tb.tb_lineno, summary)
              for tb, summary in zip(entries, summaries, strict=True) if summary.user]
    if not frames:
        return None
    parsed: dict[str, tuple[list[str], ast.Module | None]] = {}
    contexts = []
    for frame, line, summary in frames:
        try:
            contexts.append(_frame_context(frame, line, summary.cell, parsed))
        except Exception:  # a frame we cannot read must not cost the incident
            contexts.append(FrameContext(file=summary.file, line=line,
                                         function=summary.function, cell=summary.cell))
    kept = [c for c in contexts[:-1] if c.loops] + contexts[-1:]
    omitted = max(0, len(kept) - MAX_FRAMES)
    return LoopContext(frames=kept[omitted:], frames_omitted=omitted)


def value_text(value: Any) -> str:
    """Return how a value is shown: the literal for built-in and numpy scalars (strings, long
    floats and huge ints shortened), `<tensor int64[32]@cuda:0>` for a tensor, `<list of 3>` for a
    built-in container, `<ClassName>` for anything else. Runs no user code."""
    kind = type(value)
    if kind is bool or value is None:
        return repr(value)
    if kind is float:
        return repr(value) if len(repr(value)) <= MAX_FLOAT else f"{value:.6g}"
    if kind is int:
        return _int_text(value)
    if kind is str:
        return repr(value) if len(value) <= MAX_STRING else repr(value[:MAX_STRING]) + "…"
    if _is_numpy_scalar(value):
        return value_text(value.item())
    if _is_plain_tensor(value):
        device = "" if value.device.type == "cpu" else f"@{value.device}"
        return f"<tensor {str(value.dtype).replace('torch.', '')}{list(value.shape)}{device}>"
    if kind in (list, tuple, dict, set, frozenset):
        return f"<{kind.__name__} of {len(value)}>"
    return f"<{kind.__name__}>"


def is_scalar(value: Any) -> bool:
    """Return True for the values kept as a frame's scalars: built-in ints, floats, bools,
    short strings, numpy scalars."""
    kind = type(value)
    if kind is str:
        return len(value) <= MAX_STRING
    return kind in (bool, int, float) or _is_numpy_scalar(value)


def _walk(tb: Any) -> Iterator[Any]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _frame_context(frame: FrameType, line: int, cell: int | None,
                   parsed: dict[str, tuple[list[str], ast.Module | None]]) -> FrameContext:
    """The context of one frame; `parsed` caches each file's lines and tree (a recursion
    repeats the same file a thousand times)."""
    code = frame.f_code
    context = FrameContext(file=code.co_filename, line=line, function=code.co_name, cell=cell)
    if code.co_filename not in parsed:
        lines = linecache.getlines(code.co_filename, frame.f_globals)
        parsed[code.co_filename] = (lines, _parse(lines))
    lines, tree = parsed[code.co_filename]
    scope = _scope(tree, line, code.co_name) if tree is not None else None
    if scope is None:
        return context
    loops, statement = _enclosing(scope, line)
    if statement is not None:
        context.statement_line = statement.lineno
        context.statement = _source(lines, statement.lineno, _statement_end(statement, line))
    evaluator = Evaluator.from_frame(frame)
    shown: set[str] = set()
    for loop in loops:
        values = {}
        for node in _loop_variables(loop):
            name = ast.unparse(node)
            if name in shown:
                continue
            value = _evaluate(evaluator, node)
            if value is not _UNREADABLE and (isinstance(loop, ast.For | ast.AsyncFor)
                                             or is_scalar(value)):
                values[name] = _masked(name, value)
                shown.add(name)
        context.loops.append(LoopInfo(
            kind="while" if isinstance(loop, ast.While) else "for", line=loop.lineno,
            header=_source(lines, loop.lineno, loop.lineno), values=values))
    context.scalars, context.scalars_omitted = _scalars(frame, scope, shown)
    return context


def _parse(lines: list[str]) -> ast.Module | None:
    try:
        return ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None


def _scope(tree: ast.Module, line: int, code_name: str) -> ast.AST | None:
    """The node whose code the frame runs: the module, or the innermost function, lambda,
    class or comprehension around `line` with the code's name."""
    if code_name == "<module>":
        return tree
    found: ast.stmt | ast.expr | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        if _scope_name(node) == code_name and node.lineno <= line <= (node.end_lineno or 0):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _scope_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Lambda):
        return "<lambda>"
    return _COMPREHENSIONS.get(type(node))


def _enclosing(scope: ast.AST, line: int) -> tuple[list[Loop], ast.stmt | None]:
    """The loops of `scope` around `line` (outermost first) and the innermost statement
    holding it, without entering nested functions and classes."""
    loops: list[Loop] = []
    statement = None
    node = scope
    while True:
        inner = next((child for child in ast.iter_child_nodes(node)
                      if isinstance(child, ast.stmt) and not isinstance(child, _SCOPES)
                      and child.lineno <= line <= (child.end_lineno or child.lineno)), None)
        if inner is None:
            return loops, statement
        statement = inner
        if isinstance(inner, _LOOPS) and line <= _body_end(inner):
            loops.append(inner)
        node = inner


def _statement_end(statement: ast.stmt, line: int) -> int:
    """The last line of a simple statement; of a compound one failing in its header (a
    `for` whose iterator raised), the header's last line."""
    body = getattr(statement, "body", None)
    if isinstance(body, list) and body and line < body[0].lineno:
        return max([statement.lineno] + [
            c.end_lineno or c.lineno for c in ast.iter_child_nodes(statement)
            if isinstance(c, ast.expr)])
    return statement.end_lineno or line


def _body_end(loop: Loop) -> int:
    """The last line of a loop's body (its `else:` part runs after the loop)."""
    return max(s.end_lineno or s.lineno for s in loop.body)


def _loop_variables(loop: Loop) -> list[ast.expr]:
    """The names a loop advances: a `for`'s targets; a `while`'s names of its condition that
    its body assigns, and the names its body increments."""
    if isinstance(loop, ast.For | ast.AsyncFor):
        return list(_targets(loop.target))
    assigned, incremented = _assignments(loop.body)
    in_test = [n for n in _names_read(loop.test) if ast.unparse(n) in assigned]
    read = {ast.unparse(n) for n in in_test}
    return in_test + [n for n in incremented if ast.unparse(n) not in read]


def _targets(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _targets(element)
    elif isinstance(target, ast.Starred):
        yield from _targets(target.value)
    elif isinstance(target, ast.Name | ast.Attribute):
        yield target


def _assignments(body: list[ast.stmt]) -> tuple[dict[str, None], list[ast.expr]]:
    """(every name or attribute the statements assign, in order; those they increment), not
    looking inside nested functions and classes."""
    assigned: dict[str, None] = {}
    incremented: list[ast.expr] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name | ast.Attribute):
            incremented.append(node.target)
        for target in _assigned_targets(node):
            assigned[ast.unparse(target)] = None
        pending.extend(ast.iter_child_nodes(node))
    return assigned, incremented


def _assigned_targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _targets(target)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr):
        yield from _targets(node.target)
    elif isinstance(node, ast.For | ast.AsyncFor):
        yield from _targets(node.target)


def _names_read(test: ast.expr) -> list[ast.expr]:
    """Names and attribute chains of a condition, not the functions it calls."""
    called = {id(n.func) for n in ast.walk(test) if isinstance(n, ast.Call)}
    found: list[ast.expr] = []
    pending: list[ast.AST] = [test]
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Name | ast.Attribute) and id(node) not in called:
            found.append(node)
            continue  # `trainer.step`, not also `trainer`
        pending.extend(ast.iter_child_nodes(node))
    return found


_UNREADABLE = object()


def _evaluate(evaluator: Evaluator, node: ast.expr) -> Any:
    """The value of a name or attribute, or _UNREADABLE when pure_eval cannot read it without
    running code (CannotEval) or reading it failed."""
    try:
        return evaluator[node]
    except Exception:
        return _UNREADABLE


def _scalars(frame: FrameType, scope: ast.AST, shown: set[str]) -> tuple[dict[str, str], int]:
    """The frame's scalars (a module's: only the names its source binds, not the whole
    namespace of the notebook) as text, at most MAX_SCALARS, and how many were left out."""
    names = (_module_names(scope) if isinstance(scope, ast.Module)
             else list(frame.f_locals))
    namespace = frame.f_locals
    found = {}
    for name in names:
        if name in shown or name.startswith("_") or name not in namespace:
            continue
        value = namespace[name]
        if is_scalar(value):
            found[name] = _masked(name, value)
    kept = dict(list(found.items())[:MAX_SCALARS])
    return kept, len(found) - len(kept)


def _module_names(module: ast.Module) -> list[str]:
    """The names a module's own statements assign, in order (not those of its functions)."""
    return [name for name in _assignments(module.body)[0] if name.isidentifier()]


def _masked(name: str, value: Any) -> str:
    if type(value) is str and _SECRET_NAME.search(name):
        return SECRET_MASK
    return value_text(value)


def _int_text(value: int) -> str:
    if abs(value) < 10**MAX_INT_DIGITS:
        return str(value)
    return f"<int of {value.bit_length()} bits>"


def _is_numpy_scalar(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.generic) and type(
        value).__module__ == "numpy" and value.dtype.kind in "biuf"


def _is_plain_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and type(value) in (torch.Tensor, torch.nn.Parameter)


def _source(lines: list[str], first: int, last: int) -> str:
    return "".join(lines[first - 1:last]).rstrip("\n")

