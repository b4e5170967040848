"""What one notebook cell reads, binds and changes, read from its AST.

A cell *uses* a kernel-level name it reads before binding it; it *rebinds* a name it assigns,
imports, defines or deletes (every Python binding form counts); it *mutates* a name whose object
it may change in place: attribute or item assignment (also on a loop variable or an alias),
augmented assignment, a method not known to be read-only, a function known to change its
argument. `aliases` record which names may share objects, so that the plan can carry a change
to every name of the object. Calls that act on the machine (files, processes, network) and
calls that set process-wide state (seeds, flags, the simulated device) come from the tables of
`effects`.

Function bodies run when called: their free reads count for the cell, what they change or do is
kept with the function and brought into each cell that calls it by name (methods: by method
name).
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import sys
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from IPython.core.inputtransformer2 import TransformerManager

from cudadiag.i18n import msg
from cudadiag.isolate import effects

_TRANSFORMER = TransformerManager()
_SHELL_CALLS = frozenset({"run_line_magic", "run_cell_magic", "system", "getoutput"})
"""What IPython's transformers turn magics (`%x`, `%%x`, `x?`) and shell escapes (`!x`) into."""
_PYTHON_CELL_MAGICS = ("time", "capture")
"""Cell magics that run their body in the kernel's namespace: replayed as the body."""
_ENV_SET = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:=|\s+)(?P<value>[^$]*)$")
"""What `%env NAME=value` (or `%env NAME value`) sets; a `$` would be expanded by IPython."""
_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "get_ipython", "In", "Out",
                                        "exit", "quit", "display"}
_CALL_TEXT_MAX = 80


@dataclass(frozen=True)
class SideEffect:
    """A call that acts on the machine: what it does and the call as written."""

    reason: str
    call: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.call}"


@dataclass
class FunctionFacts:
    """What calling a function defined in the history does besides returning a value."""

    params: list[str]
    """Positional parameters in order (a method's `self` left out)."""
    mutated_params: set[str] = field(default_factory=set)
    mutates: set[str] = field(default_factory=set)
    """Kernel-level names the body changes in place or rebinds through `global`."""
    effects: list[SideEffect] = field(default_factory=list)
    process_state: list[str] = field(default_factory=list)

    def merged(self, other: FunctionFacts) -> FunctionFacts:
        """Return the facts of either function (two classes' methods of the same name)."""
        return FunctionFacts(
            params=self.params if len(self.params) >= len(other.params) else other.params,
            mutated_params=self.mutated_params | other.mutated_params,
            mutates=self.mutates | other.mutates,
            effects=[*self.effects, *(e for e in other.effects if e not in self.effects)],
            process_state=[*self.process_state,
                           *(p for p in other.process_state if p not in self.process_state)],
        )


@dataclass
class KnownNames:
    """What the cells analysed so far bound that the analysis of later cells depends on."""

    modules: set[str] = field(default_factory=set)
    """Names bound by `import x` / `import x as y`: calls through them leave their arguments
    unchanged unless `effects` says otherwise."""
    origins: dict[str, str] = field(default_factory=dict)
    """Qualified origins (`np` -> `numpy`, `sim` -> `cudadiag.testing.simulated_cuda()`)."""
    functions: dict[str, FunctionFacts] = field(default_factory=dict)
    methods: dict[str, FunctionFacts] = field(default_factory=dict)

    def copy(self) -> KnownNames:
        """Return a copy that later cells can change without changing this one."""
        return KnownNames(set(self.modules), dict(self.origins), dict(self.functions),
                          dict(self.methods))


@dataclass
class CellFacts:
    """What one cell reads, binds and may change, and what it does beyond its names."""

    number: int
    source: str
    """The cell as Python, magics and shell escapes replaced by `pass`."""
    skipped: list[str] = field(default_factory=list)
    uses: set[str] = field(default_factory=set)
    rebinds: set[str] = field(default_factory=set)
    mutates: set[str] = field(default_factory=set)
    """Names whose objects the cell changes in place."""
    may_change: set[str] = field(default_factory=set)
    """`mutates` plus names called or passed to calls that are not known to be pure."""
    aliases: list[set[str]] = field(default_factory=list)
    """Groups of names that may share objects after this cell."""
    effects: list[SideEffect] = field(default_factory=list)
    process_state: list[str] = field(default_factory=list)
    """What the cell sets for the whole process ("seeds a random generator", ...)."""
    star_modules: list[str] = field(default_factory=list)
    """The modules the cell imports `*` from (`.helpers` for a relative import)."""
    syntax_error: str | None = None
    known_after: KnownNames = field(default_factory=KnownNames)

    @property
    def star_import(self) -> bool:
        """True when the cell imports `*` from a module: it binds names its source does not
        show (star_names())."""
        return bool(self.star_modules)


def star_names(cell: CellFacts) -> set[str]:
    """Return the names the cell's `from M import *` statements bind, as Python binds them
    (M's `__all__`, else its names not starting with `_`), read from each module as this
    process has it loaded (the kernel ran the cell); none for a module it has not loaded (a
    relative import)."""
    names: set[str] = set()
    for module in cell.star_modules:
        loaded = sys.modules.get(module)
        if loaded is None:
            continue
        public = getattr(loaded, "__all__", None)
        names |= set(public) if public is not None else {
            name for name in vars(loaded) if not name.startswith("_")}
    return names


def analyse_history(history: Mapping[int, str]) -> dict[int, CellFacts]:
    """Return the facts of every cell of `history` ({execution count: raw source}), each cell
    analysed with what the cells before it imported and defined."""
    facts: dict[int, CellFacts] = {}
    known = KnownNames()
    for number in sorted(history):
        facts[number] = analyse_cell(number, history[number], known)
        known = facts[number].known_after
    return facts


def analyse_cell(number: int, raw: str, known: KnownNames | None = None) -> CellFacts:
    """Return the facts of one cell's raw source (magics become `pass`).

    `known` is what earlier cells imported and defined; it is not changed (the cell's own
    additions are in the result's `known_after`).
    """
    source, skipped = python_source(raw)
    after = known.copy() if known is not None else KnownNames()
    facts = CellFacts(number=number, source=source, skipped=skipped, known_after=after)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        facts.syntax_error = f"{exc.msg} (line {exc.lineno})"
        return facts
    _Visitor(facts, after).visit(tree)
    facts.uses -= _BUILTINS
    return facts


def python_source(raw: str) -> tuple[str, list[str]]:
    """Return the cell as plain Python and the magic / shell lines it replaced by `pass`.

    A pure function of `raw`, cached: every isolated run plans over the whole history, and
    IPython's transformers took about a millisecond per cell each time.

    IPython's own input transformers turn the cell into Python first (`%xmode Minimal` into
    `get_ipython().run_line_magic('xmode', 'Minimal')`, `z?` into a `pinfo` call); each
    such call is then replaced: `%time STATEMENT` by the statement, a setting `%env` by the
    assignment to os.environ, `%%time` and `%%capture` by their body, `%load_ext cudadiag`
    silently by `pass`, anything else by `pass` with the line as typed in the list.
    """
    source, skipped = _python_source(raw)
    return source, list(skipped)


@functools.lru_cache(maxsize=4096)
def _python_source(raw: str) -> tuple[str, tuple[str, ...]]:
    transformed = _transformed(raw)
    lines = transformed.splitlines()
    typed = raw.splitlines()
    if len(typed) != len(lines):
        typed = lines
    kept, skipped = [], []
    for line, as_typed in zip(lines, typed, strict=True):
        call = _shell_call(line)
        if call is None:
            kept.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if call.name == "run_cell_magic":
            body, magic_lines = _cell_magic_source(call, raw)
            return body, tuple(magic_lines)
        statement = _python_statement(call)
        if statement is not None:
            kept.append(f"{indent}{statement}")
            continue
        if call.args[:2] != ("load_ext", "cudadiag"):
            skipped.append(as_typed.strip())
        kept.append(f"{indent}pass")
    return "\n".join(kept), tuple(skipped)


@dataclass(frozen=True)
class _ShellCall:
    """A `get_ipython().NAME(ARGS...)` statement of a transformed cell: a magic or a shell
    escape. `args` are the literal arguments (empty when one is not a literal)."""

    name: str
    args: tuple[Any, ...]
    assigned: bool


def _transformed(raw: str) -> str:
    """The cell as IPython's transformers make it Python (the cell itself when they fail)."""
    try:
        return str(_TRANSFORMER.transform_cell(raw)).removesuffix("\n")
    except (SyntaxError, ValueError, tokenize.TokenError):
        return raw


def _shell_call(line: str) -> _ShellCall | None:
    """The magic or shell escape that `line` (of a transformed cell) is, or None."""
    if "get_ipython()." not in line:
        return None
    try:
        body = ast.parse(line.strip()).body
    except SyntaxError:
        return None
    statement = body[0] if len(body) == 1 else None
    value = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and value.func.attr in _SHELL_CALLS and isinstance(value.func.value, ast.Call)
            and isinstance(value.func.value.func, ast.Name)
            and value.func.value.func.id == "get_ipython"):
        return None
    try:
        args = tuple(ast.literal_eval(a) for a in value.args)
    except ValueError:
        args = ()
    return _ShellCall(value.func.attr, args, isinstance(statement, ast.Assign))


def _cell_magic_source(call: _ShellCall, raw: str) -> tuple[str, list[str]]:
    """A cell magic's cell: the body as Python for the magics that run it in the kernel's
    namespace, else `pass` and the magic's line."""
    if len(call.args) == 3 and call.args[0] in _PYTHON_CELL_MAGICS:
        body, skipped = python_source(str(call.args[2]).removesuffix("\n"))
        return "\n".join(["pass", body]), skipped
    first = raw.strip().splitlines()[0] if raw.strip() else ""
    return "pass", [first]


def _python_statement(call: _ShellCall) -> str | None:
    """The Python statement a `%time` or a setting `%env` line amounts to; None for any
    other magic or escape."""
    if call.name != "run_line_magic" or call.assigned or len(call.args) != 2:
        return None
    name, argument = call.args
    if not isinstance(argument, str) or "\n" in argument:
        return None
    argument = argument.strip()
    if name == "time" and argument:
        return argument
    setting = _ENV_SET.match(argument) if name == "env" else None
    if setting:
        return f"import os; os.environ[{setting['name']!r}] = {setting['value'].strip()!r}"
    return None


@dataclass
class _Frame:
    """A scope inside the cell: a function, lambda, class body or comprehension."""

    kind: str
    local: set[str]
    params: frozenset[str] = frozenset()
    reaches: dict[str, set[str]] = field(default_factory=dict)
    """Local name -> names (resolved from this frame outwards) whose objects it may hold."""
    function: FunctionFacts | None = None
    """The facts that record changes to `params` (the outermost function only)."""
    origins: dict[str, str] = field(default_factory=dict)
    """Qualified origins of names imported inside this scope."""


class _Visitor(ast.NodeVisitor):
    """Collects a cell's facts, visiting statements in execution order."""

    def __init__(self, facts: CellFacts, known: KnownNames) -> None:
        self.facts = facts
        self.known = known
        self.bound: set[str] = set()
        """Kernel-level names this cell has bound so far."""
        self.frames: list[_Frame] = []
        self.function: FunctionFacts | None = None
        """The function (or method) whose body is being visited."""
        self.deferred: set[str] = set()
        """Free names read inside function bodies (resolved when the function is called)."""

    # scopes and binding forms

    def visit_Module(self, node: ast.Module) -> None:
        self.generic_visit(node)
        self.facts.uses |= self.deferred - self.facts.rebinds

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            self._bind(node.id)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.asname or alias.name.split(".")[0]
            self._bind(name)
            origin = alias.name if alias.asname else name
            if self.frames:
                self.frames[-1].origins[name] = origin
            else:
                self.known.modules.add(name)
                self.known.origins[name] = origin

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.facts.star_modules.append(module)
                continue
            name = alias.asname or alias.name
            self._bind(name)
            origins = self.frames[-1].origins if self.frames else self.known.origins
            origins[name] = f"{module}.{alias.name}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        evaluated_now = [*node.decorator_list, *args.defaults, *args.kw_defaults, node.returns,
                         *(a.annotation for a in _all_args(args))]
        for expr in evaluated_now:
            if expr is not None:
                self.visit(expr)
        self._bind(node.name)
        params = {a.arg for a in _all_args(args)}
        local = _local_names(node.body) | params
        if self.function is not None:  # a nested function acts as part of its enclosing one
            self._in_frame(_Frame("function", local), node.body)
            return
        in_class = bool(self.frames) and self.frames[-1].kind == "class"
        positional = [a.arg for a in [*args.posonlyargs, *args.args]][1 if in_class else 0:]
        function = FunctionFacts(params=positional)
        self.function = function
        self._in_frame(_Frame("function", local, frozenset(params), function=function),
                       node.body)
        self.function = None
        if not self.frames:
            self.known.functions[node.name] = function
        elif in_class:
            earlier = self.known.methods.get(node.name)
            self.known.methods[node.name] = earlier.merged(function) if earlier else function

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.bases, *(k.value for k in node.keywords), *node.decorator_list]:
            self.visit(expr)
        self._bind(node.name)
        self._in_frame(_Frame("class", _local_names(node.body)), node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in [*node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        self._in_frame(_Frame("lambda", {a.arg for a in _all_args(node.args)}), [node.body])

    def visit_TypeAlias(self, node: Any) -> None:
        """`type X = ...` (Python 3.12+): binds X; the value is evaluated lazily."""
        self._store(node.name)
        self._in_frame(_Frame("lambda", {p.name for p in node.type_params}), [node.value])

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp
                       | ast.DictComp) -> None:
        generators = node.generators
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        targets = {n for g in generators for n in _stored_names(g.target)}
        frame = _Frame("comprehension", targets)
        self.frames.append(frame)
        for index, generator in enumerate(generators):
            if index:
                self.visit(generator.iter)
            reached = self._reached(generator.iter)
            for name in _stored_names(generator.target):
                frame.reaches.setdefault(name, set()).update(reached)
            self._store(generator.target)
            for condition in generator.ifs:
                self.visit(condition)
        results = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for result in results:
            self.visit(result)
        self.frames.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Global(self, node: ast.Global) -> None:
        if self.frames:  # the function may rebind these whenever it is called
            self.facts.mutates.update(node.names)
            self.facts.may_change.update(node.names)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._store(target)
            self._alias(target, node.value)
            if isinstance(target, ast.Name) and not self.frames:
                origin = self._qualified(node.value)
                if origin:
                    self.known.origins[target.id] = origin

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)
            self._store(node.target)
            self._alias(node.target, node.value)
        elif not isinstance(node.target, ast.Name):  # `x.a: int` evaluates x, binds nothing
            self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        root = _root(node.target)
        if root:
            self._read(root)
        self._store(node.target)
        if isinstance(node.target, ast.Name):
            self._mutate(node.target.id)  # in place for lists, tensors, arrays

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._store(node.target)
        self._alias(node.target, node.iter)  # the loop variable holds the iterable's items
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._store(node.optional_vars)
            self._alias(node.optional_vars, node.context_expr)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        name = node.target.id
        # binds in the nearest scope that is not a comprehension
        scopes = [f for f in self.frames if f.kind != "comprehension"]
        if not scopes:
            self._bind_kernel_name(name)
            self._alias(node.target, node.value, kernel_level=True)
        else:
            scopes[-1].reaches.setdefault(name, set()).update(self._reached(node.value))

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._delete(target)

    def _delete(self, target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._delete(element)
        elif isinstance(target, ast.Name):  # the name must exist, and is gone afterwards
            self._read(target.id)
            self._bind(target.id)
            self.bound.discard(target.id)
        else:
            self.visit(target)
            self._change_through(target, assigned=True)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._bind(node.name)
        for stmt in node.body:
            self.visit(stmt)
        if node.name and not self.frames:
            self.bound.discard(node.name)  # Python deletes it when the handler ends

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self._bind(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._bind(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        for key in node.keys:
            self.visit(key)
        for pattern in node.patterns:
            self.visit(pattern)
        if node.rest:
            self._bind(node.rest)

    # calls

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        qualified = self._qualified(func)
        reason = effects.side_effect(node, qualified)
        if reason:
            self._record_effect(SideEffect(reason, _call_text(node)))
        state = effects.process_state_call(qualified)
        if state:
            self._record_state(state)
        known = None
        if isinstance(func, ast.Name) and not self._is_local(func.id):
            known = self.known.functions.get(func.id)
        if known is not None:
            self._apply(known, node)
        elif isinstance(func, ast.Attribute) and self._is_module(_dotted_root(func.value)):
            self._module_call(node, qualified)
            return
        elif isinstance(func, ast.Attribute):
            self._method_call(node, func)
        elif qualified in effects.PURE_BUILTINS:
            return
        else:
            self._may_change(_root(func))  # model(x) may change model
            changed = effects.changed_argument(qualified)
            if changed is not None and len(node.args) > changed:
                self._change_through(node.args[changed])
        for arg in _arguments(node):
            self._may_change(_root(arg))

    def _module_call(self, node: ast.Call, qualified: str | None) -> None:
        """`torch.f(x)`: pure for its arguments unless a table or the `_` suffix says not."""
        changed = effects.changed_argument(qualified)
        if changed is not None and len(node.args) > changed:
            self._change_through(node.args[changed])
        for keyword in node.keywords:
            if keyword.arg == "out":
                self._change_through(keyword.value)

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        method = self.known.methods.get(func.attr)
        if method is not None:
            self._apply(method, node)
        if func.attr not in effects.READ_ONLY_METHODS:
            self._change_through(func.value)  # x.append(...), p.requires_grad_(), opt.step()
        changed = effects.ARGUMENT_CHANGING_METHODS.get(func.attr)
        if changed is not None and len(node.args) > changed:
            self._change_through(node.args[changed])

    def _apply(self, function: FunctionFacts, node: ast.Call) -> None:
        """Bring what a called function of the history does into this scope."""
        for name in function.mutates:
            self._mutate(name)
        by_name = dict(zip(function.params, node.args, strict=False))
        by_name.update((k.arg, k.value) for k in node.keywords if k.arg)
        for param in function.mutated_params & by_name.keys():
            self._change_through(by_name[param])
        call = _call_text(node)
        for effect in function.effects:
            self._record_effect(SideEffect(effect.reason, f"{call} -> {effect.call}"))
        for state in function.process_state:
            self._record_state(state)

    # the primitives

    def _in_frame(self, frame: _Frame, body: Iterable[ast.AST]) -> None:
        self.frames.append(frame)
        for stmt in body:
            self.visit(stmt)
        self.frames.pop()

    def _is_local(self, name: str) -> bool:
        return any(name in frame.local for frame in self.frames)

    def _is_module(self, name: str | None) -> bool:
        return name is not None and name in self.known.modules and not self._is_local(name)

    def _in_function(self) -> bool:
        return any(frame.kind in ("function", "lambda") for frame in self.frames)

    def _sink(self) -> CellFacts | FunctionFacts:
        return self.function if self.function is not None else self.facts

    def _read(self, name: str) -> None:
        if self._is_local(name):
            return
        if self._in_function():
            self.deferred.add(name)
        elif name not in self.bound:
            self.facts.uses.add(name)

    def _bind(self, name: str) -> None:
        if not self.frames:
            self._bind_kernel_name(name)
        elif not self._is_local(name):  # declared `global` in the function
            self._mutate(name)

    def _bind_kernel_name(self, name: str) -> None:
        self.bound.add(name)
        self.facts.rebinds.add(name)
        self.known.origins.pop(name, None)
        self.known.functions.pop(name, None)
        self.known.modules.discard(name)

    def _store(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element)
        elif isinstance(target, ast.Starred):
            self._store(target.value)
        else:  # x.attr = ..., x[i] = ...
            self.visit(target)
            self._change_through(target, assigned=True)

    def _change_through(self, expr: ast.expr, assigned: bool = False) -> None:
        """An in-place change to the object `expr` reaches (`p.grad`, `params[0]`, `x`).

        `assigned`: `expr` is an assignment or `del` target; one rooted at a module
        (`torch.backends.cudnn.benchmark = True`) sets process-wide state."""
        root = _root(expr)
        if assigned and self._is_module(root):
            qualified = self._qualified(_without_subscripts(expr))
            self._record_state(effects.process_state_target(qualified)
                               or msg("sets an attribute of module {module}",
                                      module=str(root)))
            return
        for name in self._reached(expr):  # get_layer(model).weight reaches model
            self._mutate(name)

    def _mutate(self, name: str, level: int | None = None,
                seen: set[tuple[int, str]] | None = None) -> None:
        """Record a change in place to `name`'s object, resolved from frame `level` outwards:
        a local name passes the change on to the names it may hold objects of."""
        level = len(self.frames) if level is None else level
        seen = set() if seen is None else seen
        for index in range(level - 1, -1, -1):
            frame = self.frames[index]
            if name not in frame.local:
                continue
            if frame.function is not None and name in frame.params:
                frame.function.mutated_params.add(name)
            if (index, name) not in seen:
                seen.add((index, name))
                for reached in frame.reaches.get(name, ()):
                    self._mutate(reached, index if reached == name else index + 1, seen)
            return
        if (name in _BUILTINS and name not in self.bound) or self._is_module(name):
            return
        self._sink().mutates.add(name)
        self.facts.may_change.add(name)

    def _may_change(self, name: str | None) -> None:
        if name and not self._is_local(name):
            self.facts.may_change.add(name)

    def _alias(self, target: ast.expr, value: ast.expr, kernel_level: bool = False) -> None:
        names = _stored_names(target)
        reached = self._reached(value)
        if not names or not reached:
            return
        if kernel_level or not self.frames:
            self.facts.aliases.append(set(names) | reached)
            return
        frame = self.frames[-1]
        for name in names:
            if name in frame.local:
                frame.reaches.setdefault(name, set()).update(reached)

    def _reached(self, expr: ast.expr | None) -> set[str]:
        """Names whose objects the value of `expr` may be or hold."""
        if expr is None:
            return set()
        if isinstance(expr, ast.Name):
            for frame in reversed(self.frames):
                if expr.id in frame.local:
                    # a comprehension's variable stands for the items of what it iterates
                    return (set(frame.reaches.get(expr.id, ())) if frame.kind == "comprehension"
                            else {expr.id})
            return set() if self._is_module(expr.id) else {expr.id}
        if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred, ast.Await,
                             ast.NamedExpr)):
            return self._reached(expr.value)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and func.id in effects.VALUE_FREE_BUILTINS:
                return set()
            found = self._reached(func.value) if isinstance(func, ast.Attribute) else set()
            return found.union(*(self._reached(arg) for arg in _arguments(expr)))
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            parts = [g.iter for g in expr.generators]
            parts += [expr.key, expr.value] if isinstance(expr, ast.DictComp) else [expr.elt]
            local = {n for g in expr.generators for n in _stored_names(g.target)}
            return set().union(*(self._reached(part) for part in parts)) - local
        parts = _value_parts(expr)
        return set().union(*(self._reached(part) for part in parts))

    def _qualified(self, expr: ast.expr) -> str | None:
        """The dotted name `expr` resolves to through the imports (`np.save` -> `numpy.save`,
        `simulated_cuda().start` -> `cudadiag.testing.simulated_cuda().start`), builtins as
        themselves; None when it does not resolve."""
        if isinstance(expr, ast.Name):
            return self._origin(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self._qualified(expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call):
            base = self._qualified(expr.func)
            return f"{base}()" if base else None
        return None

    def _origin(self, name: str) -> str | None:
        for frame in reversed(self.frames):
            if name in frame.local:
                return frame.origins.get(name)
        if name in self.known.origins:
            return self.known.origins[name]
        return name if name in _BUILTINS and name not in self.bound else None

    def _record_effect(self, effect: SideEffect) -> None:
        sink = self._sink()
        if effect not in sink.effects:
            sink.effects.append(effect)

    def _record_state(self, state: str) -> None:
        sink = self._sink()
        if state not in sink.process_state:
            sink.process_state.append(state)


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted_root(node: ast.expr) -> str | None:
    """`torch.nn.init` -> `torch`; None when the chain holds a call or a subscript."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _without_subscripts(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _value_parts(expr: ast.expr) -> list[ast.expr]:
    """The sub-expressions whose objects a container, operator or conditional may hold."""
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return list(expr.elts)
    if isinstance(expr, ast.Dict):
        return [*(k for k in expr.keys if k is not None), *expr.values]
    if isinstance(expr, ast.BinOp):
        return [expr.left, expr.right]
    if isinstance(expr, ast.BoolOp):
        return list(expr.values)
    if isinstance(expr, ast.IfExp):
        return [expr.body, expr.orelse]
    return []


def _all_args(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return every + [a for a in (args.vararg, args.kwarg) if a is not None]


def _local_names(body: list[ast.stmt]) -> set[str]:
    """Names a function or class body binds itself (nested scopes excluded, their names and
    the targets of walrus in comprehensions included), unless declared global or nonlocal."""
    names: set[str] = set()
    declared: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
        elif not isinstance(node, ast.Lambda):
            names.update(_names_bound_by(node))
            stack.extend(ast.iter_child_nodes(node))
    return names - declared


def _names_bound_by(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _stored_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _stored_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _stored_names(e)]
    return []


def _call_text(node: ast.Call) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _CALL_TEXT_MAX else text[: _CALL_TEXT_MAX - 3] + "..."


def unconditional_imports(raw: str) -> list[str]:
    """Return the absolute modules a cell imports at its top level, in order (`import a.b`
    gives `a.b`, `from a.b import c` gives `a.b`): the imports every run of the cell does.
    Imports under a condition, a `try`, a loop or inside a function, and relative ones, are
    left out; a cell that does not parse gives []."""
    try:
        tree = ast.parse(python_source(raw)[0])
    except SyntaxError:
        return []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
    return list(dict.fromkeys(found))
