"""What a fresh process needs to re-run a cell: which earlier cells to replay, which values to
ship, which lines to skip.

The analysis is static (AST def/use over the kernel's history in execution order) and errs on
the side of replaying: a value is shipped only when no cell from the one that needs it onwards
may have changed it, directly or through an alias.
"""

from __future__ import annotations

import ast
import builtins
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_MAGIC_LINE = re.compile(
    r"^(\s*)(?:[\w.]+\s*=\s*)?(?:[!%]|get_ipython\(\)\.(?:run_line_magic|run_cell_magic|"
    r"system|getoutput)\()"
)
_HELP_LINE = re.compile(r"^\s*[\w.]+\?\??\s*$")
_KEPT_LINE_MAGICS = ("%load_ext cudadiag",)
_PYTHON_CELL_MAGICS = ("%%time", "%%capture")
SHIP_MAX_BYTES = 512 * 2**20
_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "get_ipython", "In", "Out",
                                        "exit", "quit", "display"}


class PlanError(ValueError):
    """The plan cannot provide what the cell needs; nothing was run."""


@dataclass
class CellFacts:
    """What one cell reads, binds and may change."""

    number: int
    source: str
    """The cell as Python, magics and shell escapes replaced by `pass`."""
    skipped: list[str] = field(default_factory=list)
    uses: set[str] = field(default_factory=set)
    rebinds: set[str] = field(default_factory=set)
    mutates: set[str] = field(default_factory=set)
    """Names changed in place: attribute or item assignment, method calls, augmented
    assignment, iteration whose elements may be changed."""
    may_change: set[str] = field(default_factory=set)
    """`mutates` plus names called or passed to calls that are not known to be pure."""
    aliases: list[set[str]] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)
    """Names bound by `import x` / `import x as y`."""
    star_import: bool = False
    syntax_error: str | None = None

    @property
    def defines(self) -> set[str]:
        """Names this cell binds or changes in place."""
        return self.rebinds | self.mutates


@dataclass
class Plan:
    """Cells to replay (in order, the target last), values to ship, lines skipped."""

    target: int
    replay: list[int]
    ship: list[str]
    skipped: list[tuple[int, str]]
    not_shipped: dict[str, str] = field(default_factory=dict)
    """Names that were candidates for shipping, with why they are replayed instead."""
    sources: dict[int, str] = field(default_factory=dict)
    """The replayed cells as plain Python (magic lines replaced by `pass`)."""

    def describe(self) -> str:
        """Return the one or two lines the magics print before running."""
        replay = ", ".join(f"In[{n}]" for n in self.replay) or "nothing"
        line = f"plan: replay {replay}; ship {', '.join(self.ship) or 'nothing'}"
        if self.skipped:
            skipped = "; ".join(f"In[{n}]: {text}" for n, text in self.skipped[:5])
            more = f" (+{len(self.skipped) - 5} more)" if len(self.skipped) > 5 else ""
            line += f"\n  skipped (magics and shell escapes): {skipped}{more}"
        return line


def analyse_cell(number: int, raw: str, modules: set[str] | None = None) -> CellFacts:
    """Return the def/use facts of one cell's raw source (magics become `pass`).

    `modules` are names earlier cells bound with `import`: calls through them (`F.relu(x)`)
    are taken to leave their arguments unchanged unless the function name ends with `_`.
    """
    source, skipped = python_source(raw)
    facts = CellFacts(number=number, source=source, skipped=skipped)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        facts.syntax_error = f"{exc.msg} (line {exc.lineno})"
        return facts
    _Visitor(facts, modules or set()).visit(tree)
    facts.uses -= _BUILTINS
    return facts


def python_source(raw: str) -> tuple[str, list[str]]:
    """Return the cell as plain Python and the magic / shell lines it replaced by `pass`."""
    lines = raw.splitlines()
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        if first.split()[0] in _PYTHON_CELL_MAGICS:
            return "\n".join(["pass", *lines[1:]]), []
        return "pass", [first]
    kept, skipped = [], []
    for line in lines:
        stripped = line.strip()
        magic = _MAGIC_LINE.match(line)
        if magic or _HELP_LINE.match(line):
            if not stripped.startswith(_KEPT_LINE_MAGICS) and "'load_ext', 'cudadiag'" not in line:
                skipped.append(stripped)
            indent = magic.group(1) if magic else line[: len(line) - len(line.lstrip())]
            kept.append(f"{indent}pass")
        else:
            kept.append(line)
    return "\n".join(kept), skipped


def make_plan(
    history: Mapping[int, str],
    target: int,
    namespace: Mapping[str, Any] | None = None,
    ship: str | list[str] = "auto",
    cells: list[int] | None = None,
) -> Plan:
    """Plan the re-run of cell `target` from `history` ({execution count: raw source}).

    `namespace` is the kernel's user namespace (values to ship are read from it, never
    changed); `ship` is "auto", "none" or a list of names; `cells` overrides the analysis.
    Raises PlanError when the target is unknown, does not parse, or reads a name that neither
    a replayed cell nor a shipped value provides.
    """
    if target not in history:
        raise PlanError(f"In[{target}] is not in this kernel's history "
                        f"(known: In[1]..In[{max(history, default=0)}])")
    order = sorted(n for n in history if n <= target)
    facts: dict[int, CellFacts] = {}
    modules: set[str] = set()
    for n in sorted(history):
        facts[n] = analyse_cell(n, history[n], modules)
        modules |= facts[n].modules
    if facts[target].syntax_error:
        raise PlanError(f"In[{target}] does not parse: {facts[target].syntax_error}")
    namespace = namespace or {}
    if cells is not None:
        return _explicit_plan(facts, target, cells, ship, namespace)
    changed_after = _changed_from(facts, sorted(history))
    needed = set(facts[target].uses)
    replay, shipped, refused = [target], [], {}
    for number in reversed(order[:-1]):
        cell = facts[number]
        for name in sorted(needed - refused.keys()):
            if _ship_allowed(name, ship):
                reason = _why_not_shippable(name, namespace, changed_after(number + 1))
                if reason is None:
                    shipped.append(name)
                    needed.discard(name)
                elif ship != "none":
                    refused[name] = reason
        if cell.star_import or cell.defines & needed:
            replay.append(number)
            needed = (needed - cell.rebinds) | cell.uses
    missing = sorted(needed)  # uses never hold builtins (analyse_cell drops them)
    explicit = [n for n in (ship if isinstance(ship, list) else []) if n in missing]
    if explicit:
        raise PlanError(f"cannot ship {', '.join(explicit)}: " + "; ".join(
            f"{n}: {refused.get(n, 'not in the namespace')}" for n in explicit))
    if missing:
        raise PlanError(
            f"In[{target}] reads {', '.join(missing)}, which no earlier cell defines and which "
            "cannot be shipped (" + "; ".join(f"{n}: {refused.get(n, 'not defined')}"
                                              for n in missing) + ")"
        )
    return Plan(
        target=target,
        replay=sorted(replay),
        ship=sorted(shipped),
        skipped=[(n, s) for n in sorted(replay) for s in facts[n].skipped],
        not_shipped={k: v for k, v in refused.items() if k not in shipped},
        sources={n: facts[n].source for n in replay},
    )


def _explicit_plan(facts: dict[int, CellFacts], target: int, cells: list[int],
                   ship: str | list[str], namespace: Mapping[str, Any]) -> Plan:
    unknown = [n for n in cells if n not in facts]
    if unknown:
        raise PlanError(f"--cells names cells not in the history: {unknown}")
    names = ship if isinstance(ship, list) else []
    absent = [n for n in names if n not in namespace]
    if absent:
        raise PlanError(f"cannot ship {', '.join(absent)}: not in the namespace")
    replay = sorted(set(cells) | {target})
    return Plan(target=target, replay=replay, ship=list(names),
                skipped=[(n, s) for n in replay for s in facts[n].skipped],
                sources={n: facts[n].source for n in replay})


def _ship_allowed(name: str, ship: str | list[str]) -> bool:
    return name in ship if isinstance(ship, list) else ship == "auto"


def _changed_from(facts: dict[int, CellFacts], order: list[int]) -> Callable[[int], set[str]]:
    """Return f(first) -> names that cells executed from `first` on may have rebound or
    changed in place (in-place changes closed over aliases)."""
    groups = _alias_groups(facts.values())

    def changed(first: int) -> set[str]:
        rebound: set[str] = set()
        in_place: set[str] = set()
        for n in order:
            if n >= first:
                rebound |= facts[n].rebinds
                in_place |= facts[n].may_change
        # a change in place reaches every alias of the object; a rebinding does not
        for group in groups:
            if group & in_place:
                in_place |= group
        return rebound | in_place

    return changed


def _alias_groups(cells: Any) -> list[set[str]]:
    groups: list[set[str]] = []
    for cell in cells:
        for edge in cell.aliases:
            merged = set(edge)
            rest = []
            for group in groups:
                if group & merged:
                    merged |= group
                else:
                    rest.append(group)
            groups = [*rest, merged]
    return groups


def _why_not_shippable(name: str, namespace: Mapping[str, Any], changed: set[str]) -> str | None:
    if name not in namespace:
        return "not in the namespace"
    if name in changed:
        return "may have been changed since (directly or through an alias)"
    value = namespace[name]
    if type(value).__name__ == "module":
        return "a module (imports are replayed)"
    device = _non_cpu_device(value)
    if device is not None:
        return f"lives on {device} (rebuilt by replay, never read from the kernel)"
    nbytes = _tensor_bytes(value)
    if nbytes > SHIP_MAX_BYTES:
        return f"too large to ship ({nbytes >> 20} MiB)"
    if nbytes:
        return None  # CPU tensors pickle
    try:
        import cloudpickle

        cloudpickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RuntimeError) as exc:
        return f"not picklable ({type(exc).__name__})"
    return None


def _tensor_bytes(value: Any) -> int:
    if hasattr(value, "untyped_storage") and hasattr(value, "element_size"):
        return int(value.numel() * value.element_size())
    return 0


def _non_cpu_device(value: Any, depth: int = 0) -> str | None:
    """The first non-CPU device found in a tensor, module or container (metadata only)."""
    device = getattr(value, "device", None)
    if device is not None and getattr(device, "type", "cpu") not in ("cpu", "meta"):
        return str(device)
    tensors = getattr(value, "parameters", None)
    if callable(tensors) and hasattr(value, "buffers"):
        try:
            for t in [*value.parameters(), *value.buffers()]:
                if t.device.type != "cpu":
                    return str(t.device)
        except Exception:
            return "an unknown device"
    if depth < 3 and isinstance(value, (list, tuple, set, dict)):
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            found = _non_cpu_device(item, depth + 1)
            if found:
                return found
    return None


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _local_names(nodes: list[ast.AST], args: ast.arguments | None) -> set[str]:
    """Names a function (or lambda) binds itself: its parameters and what its body stores,
    unless declared global."""
    names: set[str] = set()
    if args is not None:
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        names |= {a.arg for a in every}
    declared_global: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                names.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
            elif isinstance(sub, ast.Global):
                declared_global |= set(sub.names)
    return names - declared_global


class _Visitor(ast.NodeVisitor):
    """Collects a cell's facts.

    A use is *free* when the cell reads a name it has not bound before (at module level), or
    that a function body reads without binding it: those must come from earlier cells.
    """

    def __init__(self, facts: CellFacts, modules: set[str]) -> None:
        self.facts = facts
        self.modules = set(modules)
        self.bound: set[str] = set()
        """Module-level names this cell has bound so far."""
        self.scopes: list[set[str]] = []
        """Local names of the enclosing functions, lambdas and comprehensions."""
        self.deferred: set[str] = set()
        """Free names read inside function bodies (resolved when the function is called)."""

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
            if not self.scopes:
                self.modules.add(name)
                self.facts.modules.add(name)
                self.facts.imports.add(name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.facts.star_import = True
            else:
                self._bind(alias.asname or alias.name)
                self.facts.imports.add(alias.asname or alias.name)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        self._bind(node.name)
        self._in_scope(_local_names(node.body, node.args), node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.bases, *node.decorator_list]:
            self.visit(expr)
        self._bind(node.name)
        self._in_scope(_local_names(node.body, None), node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._in_scope(_local_names([], node.args), [node.body])

    def _comprehension(self, node: ast.AST) -> None:
        generators = node.generators
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        local = {n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        rest: list[ast.AST] = [g.target for g in generators]
        rest += [g.iter for g in generators[1:]] + [c for g in generators for c in g.ifs]
        rest += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        self.scopes.append(local)
        for sub in rest:
            self.visit(sub)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Global(self, node: ast.Global) -> None:
        self.facts.rebinds.update(node.names)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._store(target)
            self._alias(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self._alias(node.target, node.value)
        self._store(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        root = _root(node.target)
        if root:
            self._read(root)
            self._mutate(root)
        self._store(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._store(node.target)
        iterated, target = _root(node.iter), _root(node.target)
        if iterated and target:
            self.facts.aliases.append({iterated, target})
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._store(node.optional_vars)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            root = _root(target)
            if isinstance(target, ast.Name):
                self._bind(target.id)
            elif root:
                self._read(root)
                self._mutate(root)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._store(node.target)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        owner = _root(func)
        if isinstance(func, ast.Attribute):
            pure = owner in self.modules and not func.attr.endswith("_")
            if owner and owner not in self.modules:
                self._mutate(owner)  # x.method(...) may change x
        else:
            pure = False
            if owner:
                self.facts.may_change.add(owner)  # model(x) may change model
        if not pure:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                root = _root(arg)
                if root:
                    self.facts.may_change.add(root)

    def _in_scope(self, local: set[str], body: list[ast.AST]) -> None:
        self.scopes.append(local)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def _read(self, name: str) -> None:
        if any(name in scope for scope in self.scopes):
            return
        if self.scopes:
            self.deferred.add(name)
        elif name not in self.bound:
            self.facts.uses.add(name)

    def _bind(self, name: str) -> None:
        if not self.scopes:
            self.bound.add(name)
            self.facts.rebinds.add(name)

    def _store(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element)
        elif isinstance(target, ast.Starred):
            self._store(target.value)
        else:
            root = _root(target)
            if root:
                self._read(root)
                self._mutate(root)  # x.attr = ... / x[i] = ...
            self.visit(target)

    def _mutate(self, root: str) -> None:
        if any(root in scope for scope in self.scopes):
            return
        self.facts.mutates.add(root)
        self.facts.may_change.add(root)

    def _alias(self, target: ast.AST, value: ast.AST) -> None:
        names = set(_stored_names(target))
        sources = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - self.modules
        if names and sources and not self.scopes:
            self.facts.aliases.append(names | sources)


def _stored_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _stored_names(e)]
    return []
