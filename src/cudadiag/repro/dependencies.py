"""Which candidate programs are worth a trial: a static check of what the minimizer removes.

A candidate is refused before it runs when it uses a name whose definition it removed (the
failure would change, or worse, stay the same while the repro keeps a dangling name).
Refused candidates cost no trial. A candidate that removes a seed call but keeps a later
statement drawing from the same random stream is flagged (`unseeded_draws`): the repro would
draw other numbers, so the minimizer keeps it only when it fails the same way under other
seeds too (the failure does not depend on the numbers drawn).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cudadiag.isolate.cellfacts import analyse_cell

ALL_STREAMS = frozenset({"torch", "random", "numpy"})

SEED_CALLS: dict[str, frozenset[str]] = {
    "torch.manual_seed": frozenset({"torch"}),
    "torch.cuda.manual_seed": frozenset({"torch"}),
    "torch.cuda.manual_seed_all": frozenset({"torch"}),
    "torch.seed": frozenset({"torch"}),
    "manual_seed": frozenset({"torch"}),
    "manual_seed_all": frozenset({"torch"}),
    "random.seed": frozenset({"random"}),
    "np.random.seed": frozenset({"numpy"}),
    "numpy.random.seed": frozenset({"numpy"}),
    "seed_everything": ALL_STREAMS,
    "set_seed": ALL_STREAMS,
}
"""Calls that seed a random stream, by dotted name (the longest known suffix decides)."""

RNG_FUNCTIONS = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
    "normal", "bernoulli", "multinomial", "poisson", "shuffle", "choice", "choices",
    "sample", "uniform", "random", "randrange", "gauss", "permutation", "integers",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "rrelu",
    "gumbel_softmax", "random_split", "RandomSampler", "normal_", "uniform_", "random_",
    "bernoulli_", "exponential_", "cauchy_", "geometric_", "log_normal_",
})
"""Functions and methods that draw random numbers, by their last name."""

STREAM_OF_OWNER: dict[str, frozenset[str]] = {
    "torch": frozenset({"torch"}), "F": frozenset({"torch"}), "nn": frozenset({"torch"}),
    "init": frozenset({"torch"}), "random": frozenset({"random"}),
    "np": frozenset({"numpy"}), "numpy": frozenset({"numpy"}),
}
"""The stream a call draws from, by the first name of its dotted path; others: any stream."""


@dataclass
class Unit:
    """One top-level statement of a cell, with what it binds, reads, seeds and draws."""

    cell: int
    index: int
    source: str
    line: int = 1
    """The statement's first line in its cell."""
    uses: set[str] = field(default_factory=set)
    binds: set[str] = field(default_factory=set)
    definition: bool = False
    """A function or class definition: the names it reads are needed only when it is
    called, so they may be defined after it."""
    star_import: bool = False
    seeds: frozenset[str] = frozenset()
    draws: frozenset[str] = frozenset()
    calls: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[int, int]:
        """Where the statement is: (cell, index in the cell)."""
        return self.cell, self.index

    def replaced(self, source: str) -> Unit:
        """The same statement with another text (a reduced loop), analysed again."""
        unit = _analysed(Unit(self.cell, self.index, source, self.line), ast.parse(source))
        unit.draws |= self.draws
        return unit


def statements(cells: dict[int, str]) -> list[Unit]:
    """The top-level statements of `cells` ({number: source}, in order), each analysed; a
    cell that does not parse is one unit with no known names."""
    units: list[Unit] = []
    for number, source in cells.items():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            units.append(Unit(number, 0, source))
            continue
        lines = source.splitlines()
        for index, node in enumerate(tree.body):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            text = "\n".join(lines[first - 1: node.end_lineno])
            units.append(_analysed(Unit(number, index, text, first), node))
    _propagate_draws(units)
    return units


class Admissible:
    """Decides, without running it, whether a candidate (a subsequence of the program's
    statements) may be tried. Names the full program itself leaves undefined (magics,
    names the kernel provides) are not held against a candidate."""

    def __init__(self, units: Sequence[Unit], provided: Iterable[str] = (),
                 restored_cells: Iterable[int] = ()) -> None:
        self.order = {u.key: i for i, u in enumerate(units)}
        self.units = list(units)
        self.provided = set(provided)
        self.restored = set(restored_cells)
        """Cells that start from recorded RNG states: a seed before them does not reach them."""
        self.tolerated = self._undefined(self.units)

    def why_not(self, candidate: Sequence[Unit]) -> str | None:
        """Return why `candidate` may not be tried, or None when it may."""
        undefined = self._undefined(candidate) - self.tolerated
        if undefined:
            return f"uses {', '.join(sorted(undefined))} after removing its definition"
        return None

    def unseeded_draws(self, candidate: Sequence[Unit]) -> list[Unit]:
        """Return the seed statements `candidate` removes while keeping a later statement
        that draws from a stream they seeded (empty when it removes none such)."""
        kept = {u.key for u in candidate}
        return [seed for seed in self.units if seed.seeds and seed.key not in kept
                and any(later.key in kept and later.draws & seed.seeds
                        for later in self._reached_by(seed))]

    def _reached_by(self, seed: Unit) -> list[Unit]:
        """The statements after `seed` that use the random state it set."""
        reached = []
        for unit in self.units[self.order[seed.key] + 1:]:
            if unit.cell != seed.cell and unit.cell in self.restored:
                break
            reached.append(unit)
        return reached

    def _undefined(self, candidate: Sequence[Unit]) -> set[str]:
        if any(u.star_import for u in candidate):
            return set()
        anywhere = set().union(*(u.binds for u in candidate)) if candidate else set()
        defined = set(self.provided)
        undefined: set[str] = set()
        for unit in candidate:
            known = defined | anywhere if unit.definition else defined
            undefined |= unit.uses - known
            defined |= unit.binds
        return undefined


def _analysed(unit: Unit, node: ast.AST) -> Unit:
    facts = analyse_cell(unit.cell, unit.source)
    unit.uses, unit.binds, unit.star_import = facts.uses, facts.rebinds, facts.star_import
    unit.definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    seeds: set[str] = set()
    draws: set[str] = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        name = _dotted(call.func)
        if not name:
            continue
        unit.calls.add(name.rsplit(".", 1)[-1])
        seeds |= _seeded(name)
        draws |= _drawn(name, call)
    unit.seeds, unit.draws = frozenset(seeds), frozenset(draws)
    return unit


def _propagate_draws(units: list[Unit]) -> None:
    """A call to a function or class the program defines draws what its body draws."""
    defined = {name: u for u in units if u.definition for name in u.binds}
    changed = True
    while changed:
        changed = False
        for unit in units:
            inherited = frozenset().union(*(defined[c].draws for c in unit.calls
                                             if c in defined and defined[c] is not unit))
            if not inherited <= unit.draws:
                unit.draws |= inherited
                changed = True


def _seeded(name: str) -> frozenset[str]:
    parts = name.split(".")
    for start in range(len(parts)):
        streams = SEED_CALLS.get(".".join(parts[start:]))
        if streams is not None:
            return streams
    return frozenset()


def _drawn(name: str, call: ast.Call) -> frozenset[str]:
    parts = name.split(".")
    last = parts[-1]
    torch_module = parts[0] in ("nn", "torch") and "nn" in parts[:-1] and last[:1].isupper()
    loader_shuffle = last == "DataLoader" and any(
        k.arg == "shuffle" and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in call.keywords)
    initialiser = "init" in parts[:-1] and last.endswith("_")
    if torch_module or loader_shuffle or initialiser:
        return frozenset({"torch"})  # parameter initialisation, shuffled batches
    if last not in RNG_FUNCTIONS:
        return frozenset()
    owner = ".".join(parts[:2]) if parts[:2] in (["np", "random"], ["numpy", "random"]) \
        else parts[0]
    if owner in ("np.random", "numpy.random"):
        return frozenset({"numpy"})
    return STREAM_OF_OWNER.get(owner, ALL_STREAMS) if len(parts) > 1 else ALL_STREAMS


def _dotted(func: ast.expr) -> str | None:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    elif not parts:
        return None
    return ".".join(reversed(parts))
