"""What a fresh process needs to re-run a cell: which earlier cells to replay, which values to
ship, which lines to skip, and which side effects replaying would repeat.

The analysis is static (the facts of `cellfacts` over the kernel's history in execution order)
and errs on the side of replaying: a cell is replayed when it binds or changes (directly or
through an alias) a name that is needed, or sets process-wide state; a value is shipped only
when no cell from the one that needs it onwards may have changed it. An earlier cell that
failed in the session is never replayed: the cell that re-ran its code after the fix (its new
version) stands for it.

One rule for every re-run (%cuda_isolate, %cuda_compare, validate, the fix check): the plan
names every side effect before anything runs, and refuses, unless side effects are allowed,
a run that repeats what an earlier cell did or that runs the target more than once.
"""

from __future__ import annotations

import difflib
import pickle
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cudadiag.errors import PlanError
from cudadiag.i18n import N_, _, localize
from cudadiag.isolate.cellfacts import CellFacts, SideEffect, analyse_history, star_names

SHIP_MAX_BYTES = 512 * 2**20
RNG_STATE = frozenset({"seeds a random generator", "sets a random generator's state"})
"""Process-wide state that the child sets anyway: each cell starts from its recorded RNG
states, so a cell replaced by a checkpoint is not replayed for these alone."""
SIMILAR_ENOUGH = 0.5
"""How alike (difflib ratio) a later cell must be to an earlier one to be taken as its new
version."""


@dataclass(frozen=True)
class Rerun:
    """How a command runs the planned cells: how many times it runs the target (and how, in
    words), and which of the plan's options it takes (a refusal offers only those)."""

    runs: int = 1
    how: str = N_("once")
    """The runs in words, e.g. "once per row (the reference and 3 variants)"."""
    options: frozenset[str] = frozenset({"--ship", "--cells"})
    subject: str | None = None
    """What runs `how`, in words, when it is more than the target (None: the target)."""


ISOLATED_RUN = Rerun()
"""%cuda_isolate: the target once; --ship and --cells choose what is replayed."""


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
    not_replayed: list[tuple[int, int | None]] = field(default_factory=list)
    """Earlier cells that failed in the session and would otherwise be replayed, each with
    its new version (a later cell that re-ran its code; None when there is none)."""
    rerun: Rerun = ISOLATED_RUN

    @property
    def repeated_side_effects(self) -> list[tuple[int, SideEffect]]:
        """Side effects the runs would repeat: those of replayed cells other than the target,
        and the target's own when the command runs it more than once (running it once is what
        the user asked for)."""
        return [(n, effect) for n, effect in self.side_effects
                if n != self.target or self.rerun.runs > 1]

    @property
    def refusal(self) -> str | None:
        """Why the plan must not run as it is (it would repeat side effects), or None."""
        return repeat_refusal([self])

    def describe(self) -> str:
        """Return the lines the magics print before running: the plan, then its notes."""
        nothing = _("nothing")
        replay = ", ".join(f"In[{n}]" for n in self.replay) or nothing
        lines = [_("plan: replay {replay}; ship {ship}").format(
            replay=replay, ship=", ".join(self.ship) or nothing)]
        if self.restored:
            restored = ", ".join(self.restored)
            lines.append("  " + (_("restored from the checkpoint instead of replaying {cells}: "
                                   "{names}").format(cells=_cells(self.replaced), names=restored)
                                 if self.replaced else
                                 _("restored from the checkpoint: {names}").format(
                                     names=restored)))
        for n, effect in self.side_effects:
            lines.append("  " + (_("side effect: In[{n}] (the cell re-run) {effect}")
                                 if n == self.target else
                                 _("side effect: In[{n}] {effect}")).format(
                n=n, effect=effect_text(effect)))
        for n, what in self.process_state:
            lines.append("  " + _("kept for process-wide state: In[{n}] {what}").format(
                n=n, what=what))
        for n, successor in self.not_replayed:
            lines.append("  " + (_("not replayed: In[{n}] failed in this session; "
                                   "In[{successor}], its new version, stands for it")
                                 if successor else
                                 _("not replayed: In[{n}] failed in this session")).format(
                n=n, successor=successor))
        if self.skipped:
            skipped = "; ".join(f"In[{n}]: {text}" for n, text in self.skipped[:5])
            more = (" " + _("(+{count} more)").format(count=len(self.skipped) - 5)
                    if len(self.skipped) > 5 else "")
            lines.append("  " + _("skipped (magics and shell escapes): {skipped}").format(
                skipped=skipped) + more)
        if self.refusal:
            offered = self.ship_instead and "--ship" in self.rerun.options and any(
                n != self.target for n, _effect in self.repeated_side_effects)
            lines.append("  " + (_("a run needs --allow-side-effects or --ship {names}").format(
                names=",".join(self.ship_instead)) if offered else
                _("a run needs --allow-side-effects")))
        return "\n".join(lines)


def repeat_refusal(plans: Sequence[Plan]) -> str | None:
    """The rule of every re-run: return why the runs of `plans` (one command's, run as their
    `rerun` says) must not go ahead, or None. They must not when, side effects not allowed,
    they would repeat what an earlier cell did to this machine, or run a cell that acts on
    it more than once in all (a comparison's rows, a fix check's old and new code)."""
    if not plans or plans[0].allow_side_effects:
        return None
    rerun = plans[0].rerun
    earlier = _unique((n, effect) for plan in plans for n, effect in plan.side_effects
                      if n != plan.target)
    again = _unique((n, effect) for plan in plans for n, effect in plan.side_effects
                    if n == plan.target and rerun.runs > 1)
    if not earlier and not again:
        return None
    cells = sorted({n for n, _ in earlier})
    lines: list[str] = []
    subject = _(rerun.subject) if rerun.subject else _cells(sorted({n for n, _e in again}))
    if earlier:
        replayed_for = {n: why for plan in plans for n, why in plan.replayed_for.items()}
        lines.append(_("not run: replaying would repeat what earlier cells did to this "
                       "machine:"))
        lines += [f"  In[{n}] {effect_text(effect)}" for n, effect in earlier]
        lines += [_("In[{n}] is replayed for {why}.").format(n=n, why=replayed_for[n])
                  for n in cells if n in replayed_for]
    if again:
        again_line = _("{subject} would run {how}, each time doing again what it does to "
                       "this machine:").format(subject=subject, how=_(rerun.how))
        lines.append(again_line if earlier else _("not run: {line}").format(line=again_line))
        lines += [f"  In[{n}] {effect_text(effect)}" for n, effect in again]
    ship_instead = sorted({name for plan in plans for name in plan.ship_instead})
    return "\n".join([*lines, _advice(_cells(cells) if earlier else "",
                                       subject if again else "",
                                       _(rerun.how), ",".join(ship_instead)
                                       if earlier and "--ship" in rerun.options else "",
                                       bool(earlier) and "--cells" in rerun.options)])


def _advice(replay: str, subject: str, how: str, ship: str, cells: bool) -> str:
    """The last line of a refusal: what to add to run anyway (`replay`: the earlier cells
    it would replay, `subject`/`how`: what it would run more than once), and what else to
    do (`ship`: the values to send instead, `cells`: --cells is offered)."""
    if replay and subject:
        advice = _("Add --allow-side-effects to replay {cells} and run {subject} {how} "
                   "anyway").format(cells=replay, subject=subject, how=how)
    elif replay:
        advice = _("Add --allow-side-effects to replay {cells} anyway").format(cells=replay)
    else:
        advice = _("Add --allow-side-effects to run {subject} {how} anyway").format(
            subject=subject, how=how)
    if ship:
        advice += _(", or --ship {names} to send the values instead of replaying the cells "
                    "that made them").format(names=ship)
    if cells:
        advice += _(", or --cells N,M,... to choose the cells to replay")
    return advice + _(".")


def effect_text(effect: SideEffect) -> str:
    """Return `effect` as the plan shows it, in the current language: what the call does,
    then the call as written."""
    return _("{reason}: {call}").format(reason=localize(effect.reason), call=effect.call)


def _unique(effects: Iterable[tuple[int, SideEffect]]) -> list[tuple[int, SideEffect]]:
    """The effects in order, each once (two plans of one command replay the same cells)."""
    return list(dict.fromkeys(effects))


def make_plan(
    history: Mapping[int, str],
    target: int,
    namespace: Mapping[str, Any] | None = None,
    ship: str | list[str] = "auto",
    cells: list[int] | None = None,
    allow_side_effects: bool = False,
    restore: Collection[str] = (),
    failed: Collection[int] = (),
    rerun: Rerun = ISOLATED_RUN,
) -> Plan:
    """Plan the re-run of cell `target` from `history` ({execution count: raw source}).

    `namespace` is the kernel's user namespace (values to ship are read from it, never
    changed); `ship` is "auto", "none" or a list of names; `cells` overrides the analysis;
    `allow_side_effects` lets the plan repeat side effects (otherwise its `refusal` says why
    it must not run); `rerun` says how the command runs the plan (how many times the target).
    `restore` names what a checkpoint restores just before the target: a cell that changes a
    restored object in place (a training loop on `model`) and binds nothing needed is not
    replayed, whatever else it changes in place; a restored name no object of the kernel
    holds (a step count) needs no cell at all. `failed` are the cells that failed in the
    session: none but the target is replayed (a later cell that re-ran the code stands for
    it).
    Raises PlanError when the target is unknown, does not parse, or reads a name that neither
    a replayed cell nor a shipped value provides, and when a name of `ship` does not exist,
    cannot be shipped, or is not needed.
    """
    if target not in history:
        raise PlanError(_("In[{target}] is not in this kernel's history (known: "
                          "In[1]..In[{last}])").format(target=target,
                                                       last=max(history, default=0)))
    facts = analyse_history(history)
    if facts[target].syntax_error:
        raise PlanError(_("In[{target}] does not parse: {error}").format(
            target=target, error=facts[target].syntax_error))
    namespace = namespace or {}
    explicit = ship if isinstance(ship, list) else []
    absent = [name for name in explicit if name not in namespace]
    if absent:
        raise PlanError(_("cannot ship {names}: no such variable in this kernel").format(
            names=", ".join(absent)))
    if cells is not None:
        plan = _explicit_plan(facts, target, cells, explicit, namespace, allow_side_effects)
        plan.restored = list(restore)
        plan.rerun = rerun
        return plan
    plan = _Planner(facts, target, namespace, ship, restore, failed).plan(allow_side_effects)
    plan.rerun = rerun
    if restore:
        plan.restored = list(restore)
        try:
            without = _Planner(facts, target, namespace, ship,
                               failed=failed).plan(allow_side_effects)
        except PlanError:  # only the checkpoint provides what the target reads
            without = plan
        plan.replaced = sorted(set(without.replay) - set(plan.replay))
    return plan


def newest_version(cells: Mapping[int, str], old: str) -> int | None:
    """Return the number of the newest of `cells` most like the source `old` (its new
    version: alike at least SIMILAR_ENOUGH, magics and shell escapes left out), or None when
    none is alike."""
    scored = [(difflib.SequenceMatcher(None, old, source).ratio(), number)
              for number, source in cells.items()
              if not source.lstrip().startswith(("%", "!"))]
    alike = [(ratio, number) for ratio, number in scored if ratio >= SIMILAR_ENOUGH]
    if not alike:
        return None
    best = max(ratio for ratio, _ in alike)
    return max(number for ratio, number in alike if ratio >= best - 0.05)


class _Planner:
    """Walks the history backwards from the target, collecting what the target needs."""

    def __init__(self, facts: dict[int, CellFacts], target: int,
                 namespace: Mapping[str, Any], ship: str | list[str],
                 restore: Collection[str] = (), failed: Collection[int] = ()) -> None:
        self.facts = facts
        self.failed = set(failed) - {target}
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
        self.not_replayed: list[int] = []

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
            process_state=[(n, ", ".join(localize(s) for s in self.facts[n].process_state))
                           for n in replay
                           if n != self.target and not self.provides.get(n)
                           and not self.facts[n].star_import],
            ship_instead=ship_instead,
            replayed_for=replayed_for,
            allow_side_effects=allow_side_effects,
            not_replayed=[(n, self._new_version(n)) for n in sorted(self.not_replayed)],
        )

    def _walk(self) -> None:
        self.needed = set(self.facts[self.target].uses) - (self.restore
                                                            - self.restored_in_place)
        self.replay = [self.target]
        self.shipped = []
        self.refused = dict(self.never_ship)
        self.provides = {}
        self.not_replayed = []
        order = sorted(n for n in self.facts if n <= self.target)
        for number in reversed(order[:-1]):
            self._ship_needed(number + 1)
            cell = self.facts[number]
            provided = set() if self._replaced(number) else (
                (self.writes[number] & self.needed) - (self.restored_in_place - cell.rebinds))
            if cell.star_import or provided or self._keeps_process_state(cell):
                if number in self.failed:  # replayed, it would fail again, or differently
                    self.not_replayed.append(number)
                    continue
                self.replay.append(number)
                bound = cell.rebinds | star_names(cell) if cell.star_import else cell.rebinds
                self.provides[number] = provided | (bound & self.needed)
                self.needed = (self.needed - bound) | cell.uses
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
                    raise PlanError(_("cannot ship {name}: an earlier replayed cell needs "
                                      "the value it had before: it {reason}").format(
                        name=name, reason=reason))
                else:
                    raise _Unship(name, reason)
            elif reason is None:
                self.shipped.append(name)
                self.needed.discard(name)
            elif name in explicit:
                raise PlanError(_cannot_ship(name, reason))
            else:
                self.refused[name] = reason

    def _check_not_made_again(self) -> None:
        """A shipped value that a replayed cell makes again would be overwritten (the child
        loads shipped values before it replays)."""
        explicit = self.ship if isinstance(self.ship, list) else []
        for name in self.shipped:
            again = [n for n in self.replay if n != self.target and name in self.writes[n]]
            if again:
                reason = _("made again by In[{n}], which is replayed anyway").format(
                    n=min(again))
                if name in explicit:
                    raise PlanError(_("cannot ship {name}: it is {reason}").format(
                        name=name, reason=reason))
                raise _Unship(name, reason)

    def _check_complete(self) -> None:
        explicit = self.ship if isinstance(self.ship, list) else []
        unused = [name for name in explicit if name not in self.shipped]
        if unused:
            raise PlanError(_("cannot ship {names}: neither In[{target}] nor the cells it "
                              "needs read it").format(names=", ".join(unused),
                                                      target=self.target))
        missing = sorted(self.needed)  # uses never hold builtins (analyse_cell drops them)
        made_by = {name: [n for n in self.not_replayed if name in self.writes[n]]
                   for name in missing}
        undefined = [name for name in missing if not made_by[name]]
        of_failed = [name for name in missing if made_by[name]]
        problems = []
        if undefined:
            problems.append(_(
                "In[{target}] reads {names}, which no earlier cell defines and which cannot "
                "be shipped ({why})").format(target=self.target, names=", ".join(undefined),
                                             why="; ".join(
                    f"{n}: {self.refused.get(n) or _('not defined')}" for n in undefined)))
        if of_failed:
            cells = _cells(sorted({n for name in of_failed for n in made_by[name]}))
            unshipped = "; ".join(f"{n}: {self.refused[n]}" for n in of_failed
                                  if n in self.refused)
            fields = {"target": self.target, "names": ", ".join(of_failed), "cells": cells,
                      "unshipped": unshipped}
            problems.append((_(
                "In[{target}] reads {names}, made only by {cells}, which failed in this "
                "session, and a replay never re-runs a cell that failed (not shipped: "
                "{unshipped}): run the code that makes it again in a cell that ends without "
                "error") if unshipped else _(
                "In[{target}] reads {names}, made only by {cells}, which failed in this "
                "session, and a replay never re-runs a cell that failed: run the code that "
                "makes it again in a cell that ends without error")).format(**fields))
        if problems:
            raise PlanError(_(". ").join(problems))

    def _new_version(self, failed: int) -> int | None:
        """The cell after `failed`, up to the target, that re-ran its code (None if none)."""
        later = {n: cell.source for n, cell in self.facts.items()
                 if failed < n <= self.target}
        return newest_version(later, self.facts[failed].source)

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
            reasons = [_("{names} (not shipped: {why})").format(names=", ".join(names), why=why)
                       for why, names in names_by_reason.items()]
            if self.facts[n].process_state and not self.provides.get(n):
                reasons.append(_("process-wide state ({what})").format(
                    what=", ".join(localize(s) for s in self.facts[n].process_state)))
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


def recorded_plan(cells: Mapping[int, str], target: int, shipped: list[str], *,
                  allow_side_effects: bool = False, rerun: Rerun = ISOLATED_RUN) -> Plan:
    """Return the plan of a run recorded earlier (every cell of `cells` replayed, the target
    last; the values named `shipped` sent): what running it again replays and repeats.
    Raises PlanError when the target is not among the cells."""
    if target not in cells:
        raise PlanError(_("In[{target}] is not among the recorded cells").format(
            target=target))
    plan = _fixed_plan(analyse_history(cells), target, sorted(cells), shipped,
                       allow_side_effects)
    plan.rerun = rerun
    return plan


def _explicit_plan(facts: dict[int, CellFacts], target: int, cells: list[int],
                   ship: list[str], namespace: Mapping[str, Any],
                   allow_side_effects: bool) -> Plan:
    unknown = [n for n in cells if n not in facts]
    if unknown:
        raise PlanError(_("--cells names cells not in the history: {cells}").format(
            cells=unknown))
    for name in ship:
        reason = _why_not_shippable(name, namespace, {})
        if reason is not None:
            raise PlanError(_cannot_ship(name, reason))
    return _fixed_plan(facts, target, sorted(set(cells) | {target}), ship, allow_side_effects)


def _fixed_plan(facts: dict[int, CellFacts], target: int, replay: list[int],
                ship: list[str], allow_side_effects: bool) -> Plan:
    """The plan that replays `replay` as chosen (no analysis of what the target needs)."""
    return Plan(target=target, replay=replay, ship=list(ship),
                skipped=[(n, s) for n in replay for s in facts[n].skipped],
                sources={n: facts[n].source for n in replay},
                side_effects=[(n, e) for n in replay for e in facts[n].effects],
                allow_side_effects=allow_side_effects)


def _cannot_ship(name: str, reason: str) -> str:
    return _("cannot ship {name}: {reason}").format(name=name, reason=reason)


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
        return _("not in the namespace")
    if name in changed:
        return _("may have been changed since, by In[{n}] (directly or through an "
                 "alias)").format(n=changed[name])
    value = namespace[name]
    if type(value).__name__ == "module":
        return _("a module (imports are replayed)")
    device = _non_cpu_device(value)
    if device is not None:
        return _("lives on {device} (rebuilt by replay, never read from the kernel)").format(
            device=device)
    nbytes = _tensor_bytes(value)
    if nbytes > SHIP_MAX_BYTES:
        return _("too large to ship ({size} MiB)").format(size=nbytes >> 20)
    if nbytes:
        return None  # CPU tensors pickle
    try:
        import cloudpickle

        cloudpickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RuntimeError) as exc:
        return _("not picklable ({error})").format(error=f"{type(exc).__name__}: {exc}")
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
            return _("an unknown device")
    if depth < 3 and isinstance(value, (list, tuple, set, dict)):
        items = value.values() if isinstance(value, dict) else value
        for item in items:
            found = _non_cpu_device(item, depth + 1)
            if found:
                return found
    return None
