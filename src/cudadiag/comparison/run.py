"""Compare one change at a time (method point 9): the compared cell once as it is (the
reference) and once per variant, each alone in a fresh isolated process with the same plan,
RNG states and batch, then the outcome of each and the differences of the tensors the cell
assigned.

Differences are measured from the reference, or from the `cpu` row when the reference failed.
A variant that means nothing on this build is a row marked "not applicable", never dropped.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.comparison.variants import INFO_FILE, OUTPUTS_FILE, VARIANTS, program_cells
from cudadiag.errors import CudadiagError
from cudadiag.i18n import N_, _, msg, ngettext
from cudadiag.incident import Incident
from cudadiag.isolate.cellfacts import analyse_cell
from cudadiag.isolate.plan import Rerun

REFERENCE = "reference"
OK, FAILED, NOT_APPLICABLE, TIMED_OUT = (N_("ok"), N_("failed"), N_("not applicable"),
                                         N_("timed out"))
"""A row's outcome (shown with `_`)."""
TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}
"""(rtol, atol) per floating dtype: torch.testing.assert_close's defaults. Integers and
booleans must be equal."""
CPU_WARNING = N_("CPU success is a clue, not a CUDA validation (method point 9): the CPU "
               "kernels check and schedule differently; validate a fix on the device.")
TIMING_NOTE = N_("Wall times are the compared cell alone, in a diagnostic run (blocking "
               "launches, op tracer): compare rows with each other, not with training runs.")


class CompareError(CudadiagError, ValueError):
    """A comparison that cannot run as asked (an unknown variant, nothing to compare)."""


@dataclass
class Program:
    """What every row runs: the compared cell (`code`, numbered `target`), the planned cells
    before it, their RNG states, the recorded batch, the shipped values, extra environment,
    and child options (validation adds its own)."""

    code: str
    target: int
    cells: list[tuple[int, str]] = field(default_factory=list)
    rng_states: dict[int, dict[str, Any]] | None = None
    batch: tuple[int, Any] | None = None
    ship: dict[str, Any] | Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class OutputDiff:
    """One assigned tensor of a row against the baseline row."""

    name: str
    shape: list[int]
    dtype: str
    max_abs: float | None = None
    max_rel: float | None = None
    allclose: bool | None = None
    note: str = ""


@dataclass
class Row:
    """One run: the reference or a variant."""

    variant: str
    change: str
    outcome: str
    reason: str = ""
    """Why not applicable, or the failure in one line."""
    family: str | None = None
    op: str | None = None
    wall_s: float | None = None
    changes: dict[str, int] = field(default_factory=dict)
    """What the variant actually changed, counted (empty for the reference)."""
    device: str | None = None
    diffs: list[OutputDiff] = field(default_factory=list)
    incident: Incident | None = field(default=None, repr=False)
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    info: dict[str, Any] = field(default_factory=dict, repr=False)
    """Everything the child's bookkeeping wrote (validation reads its counts here)."""

    @property
    def ok(self) -> bool:
        """True when the run ended without error."""
        return self.outcome == OK

    @property
    def failure(self) -> str:
        """The error of a failed run in a few words: `FAMILY at OP` (`FAMILY` when the
        operator is not known)."""
        if self.op:
            return _("{family} at {op}").format(family=self.family, op=self.op)
        return f"{self.family}"

    def to_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data (outputs by name, shape and dtype only)."""
        return {
            "variant": self.variant, "change": self.change, "outcome": self.outcome,
            "reason": self.reason, "family": self.family, "op": self.op,
            "wall_s": self.wall_s, "changes": self.changes, "device": self.device,
            "diffs": [vars(d) for d in self.diffs],
        }


@dataclass
class Comparison:
    """The table of one %cuda_compare: rows in order (the reference first), the row the
    differences are measured from (None when both the reference and `cpu` failed), the
    names of the values the cell assigns, and the warnings that apply."""

    cell: int
    rows: list[Row]
    baseline: str | None
    outputs: list[str]
    warnings: list[str] = field(default_factory=list)

    def row(self, variant: str) -> Row:
        """Return the row of `variant`; raises KeyError when the comparison has none."""
        for row in self.rows:
            if row.variant == variant:
                return row
        raise KeyError(f"no row {variant!r}; rows: {[r.variant for r in self.rows]}")

    def to_dict(self) -> dict[str, Any]:
        """Return the comparison as JSON-ready data."""
        return {"cell": self.cell, "baseline": self.baseline, "outputs": self.outputs,
                "warnings": self.warnings, "rows": [r.to_dict() for r in self.rows]}


def parse_variants(text: str | Sequence[str] | None) -> list[str]:
    """Return the variant names asked for (`"cpu,fp32"` or a list; None: all of them, in the
    table's order). Raises CompareError for an unknown name."""
    if text is None:
        return list(VARIANTS)
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise CompareError(_("unknown variant {names}; choose among {variants}").format(
            names=", ".join(unknown) or _("(none given)"), variants=", ".join(VARIANTS)))
    return list(dict.fromkeys(names))


def comparison_rerun(names: Sequence[str]) -> Rerun:
    """Return how a comparison of the variants `names` runs the cell: the reference, then
    each variant that applies to this build (one that does not is never run)."""
    import torch

    applying = sum(VARIANTS[name].missing(torch) is None for name in names)
    return Rerun(1 + applying, ngettext("once per row (the reference and {count} variant)",
                                        "once per row (the reference and {count} variants)",
                                        applying).format(count=applying),
                 frozenset({"--ship"}))


def assigned_names(code: str, target: int) -> list[str]:
    """Return the names the compared cell assigns, sorted (its outputs)."""
    return sorted(analyse_cell(target, code).rebinds)


def compare_program(program: Program, variants: Sequence[str] | None = None, *,
                    timeout: float | None = None,
                    progress: Callable[[Row], None] | None = None) -> Comparison:
    """Run the reference and each variant of `variants` (default: all) alone; return the
    Comparison. `progress` gets each row as it ends.

    Raises CompareError for an unknown variant, KeyboardInterrupt when interrupted (the
    running child's process group is killed first), ValueError for a bad timeout and
    OSError when no process can be started.
    """
    import torch

    names = parse_variants(variants)
    outputs = assigned_names(program.code, program.target)
    rows = [run_row(program, None, outputs, timeout)]
    _report(progress, rows[0])
    for name in names:
        reason = VARIANTS[name].missing(torch) or _cpu_missing(name, rows[0])
        if reason:
            row = Row(name, VARIANTS[name].change, NOT_APPLICABLE, reason=reason)
        else:
            row = run_row(program, name, outputs, timeout)
        rows.append(row)
        _report(progress, row)
    baseline = _baseline(rows)
    if baseline is not None:
        reference = next(r for r in rows if r.variant == baseline)
        for row in rows:
            if row.ok and row is not reference:
                row.diffs = [output_diff(n, reference.outputs.get(n), row.outputs.get(n))
                             for n in outputs if n in reference.outputs or n in row.outputs]
                row.diffs += _not_compared(reference, row)
    return Comparison(program.target, rows, baseline, outputs, _warnings(rows, baseline))


def _not_compared(reference: Row, row: Row) -> list[OutputDiff]:
    """The assigned values either run could not copy (too large, a poisoned device)."""
    unsaved = {**reference.info.get("unsaved", {}), **row.info.get("unsaved", {})}
    return [OutputDiff(name, [], "", note=_("not compared: {why}").format(why=_(why)))
            for name, why in sorted(unsaved.items())]


def _report(progress: Callable[[Row], None] | None, row: Row) -> None:
    if progress is not None:
        progress(row)


def _cpu_missing(name: str, reference: Row) -> str | None:
    if name == "cpu" and reference.device == "cpu":
        return N_("the cell used no CUDA device: it ran on the CPU already")
    return None


def run_row(program: Program, variant: str | None, outputs: list[str],
            timeout: float | None, on_folder: Callable[[Path], None] | None = None,
            before_cleanup: Callable[[], None] | None = None) -> Row:
    """Run `program` once in a fresh isolated process with `variant` applied (None: the
    reference); return its Row, outputs loaded. `on_folder` gets the folder the child
    writes its bookkeeping to, before it starts; `before_cleanup` is called once the child
    has ended, before that folder goes. Raises KeyboardInterrupt when interrupted."""
    import torch

    from cudadiag.isolate.runner import run_isolated
    from cudadiag.isolate.warm import WarmLauncher
    from cudadiag.own_work import outside_user_modes

    spec = VARIANTS[variant] if variant else None
    with tempfile.TemporaryDirectory(prefix="cudadiag-compare-") as folder:
        options = {**program.options, "variant": variant, "dir": folder, "outputs": outputs}
        if on_folder is not None:
            on_folder(Path(folder))
        setup, start, finish = program_cells(options)
        cells = [setup, *[c for c in program.cells if c[0] != program.target], start,
                 (program.target, program.code)]
        # cudadiag's finish cell runs last, after the compared cell, whatever its outcome
        result = run_isolated(
            finish[1], cells=cells, target_cell=finish[0], rng_states=program.rng_states,
            batch=program.batch, ship=program.ship, timeout=timeout,
            env={**program.env, **(spec.env if spec else {})}, stream=False, store=False,
            launcher=WarmLauncher())
        if before_cleanup is not None:
            before_cleanup()
        if result.interrupted:
            raise KeyboardInterrupt
        info_path, outputs_path = Path(folder, INFO_FILE), Path(folder, OUTPUTS_FILE)
        info = _read_json(info_path)
        with outside_user_modes():
            values = (torch.load(outputs_path, weights_only=False)
                      if outputs_path.exists() else {})
    row = Row(variant or REFERENCE, spec.change if spec else N_("the cell as it is"), OK,
              wall_s=info.get("wall_s"), changes=info.get("changes", {}),
              device=info.get("device"), info=info)
    if result.timed_out:
        row.outcome, row.reason = TIMED_OUT, result.message.removeprefix("cudadiag: ")
    elif result.incident is not None:
        incident = result.incident
        row.outcome, row.incident = FAILED, incident
        row.family = incident.diagnosis.family
        row.op = (incident.op.name if incident.op is not None
                  else incident.diagnosis.details.get("op"))
        known = row.family != "unknown" and incident.diagnosis.summary
        row.reason = known or f"{incident.error.type}: {incident.error.message}"
    else:
        row.outputs = values
    return row


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _baseline(rows: list[Row]) -> str | None:
    if rows[0].ok:
        return REFERENCE
    cpu = next((r for r in rows if r.variant == "cpu"), None)
    return "cpu" if cpu is not None and cpu.ok else None


def output_diff(name: str, reference: Any, value: Any) -> OutputDiff:
    """Return how `value` differs from `reference` (CPU tensors; either may be None when a
    run did not assign it): largest absolute and relative difference and allclose at the
    looser dtype's tolerance."""
    import torch

    shown = value if value is not None else reference
    diff = OutputDiff(name, list(shown.shape), str(shown.dtype).removeprefix("torch."))
    if reference is None or value is None:
        diff.note = _("not assigned by the baseline") if reference is None else _("not assigned")
        return diff
    if reference.shape != value.shape:
        diff.note = _("shape {shape}, baseline {baseline}").format(
            shape=list(value.shape), baseline=list(reference.shape))
        return diff
    if reference.is_complex() or value.is_complex():
        reference, value = torch.view_as_real(reference), torch.view_as_real(value)
    exact = not (reference.is_floating_point() or value.is_floating_point())
    a, b = reference.double(), value.double()
    if exact:
        diff.allclose = bool(torch.equal(a, b))
    else:
        rtol, atol = _tolerance(reference.dtype, value.dtype)
        diff.allclose = bool(torch.allclose(b, a, rtol=rtol, atol=atol))
    if a.numel():
        gap = (a - b).abs()
        diff.max_abs = _number(gap.max())
        diff.max_rel = _number((gap / a.abs().clamp_min(torch.finfo(torch.float64).tiny)).max())
    nonfinite = int((~torch.isfinite(b)).sum())
    if nonfinite:
        diff.note = f"{nonfinite} NaN/Inf"
    return diff


def _tolerance(*dtypes: Any) -> tuple[float, float]:
    known = [TOLERANCES[str(d).removeprefix("torch.")] for d in dtypes
             if str(d).removeprefix("torch.") in TOLERANCES]
    if not known:
        return TOLERANCES["float32"]
    return max(t[0] for t in known), max(t[1] for t in known)


def _number(value: Any) -> float | None:
    number = float(value)
    return number if not math.isnan(number) else None


def _warnings(rows: list[Row], baseline: str | None) -> list[str]:
    warnings: list[str] = []
    cpu = next((r for r in rows if r.variant == "cpu"), None)
    if cpu is not None and cpu.ok:
        warnings.append(msg(CPU_WARNING))
    if baseline == "cpu":
        warnings.append(msg("The reference failed: differences are measured from the cpu row."))
    elif baseline is None:
        warnings.append(msg("The reference and the cpu row failed (or cpu was not run): there "
                            "is no baseline to measure differences from."))
    passed = [r.variant for r in rows[1:] if r.ok]
    if not rows[0].ok and passed:
        warnings.append(msg("Passed with one change each: {variants}. Each row changes one "
                            "thing; a row that passes points at what matters, it is not a fix "
                            "yet.", variants=", ".join(passed)))
    idle = [r.variant for r in rows[1:] if r.outcome != NOT_APPLICABLE
            and not VARIANTS[r.variant].sets_flag and not r.changes]
    if idle:
        warnings.append(msg("Changed nothing in this cell: {variants} (the same program as "
                            "the reference: the table shows no row of its own for one that "
                            "ended as the reference did).", variants=", ".join(idle)))
    warnings.append(msg(TIMING_NOTE))
    return warnings
