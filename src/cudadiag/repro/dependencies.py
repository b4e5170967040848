"""Which candidate programs are worth a trial: a static check of what the minimizer removes.

A candidate is refused before it runs when it uses a name whose definition it removed (the
failure would change, or worse, stay the same while the repro keeps a dangling name), or an
attribute whose definition it removed: `x.a` needs the statement that set `x.a` when the
program has one, `args.save` the `add_argument('--save')` that defines it. It is refused as
well when it removes a setting that changes how the program runs while what it configures
stays: a process-wide setting (isolate/effects.PROCESS_STATE_CALLS and _TARGETS: torch
defaults and flags, the environment, the import path, the working directory), or a setting
attribute of an object the kept code still uses (SETTING_NAMES: `config.num_workers = 0`
read inside a library's trainer, where no name tells it). Refused candidates cost no trial.
A candidate that removes a seed call but keeps a later statement drawing from the same
random stream is flagged (`unseeded_draws`): the repro would draw other numbers, so the
minimizer keeps it only when it fails the same way under other seeds too (the failure does
not depend on the numbers drawn).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cudadiag.isolate.cellfacts import KnownNames, analyse_cell, analyse_history

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

SETTING_NAMES = frozenset({
    "num_workers", "persistent_workers", "prefetch_factor", "pin_memory",  # data workers
    "device", "devices", "device_type", "device_map", "accelerator", "gpus",  # devices
    "dtype", "torch_dtype", "precision", "mixed_precision", "amp", "use_amp", "fp16", "bf16",
    "seed", "deterministic", "benchmark", "allow_tf32", "compile",  # seeds, determinism
})
"""Attributes (or keys) of a configuration object that change how the program runs: how
many DataLoader workers, which device, which dtype, which seed, deterministic kernels. A
library reads them where the program's own code names nothing (minGPT's Trainer reads
`config.num_workers`), so the statement that sets one stays while the object does."""
UNPINNED_STATES = frozenset({"seeds a random generator"})
"""Process-wide settings a candidate may remove: seeds (see `unseeded_draws`)."""
NAMESPACE_CALLS = frozenset({"parse_args", "parse_known_args"})
"""Methods whose result holds the options `add_argument` defined (argparse)."""

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
    attribute_uses: set[str] = field(default_factory=set)
    """Attributes it reads of names it does not bind (`args.save`, `config.model.n_layer`
    and its `config.model`)."""
    attribute_binds: set[str] = field(default_factory=set)
    """Attributes it sets (`train_config.num_workers`; `args.save` for the add_argument
    that defines it)."""
    options: set[str] = field(default_factory=set)
    """The argparse destinations its add_argument / set_defaults calls define."""
    pinned: str | None = None
    """What it sets for the whole process (a setting that stays), None for most."""
    configures: str | None = None
    """The object whose run setting it sets (`train_config` for `train_config.num_workers
    = 0`)."""

    @property
    def key(self) -> tuple[int, int]:
        """Where the statement is: (cell, index in the cell)."""
        return self.cell, self.index

    def replaced(self, source: str) -> Unit:
        """The same statement with another text (a reduced loop), analysed again."""
        unit = _analysed(Unit(self.cell, self.index, source, self.line), ast.parse(source),
                         KnownNames())
        unit.draws |= self.draws
        unit.attribute_binds |= self.attribute_binds
        unit.pinned, unit.configures = self.pinned, self.configures
        return unit


def statements(cells: dict[int, str]) -> list[Unit]:
    """The top-level statements of `cells` ({number: source}, in order), each analysed; a
    cell that does not parse is one unit with no known names."""
    units: list[Unit] = []
    facts = analyse_history(cells)
    known = facts[max(facts)].known_after if facts else KnownNames()  # every import
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
            units.append(_analysed(Unit(number, index, text, first), node, known))
    _propagate_draws(units)
    _define_options(units)
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
        self.set_attributes = set().union(*(u.attribute_binds for u in self.units)) \
            if self.units else set()
        """Attributes the program sets somewhere: a read of one needs that statement."""
        self.tolerated_attributes = self._unset_attributes(self.units)

    def why_not(self, candidate: Sequence[Unit]) -> str | None:
        """Return why `candidate` may not be tried, or None when it may."""
        undefined = self._undefined(candidate) - self.tolerated
        if undefined:
            return f"uses {', '.join(sorted(undefined))} after removing its definition"
        unset = self._unset_attributes(candidate) - self.tolerated_attributes
        if unset:
            return f"reads {', '.join(sorted(unset))} after removing what sets it"
        return self._removed_setting(candidate)

    def _removed_setting(self, candidate: Sequence[Unit]) -> str | None:
        """Why `candidate` may not remove a setting of the program, or None."""
        kept = {u.key for u in candidate}
        for position, unit in enumerate(self.units):
            if unit.key in kept:
                continue
            if unit.pinned:
                return f"removes `{_first_line(unit)}`, which {unit.pinned}"
            if unit.configures and any(
                    later.key in kept and unit.configures in later.uses
                    for later in self.units[position + 1:]):
                return (f"removes `{_first_line(unit)}`, a setting of {unit.configures}, "
                        "which the program still uses")
        return None

    def _unset_attributes(self, candidate: Sequence[Unit]) -> set[str]:
        """The attributes the program sets somewhere that `candidate` reads where none of
        its statements before set them (a function body: none of its statements at all)."""
        anywhere = set().union(*(u.attribute_binds for u in candidate)) if candidate else set()
        done: set[str] = set()
        unset: set[str] = set()
        for unit in candidate:
            known = done | anywhere if unit.definition else done
            unset |= (unit.attribute_uses & self.set_attributes) - known
            done |= unit.attribute_binds
        return unset

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


def _first_line(unit: Unit) -> str:
    line = unit.source.strip().splitlines()[0] if unit.source.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _analysed(unit: Unit, node: ast.AST, known: KnownNames) -> Unit:
    facts = analyse_cell(unit.cell, unit.source, known)
    unit.uses, unit.binds, unit.star_import = facts.uses, facts.rebinds, facts.star_import
    unit.definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    if not unit.definition:
        unit.pinned = next((s for s in facts.process_state if s not in UNPINNED_STATES), None)
        unit.configures = _configured(node)
    unit.attribute_uses, unit.attribute_binds = _attributes(node, unit.uses)
    unit.options = {dest for call in ast.walk(node) if isinstance(call, ast.Call)
                    for dest in _options(call)}
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


def _attributes(node: ast.AST, free: set[str]) -> tuple[set[str], set[str]]:
    """(attributes read, attributes set) by `node`, as dotted paths from a name in `free`
    (the names it reads from outside): an augmented assignment reads its target."""
    reads: set[str] = set()
    writes: set[str] = set()
    augmented = {id(n.target) for n in ast.walk(node) if isinstance(n, ast.AugAssign)}
    for child in ast.walk(node):
        if not isinstance(child, ast.Attribute):
            continue
        path = _dotted(child)
        if path is None or "." not in path or path.split(".")[0] not in free:
            continue
        if isinstance(child.ctx, ast.Load) or id(child) in augmented:
            reads.add(path)
        elif isinstance(child.ctx, ast.Store):
            writes.add(path)
    return reads - writes, writes


def _configured(node: ast.AST) -> str | None:
    """The name of the object whose run setting (SETTING_NAMES) the assignment `node` sets:
    `train_config` for `train_config.num_workers = 0` or `config["device"] = "cuda"`."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return None
    for target in targets:
        key = target.attr if isinstance(target, ast.Attribute) else (
            target.slice.value if isinstance(target, ast.Subscript)
            and isinstance(target.slice, ast.Constant) else None)
        base = _dotted(target.value) if isinstance(target, (ast.Attribute, ast.Subscript)) \
            else None
        if key in SETTING_NAMES and base is not None:
            return base.split(".")[0]
    return None


def _options(call: ast.Call) -> list[str]:
    """The argparse destinations `call` defines: `save` for `add_argument('--save')`,
    `n_layer` for `add_argument('-n', '--n-layer')`, `dest=` when given; `set_defaults`'s
    keywords."""
    if not isinstance(call.func, ast.Attribute):
        return []
    if call.func.attr == "set_defaults":
        return [k.arg for k in call.keywords if k.arg]
    if call.func.attr != "add_argument":
        return []
    dest = next((k.value for k in call.keywords if k.arg == "dest"), None)
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
        return [dest.value]
    flags = [a.value for a in call.args if isinstance(a, ast.Constant)
             and isinstance(a.value, str)]
    named = [f for f in flags if f.startswith("--")] or [f for f in flags if f.startswith("-")]
    chosen = named[0].lstrip("-") if named else (flags[0] if flags else "")
    return [chosen.replace("-", "_")] if chosen else []


def _define_options(units: list[Unit]) -> None:
    """An add_argument defines its option as an attribute of every name the program binds
    to a parse_args() result (directly, or returned by a function of its own that calls
    it)."""
    parsing = {name for u in units if u.definition and NAMESPACE_CALLS & u.calls
               for name in u.binds}
    namespaces = {name for u in units if not u.definition
                  and (NAMESPACE_CALLS & u.calls or parsing & u.calls)
                  for name in u.binds}
    for unit in units:
        unit.attribute_binds |= {f"{ns}.{dest}" for ns in namespaces for dest in unit.options}


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
