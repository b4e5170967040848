"""What a fresh process needs to re-run a cell: which earlier cells to replay, which values to
ship, which lines to skip, and which side effects replaying would repeat.

The analysis is static (the facts of `cellfacts` over the kernel's history in execution order)
and errs on the side of replaying: a cell is replayed when it binds or changes (directly or
through an alias) a name that is needed, or sets process-wide state; a value is shipped only
when no cell from the one that needs it onwards may have changed it.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cudadiag.errors import PlanError
from cudadiag.isolate.cellfacts import CellFacts, SideEffect, analyse_history

SHIP_MAX_BYTES = 512 * 2**20
RNG_STATE = frozenset({"seeds a random generator", "sets a random generator's state"})
"""Process-wide state that the child sets anyway: each cell starts from its recorded RNG
states, so a cell replaced by a checkpoint is not replayed for these alone."""


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
    side_effects: list[tuple[int, SideEffect]] = field(default_factory=list)
    """What the replayed cells (the target included) do to the machine."""
    process_state: list[tuple[int, str]] = field(default_factory=list)
    """Cells replayed only because they set process-wide state, with what they set."""
    ship_instead: list[str] = field(default_factory=list)
    """Values that could be shipped instead of replaying the cells with side effects."""
    replayed_for: dict[int, str] = field(default_factory=dict)
    """Why each earlier cell with side effects is replayed (what it provides that cannot be
    shipped)."""
    allow_side_effects: bool = False
    restored: list[str] = field(default_factory=list)
    """Names the checkpoint restores (`--restore`) before the target runs."""
    replaced: list[int] = field(default_factory=list)
    """Cells not replayed because the checkpoint restores what they changed."""

    @property
    def repeated_side_effects(self) -> list[tuple[int, SideEffect]]:
        """Side effects of replayed cells other than the target (the user asked for that)."""
        return [(n, effect) for n, effect in self.side_effects if n != self.target]

    @property
    def refusal(self) -> str | None:
        """Why the plan must not run as it is (it would repeat side effects), or None."""
        repeated = self.repeated_side_effects
        if not repeated or self.allow_side_effects:
            return None
        cells = sorted({n for n, _ in repeated})
        lines = ["not run: replaying would repeat what earlier cells did to this machine:"]
        lines += [f"  In[{n}] {effect}" for n, effect in repeated]
        lines += [f"In[{n}] is replayed for {self.replayed_for[n]}." for n in cells
                  if n in self.replayed_for]
        advice = f"Add --allow-side-effects to replay {_cells(cells)} anyway"
        if self.ship_instead:
            advice += (f", or --ship {','.join(self.ship_instead)} to send the values instead "
                       "of replaying the cells that made them")
        return "\n".join([*lines, advice + ", or --cells N,M,... to choose the cells to "
                                            "replay."])

    def describe(self) -> str:
        """Return the lines the magics print before running: the plan, then its notes."""
        replay = ", ".join(f"In[{n}]" for n in self.replay) or "nothing"
        lines = [f"plan: replay {replay}; ship {', '.join(self.ship) or 'nothing'}"]
        if self.restored:
            instead = f" instead of replaying {_cells(self.replaced)}" if self.replaced else ""
            lines.append(f"  restored from the checkpoint{instead}: {', '.join(self.restored)}")
        for n, effect in self.side_effects:
            which = " (the cell re-run)" if n == self.target else ""
            lines.append(f"  side effect: In[{n}]{which} {effect}")
        for n, what in self.process_state:
            lines.append(f"  kept for process-wide state: In[{n}] {what}")
        if self.skipped:
            skipped = "; ".join(f"In[{n}]: {text}" for n, text in self.skipped[:5])
            more = f" (+{len(self.skipped) - 5} more)" if len(self.skipped) > 5 else ""
            lines.append(f"  skipped (magics and shell escapes): {skipped}{more}")
        if self.refusal:
            instead = f" or --ship {','.join(self.ship_instead)}" if self.ship_instead else ""
            lines.append(f"  a run needs --allow-side-effects{instead}")
        return "\n".join(lines)


def make_plan(
    history: Mapping[int, str],
    target: int,
    namespace: Mapping[str, Any] | None = None,
    ship: str | list[str] = "auto",
    cells: list[int] | None = None,
    allow_side_effects: bool = False,
    restore: Collection[str] = (),
) -> Plan:
    """Plan the re-run of cell `target` from `history` ({execution count: raw source}).

    `namespace` is the kernel's user namespace (values to ship are read from it, never
    changed); `ship` is "auto", "none" or a list of names; `cells` overrides the analysis;
    `allow_side_effects` lets the plan replay cells that act on the machine (otherwise its
    `refusal` says why it must not run). `restore` names what a checkpoint restores just
    before the target: a cell that changes a restored object in place (a training loop on
    `model`) and binds nothing needed is not replayed, whatever else it changes in place;
    a restored name no object of the kernel holds (a step count) needs no cell at all.
    Raises PlanError when the target is unknown, does not parse, or reads a name that neither
    a replayed cell nor a shipped value provides, and when a name of `ship` does not exist,
    cannot be shipped, or is not needed.
    """
    if target not in history:
        raise PlanError(f"In[{target}] is not in this kernel's history "
                        f"(known: In[1]..In[{max(history, default=0)}])")
    facts = analyse_history(history)
    if facts[target].syntax_error:
        raise PlanError(f"In[{target}] does not parse: {facts[target].syntax_error}")
    namespace = namespace or {}
    explicit = ship if isinstance(ship, list) else []
    absent = [name for name in explicit if name not in namespace]
    if absent:
        raise PlanError(f"cannot ship {', '.join(absent)}: no such variable in this kernel")
    if cells is not None:
        plan = _explicit_plan(facts, target, cells, explicit, namespace, allow_side_effects)
        plan.restored = list(restore)
        return plan
    plan = _Planner(facts, target, namespace, ship, restore).plan(allow_side_effects)
    if restore:
        plan.restored = list(restore)
        try:
            without = _Planner(facts, target, namespace, ship).plan(allow_side_effects)
        except PlanError:  # only the checkpoint provides what the target reads
            without = plan
        plan.replaced = sorted(set(without.replay) - set(plan.replay))
    return plan


class _Planner:
    """Walks the history backwards from the target, collecting what the target needs."""

    def __init__(self, facts: dict[int, CellFacts], target: int,
                 namespace: Mapping[str, Any], ship: str | list[str],
                 restore: Collection[str] = ()) -> None:
        self.facts = facts
        self.restore = set(restore)
        self.restored_in_place = {n for n in restore
                                  if hasattr(namespace.get(n), "load_state_dict")}
        self.target = target
        self.namespace = namespace
        self.ship = ship
        groups = _alias_groups(cell.aliases for cell in facts.values())
        # an immutable value (an int, a string...) is never changed in place through an alias
        fixed = {name for name, value in namespace.items() if _immutable(value)}
        self.changes = _changed_from(facts, groups, fixed)
        self.writes = {n: cell.rebinds | (_closed(cell.mutates, groups) - fixed)
                       for n, cell in facts.items()}
        self.never_ship: dict[str, str] = {}
        self.needed: set[str] = set()
        self.replay: list[int] = []
        self.shipped: list[str] = []
        self.refused: dict[str, str] = {}
        self.provides: dict[int, set[str]] = {}

    def plan(self, allow_side_effects: bool) -> Plan:
        while True:
            try:
                self._walk()
                self._check_not_made_again()
                break
            except _Unship as unship:  # plan again, replaying that name
                self.never_ship[unship.name] = unship.reason
        self._check_complete()
        replay = sorted(self.replay)
        side_effects = [(n, e) for n in replay for e in self.facts[n].effects]
        ship_instead, replayed_for = self._instead_of({n for n, _ in side_effects}
                                                      - {self.target})
        return Plan(
            target=self.target,
            replay=replay,
            ship=sorted(self.shipped),
            skipped=[(n, s) for n in replay for s in self.facts[n].skipped],
            not_shipped={k: v for k, v in self.refused.items() if k not in self.shipped},
            sources={n: self.facts[n].source for n in replay},
            side_effects=side_effects,
            process_state=[(n, ", ".join(self.facts[n].process_state)) for n in replay
                           if n != self.target and not self.provides.get(n)
                           and not self.facts[n].star_import],
            ship_instead=ship_instead,
            replayed_for=replayed_for,
            allow_side_effects=allow_side_effects,
        )

    def _walk(self) -> None:
        self.needed = set(self.facts[self.target].uses) - (self.restore
                                                            - self.restored_in_place)
        self.replay = [self.target]
        self.shipped = []
        self.refused = dict(self.never_ship)
        self.provides = {}
        order = sorted(n for n in self.facts if n <= self.target)
        for number in reversed(order[:-1]):
            self._ship_needed(number + 1)
            cell = self.facts[number]
            provided = set() if self._replaced(number) else (
                (self.writes[number] & self.needed) - (self.restored_in_place - cell.rebinds))
            if cell.star_import or provided or self._keeps_process_state(cell):
                self.replay.append(number)
                self.provides[number] = provided
                self.needed = (self.needed - cell.rebinds) | cell.uses
        self._ship_needed(order[0])

    def _replaced(self, number: int) -> bool:
        """True when the checkpoint stands for cell `number`: it changes a restored object in
        place (a training loop) and binds nothing that is needed; its other in-place changes
        are taken as part of the training the checkpoint holds."""
        return bool(self.writes[number] & self.restored_in_place) and (
            self.facts[number].rebinds.isdisjoint(self.needed))

    def _keeps_process_state(self, cell: CellFacts) -> bool:
        """True when the cell sets process-wide state the child needs (with a checkpoint,
        seeding alone does not count: every cell starts from its recorded RNG states)."""
        if self.restore:
            return any(state not in RNG_STATE for state in cell.process_state)
        return bool(cell.process_state)

    def _ship_needed(self, first: int) -> None:
        """Ship the needed names whose current values no cell from `first` on may have
        changed (explicitly named ones must be shippable)."""
        explicit = self.ship if isinstance(self.ship, list) else []
        candidates = [name for name in sorted(self.needed - self.refused.keys())
                      if (name in explicit if explicit else self.ship == "auto")]
        changed = self.changes(first) if candidates else {}
        for name in candidates:
            reason = _why_not_shippable(name, self.namespace, changed)
            if name in self.shipped:  # needed again, earlier: is it still the same value?
                if reason is None:
                    self.needed.discard(name)
                elif name in explicit:
                    raise PlanError(f"cannot ship {name}: an earlier replayed cell needs the "
                                    f"value it had before: it {reason}")
                else:
                    raise _Unship(name, reason)
            elif reason is None:
                self.shipped.append(name)
                self.needed.discard(name)
            elif name in explicit:
                raise PlanError(f"cannot ship {name}: {reason}")
            else:
                self.refused[name] = reason

    def _check_not_made_again(self) -> None:
        """A shipped value that a replayed cell makes again would be overwritten (the child
        loads shipped values before it replays)."""
        explicit = self.ship if isinstance(self.ship, list) else []
        for name in self.shipped:
            again = [n for n in self.replay if n != self.target and name in self.writes[n]]
            if again:
                reason = f"made again by In[{min(again)}], which is replayed anyway"
                if name in explicit:
                    raise PlanError(f"cannot ship {name}: it is {reason}")
                raise _Unship(name, reason)

    def _check_complete(self) -> None:
        explicit = self.ship if isinstance(self.ship, list) else []
        unused = [name for name in explicit if name not in self.shipped]
        if unused:
            raise PlanError(f"cannot ship {', '.join(unused)}: neither In[{self.target}] nor "
                            "the cells it needs read it")
        missing = sorted(self.needed)  # uses never hold builtins (analyse_cell drops them)
        if missing:
            raise PlanError(
                f"In[{self.target}] reads {', '.join(missing)}, which no earlier cell defines "
                "and which cannot be shipped (" + "; ".join(
                    f"{n}: {self.refused.get(n, 'not defined')}" for n in missing) + ")")

    def _instead_of(self, cells: set[int]) -> tuple[list[str], dict[int, str]]:
        """For the cells with side effects: the values that could be shipped instead, and why
        each cell is replayed."""
        shippable: set[str] = set()
        replayed_for: dict[int, str] = {}
        for n in sorted(cells):
            names_by_reason: dict[str, list[str]] = {}
            for name in sorted(self.provides.get(n, ())):
                why = _why_not_shippable(name, self.namespace, self.changes(n + 1))
                if why is None:
                    shippable.add(name)
                else:
                    names_by_reason.setdefault(why, []).append(name)
            reasons = [f"{', '.join(names)} (not shipped: {why})"
                       for why, names in names_by_reason.items()]
            if self.facts[n].process_state and not self.provides.get(n):
                reasons.append(f"process-wide state ({', '.join(self.facts[n].process_state)})")
            if reasons:
                replayed_for[n] = "; ".join(reasons)
        return sorted(shippable), replayed_for


class _Unship(Exception):
    """A shipped name must be replayed instead: an earlier replayed cell needs it as it was
    before a change, or makes it again."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name)
        self.name = name
        self.reason = reason


def _explicit_plan(facts: dict[int, CellFacts], target: int, cells: list[int],
                   ship: list[str], namespace: Mapping[str, Any],
                   allow_side_effects: bool) -> Plan:
    unknown = [n for n in cells if n not in facts]
    if unknown:
        raise PlanError(f"--cells names cells not in the history: {unknown}")
    for name in ship:
        reason = _why_not_shippable(name, namespace, {})
        if reason is not None:
            raise PlanError(f"cannot ship {name}: {reason}")
    replay = sorted(set(cells) | {target})
    return Plan(target=target, replay=replay, ship=list(ship),
                skipped=[(n, s) for n in replay for s in facts[n].skipped],
                sources={n: facts[n].source for n in replay},
                side_effects=[(n, e) for n in replay for e in facts[n].effects],
                allow_side_effects=allow_side_effects)


def _cells(numbers: list[int]) -> str:
    return ", ".join(f"In[{n}]" for n in numbers)


def _changed_from(facts: dict[int, CellFacts], groups: list[set[str]],
                  fixed: set[str]) -> Callable[[int], dict[str, int]]:
    """Return f(first) -> {name: the first cell from `first` on that may have rebound or
    changed it in place} (in-place changes reach every alias of the object, except the
    `fixed` names, whose values are immutable)."""

    def changed(first: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for n in sorted(facts):
            if n >= first:
                in_place = _closed(facts[n].may_change, groups) - fixed
                for name in facts[n].rebinds | in_place:
                    found.setdefault(name, n)
        return found

    return changed


def _immutable(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (int, float, complex, str, bytes, frozenset, range, type(None))):
        return True
    return (isinstance(value, tuple) and depth < 3
            and all(_immutable(item, depth + 1) for item in value))


def _closed(names: set[str], groups: list[set[str]]) -> set[str]:
    """`names` and every name that may share an object with one of them."""
    closed = set(names)
    for group in groups:
        if group & names:
            closed |= group
    return closed


def _alias_groups(edges_by_cell: Iterable[list[set[str]]]) -> list[set[str]]:
    groups: list[set[str]] = []
    for edges in edges_by_cell:
        for edge in edges:
            merged = set(edge)
            rest = []
            for group in groups:
                if group & merged:
                    merged |= group
                else:
                    rest.append(group)
            groups = [*rest, merged]
    return groups


def _why_not_shippable(name: str, namespace: Mapping[str, Any],
                       changed: Mapping[str, int]) -> str | None:
    if name not in namespace:
        return "not in the namespace"
    if name in changed:
        return (f"may have been changed since, by In[{changed[name]}] (directly or through an "
                "alias)")
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
        return f"not picklable ({type(exc).__name__}: {exc})"
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
