"""CPU-side contract checks: reject a bad batch before it reaches a CUDA kernel (method
point 7), with a message that names the argument, the rule, the values and their positions,
then what to check (knowledge.GUARD_ADVICE, with its sources).

The checks read values, so on a GPU they synchronise: they are diagnostic. None of them
modifies its input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from cudadiag.errors import GuardError
from cudadiag.i18n import _
from cudadiag.knowledge import GUARD_ADVICE
from cudadiag.shortlist import cut_join, cut_list

MAX_REPORTED = 10
ROW_SUM_TOLERANCE = 1e-3


def check_class_targets(target: torch.Tensor, num_classes: int, *, ignore_index: int = -100,
                        input: torch.Tensor | None = None, name: str = "target") -> None:
    """Check class targets for CrossEntropyLoss / NLLLoss.

    Class indices must be torch.long, shaped (N) or (N, d1, ...), not all `ignore_index`, and
    in [0, num_classes). Floating targets are class probabilities: same shape as `input` (or
    (N, num_classes, ...)), values in [0, 1], summing to 1 over the class dimension.
    Raises GuardError on the first rule broken; returns None when the targets are valid.
    """
    _require_tensor(target, name)
    if target.dtype.is_floating_point:
        _check_probabilities(target, num_classes, input, name)
        return
    if target.dtype != torch.long:
        raise GuardError(
            _("{name}: class-index targets must be torch.long (int64), not {dtype}; convert "
              "with .long() where the labels are made").format(name=name, dtype=target.dtype),
            argument=name, rule="dtype is torch.long", values=[str(target.dtype)])
    if target.dim() == 0:
        message = _("{name}: a 0-dimensional target; expected shape (N) or (N, d1, ...)")
        raise GuardError(message.format(name=name), argument=name,
                         rule="shape (N) or (N, d1, ...)", values=[[]])
    counted = target != ignore_index
    if not bool(counted.any()):
        raise GuardError(
            _("{name}: every target equals ignore_index={ignore_index}; the mean loss over zero "
              "elements is NaN. {advice}").format(name=name, ignore_index=ignore_index,
                                                  advice=_(GUARD_ADVICE["all_ignored"].text)),
            argument=name, rule=f"not empty once ignore_index={ignore_index} is removed")
    bad = counted & ((target < 0) | (target >= num_classes))
    if bool(bad.any()):
        values, positions = _offending(target, bad)
        advice = _(GUARD_ADVICE["class_targets"].text).format(classes=num_classes,
                                                              last=num_classes - 1)
        raise GuardError(
            _("{name}: {count} value(s) outside [0, {classes}) (ignore_index={ignore_index}): "
              "{listing}. {advice}").format(
                name=name, count=int(bad.sum()), classes=num_classes, ignore_index=ignore_index,
                listing=_listing(values, positions, int(bad.sum())), advice=advice),
            argument=name, rule=f"0 <= {name} < {num_classes} or {name} == {ignore_index}",
            values=values, positions=positions)


def check_index_range(index: torch.Tensor, size: int, *, name: str = "index",
                      allow_negative: bool = False) -> None:
    """Check that integer indices lie in [0, size) (or [-size, size) with `allow_negative`),
    for embeddings, gathers and indexing. Raises GuardError naming values and positions."""
    _require_tensor(index, name)
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        message = _("{name}: indices must be an integer tensor, not {dtype}").format(
            name=name, dtype=index.dtype)
        raise GuardError(message, argument=name, rule="integer dtype",
                         values=[str(index.dtype)])
    low = -size if allow_negative else 0
    bad = (index < low) | (index >= size)
    if bool(bad.any()):
        values, positions = _offending(index, bad)
        raise GuardError(
            _("{name}: {count} value(s) outside [{low}, {size}): {listing}. {advice}").format(
                name=name, count=int(bad.sum()), low=low, size=size,
                listing=_listing(values, positions, int(bad.sum())),
                advice=_(GUARD_ADVICE["index_range"].text)),
            argument=name, rule=f"{low} <= {name} < {size}", values=values, positions=positions)


def check_same_device(module_or_tensors: Any, *tensors: Any) -> None:
    """Check that every parameter and buffer of a module, and every tensor given, sit on one
    device. Raises GuardError naming which parameter or input sits where."""
    placed = _placements(module_or_tensors, "model" if isinstance(
        module_or_tensors, torch.nn.Module) else "arg0")
    for i, value in enumerate(tensors, start=1):
        placed += _placements(value, f"arg{i}")
    devices: dict[str, list[str]] = {}
    for name, device in placed:
        devices.setdefault(device, []).append(name)
    if len(devices) > 1:
        parts = "; ".join(f"{d}: {cut_join(names, 5)}" for d, names in devices.items())
        raise GuardError(
            _("tensors on {count} devices: {parts}. {advice}").format(
                count=len(devices), parts=parts, advice=_(GUARD_ADVICE["same_device"].text)),
            argument="devices", rule="one device", values=list(devices),
            positions=[names[0] for names in devices.values()])


def check_label_mapping(mapping: Mapping[Any, int], class_names: Sequence[Any]) -> None:
    """Check that `mapping` (label -> class index) is a bijection between `class_names` and
    range(len(class_names)). Raises GuardError listing duplicates, gaps, out-of-range
    indices, missing and unexpected names."""
    count = len(class_names)
    problems, values = [], []
    missing = [n for n in class_names if n not in mapping]
    extra = [n for n in mapping if n not in set(class_names)]
    duplicates = {i: [k for k, v in mapping.items() if v == i]
                  for i, c in Counter(mapping.values()).items() if c > 1}
    out_of_range = {k: v for k, v in mapping.items() if not 0 <= v < count}
    gaps = sorted(set(range(count)) - set(mapping.values()))
    if missing:
        problems.append(_("class names without an index: {names}").format(
            names=cut_list(missing, MAX_REPORTED)))
    if extra:
        problems.append(_("labels that are not class names: {labels}").format(
            labels=cut_list(extra, MAX_REPORTED)))
    if duplicates:
        problems.append(_("indices shared by several labels: {shared}").format(
            shared=duplicates))
    if out_of_range:
        problems.append(_("indices outside [0, {count}): {indices}").format(
            count=count, indices=out_of_range))
    if gaps:
        problems.append(_("indices no label maps to: {indices}").format(
            indices=cut_list(gaps, MAX_REPORTED)))
    values = [*missing, *extra, *duplicates, *out_of_range, *gaps]
    if problems:
        raise GuardError(
            _("label mapping is not a bijection onto range({count}): {problems}").format(
                count=count, problems="; ".join(problems)),
            argument="mapping", rule=f"bijection onto range({count})",
            values=values[:MAX_REPORTED])


class GuardHandle:
    """The hooks installed by guard(); `.remove()` takes them all off."""

    def __init__(self, handles: list[Any], modules: list[str]) -> None:
        self._handles = handles
        self.modules = modules

    def remove(self) -> None:
        """Remove every hook installed by guard()."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> GuardHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


def guard(module: torch.nn.Module) -> GuardHandle:
    """Install forward pre-hooks on every nn.Embedding, nn.CrossEntropyLoss and nn.NLLLoss in
    `module` that run the checks above before each call. Diagnostic: the checks read values
    (on a GPU they synchronise). Returns a handle whose `.remove()` takes them off."""
    handles, names = [], []
    for name, sub in module.named_modules():
        hook = _hook_for(sub, name or type(sub).__name__)
        if hook is not None:
            handles.append(sub.register_forward_pre_hook(hook))
            names.append(name or type(sub).__name__)
    return GuardHandle(handles, names)


def _hook_for(module: torch.nn.Module, name: str) -> Any:
    if isinstance(module, torch.nn.Embedding):
        def embedding_hook(mod: torch.nn.Embedding, args: tuple[Any, ...]) -> None:
            check_index_range(args[0], mod.num_embeddings, name=f"{name} input")
        return embedding_hook
    if isinstance(module, (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)):
        def loss_hook(mod: Any, args: tuple[Any, ...]) -> None:
            logits, target = args[0], args[1]
            classes = logits.shape[1] if logits.dim() >= 2 else logits.shape[0]
            check_class_targets(target, int(classes), ignore_index=mod.ignore_index,
                                input=logits, name=f"{name} target")
        return loss_hook
    return None


def _check_probabilities(target: torch.Tensor, num_classes: int, input: torch.Tensor | None,
                         name: str) -> None:
    expected = list(input.shape) if input is not None else None
    if expected is not None and list(target.shape) != expected:
        message = _("{name}: probability targets must have the input's shape {expected}, "
                    "not {shape}").format(name=name, expected=expected, shape=list(target.shape))
        raise GuardError(message, argument=name, rule="shape of input",
                         values=[list(target.shape)])
    class_dim = 1 if target.dim() >= 2 else 0
    if target.shape[class_dim] != num_classes:
        message = _("{name}: {columns} probability columns for {classes} classes").format(
            name=name, columns=target.shape[class_dim], classes=num_classes)
        raise GuardError(message, argument=name, rule=f"{num_classes} classes",
                         values=[target.shape[class_dim]])
    bad = (target < 0) | (target > 1) | ~torch.isfinite(target)
    if bool(bad.any()):
        values, positions = _offending(target, bad)
        message = _("{name}: probabilities outside [0, 1]: {listing}").format(
            name=name, listing=_listing(values, positions, int(bad.sum())))
        raise GuardError(message, argument=name, rule="0 <= p <= 1", values=values,
                         positions=positions)
    sums = target.sum(dim=class_dim)
    off = (sums - 1).abs() > ROW_SUM_TOLERANCE
    if bool(off.any()):
        values, positions = _offending(sums, off)
        message = _("{name}: class probabilities do not sum to 1: {listing}").format(
            name=name, listing=_listing(values, positions, int(off.sum())))
        raise GuardError(message, argument=name, rule="rows sum to 1", values=values,
                         positions=positions)


def _require_tensor(value: Any, name: str) -> None:
    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        raise GuardError(_("{name}: expected a torch.Tensor, got {kind}").format(
            name=name, kind=kind), argument=name, rule="a tensor", values=[kind])


def _offending(values: torch.Tensor, bad: torch.Tensor) -> tuple[list[Any], list[Any]]:
    where = bad.nonzero()[:MAX_REPORTED].cpu().tolist()
    host = values.detach()[bad][:MAX_REPORTED].cpu().tolist()
    positions = [p[0] if len(p) == 1 else tuple(p) for p in where]
    return host, positions


def _listing(values: list[Any], positions: list[Any], total: int) -> str:
    """`4 at position 2, …` for the offending values kept, and how many more there are."""
    pairs = [_("{value} at position {position}").format(value=v, position=p)
             for v, p in zip(values, positions, strict=False)]
    return cut_join(pairs, max(len(pairs), 1), omitted=total - len(pairs))


def _placements(value: Any, name: str) -> list[tuple[str, str]]:
    if isinstance(value, torch.nn.Module):
        named = [*value.named_parameters(), *value.named_buffers()]
        return [(f"{name}.{n}", str(t.device)) for n, t in named]
    if isinstance(value, torch.Tensor):
        return [(name, str(value.device))]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _placements(v, f"{name}[{k!r}]")]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [p for i, v in enumerate(value) for p in _placements(v, f"{name}[{i}]")]
    return []
