"""Pictures where people look rather than read: the offending tensor's values against the
operator's valid range, as inline SVG (it shows in the widget panel, in the HTML fallback, in
nbconvert output and in JupyterLab's dark theme: text and axes use `currentColor`).

With the tensor's value counts (integer tensors with few distinct values), a histogram over
the valid range with the out-of-range bars in red; without them, the tensor's [min, max]
against the valid range on a number line. The offending value and its position are named in
the picture's text, which is also given as one line for text views. Under a failing cell,
where an asynchronous assertion names no operator and so no range yet, the batch's integer
tensor's value counts are drawn alone, saying where the range will come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from cudadiag.advice import index_tensor, index_tensors
from cudadiag.i18n import N_, _
from cudadiag.incident import Incident

WIDTH, HEIGHT = 600, 210
LEFT, RIGHT, TOP, BOTTOM = 40, 20, 58, 170
"""The plot area inside the picture."""
IN_RANGE, OUT_OF_RANGE = "#4c78a8", "#d62728"
ERROR_COLOUR = f"var(--jp-error-color1, {OUT_OF_RANGE})"
"""JupyterLab's error colour where the theme defines it (brighter in the dark theme): the
caption stays readable on both backgrounds; `fill` stays the fallback elsewhere."""
TICKS_ALL_UP_TO = 24
"""Up to this many slots every value gets a tick label; beyond, only the notable ones."""


@dataclass
class Picture:
    """An inline SVG and the same facts in one line of text."""

    svg: str
    text: str


PICTURED_BEFORE_THE_RANGE_IS_KNOWN = ("device_assert",)
"""Families whose batch values are drawn even before the operator's valid range is known
(under the failing cell, an asynchronous assertion names no operator yet): its integer
tensor's value counts, for the user to compare with the classes or vocabulary they meant."""
RANGE_UNKNOWN = N_("valid range not known here: %cuda_isolate re-runs the cell and names it")
"""The caption of a picture drawn before the valid range is known (shown with `_`)."""


def values_picture(incident: Incident) -> Picture | None:
    """Return the picture of the incident's offending tensor against the valid range; where
    no valid range is known yet, of the batch's integer tensor's values (families in
    PICTURED_BEFORE_THE_RANGE_IS_KNOWN, a tensor whose value counts were kept); None when
    there is nothing to draw."""
    details = incident.diagnosis.details
    valid = details.get("valid_range")
    if not valid or len(valid) != 2:
        return _values_alone(incident)
    low, high = int(valid[0]), int(valid[1])
    tensor = index_tensor(incident)
    if tensor is None or tensor.min is None or tensor.max is None:
        return None
    caption = _caption(details)
    title = _("{path}: values against the valid range [{low}, {high})").format(
        path=tensor.path, low=low, high=high)
    if tensor.counts:
        counts = [(int(v), int(c)) for v, c in tensor.counts]
        outside = [f"{v} ×{c}" for v, c in counts if not low <= v < high]
        text = _("{title}; outside: {values}").format(
            title=title, values=", ".join(outside) or _("none")) + (
            f"; {caption}" if caption else "")
        return Picture(_histogram(title, caption, counts, (low, high)), text)
    span = (int(tensor.min), int(tensor.max))
    text = _("{title}; values span {low}..{high}").format(title=title, low=span[0],
                                                          high=span[1]) + (
        f"; {caption}" if caption else "")
    return Picture(_number_line(title, caption, span, low, high, details.get("value")), text)


def _values_alone(incident: Incident) -> Picture | None:
    """The value counts, without a range, of the batch tensor the operator may have read
    (advice.index_tensors(): by its key, where the value is not known either), the first
    that has them."""
    if incident.diagnosis.family not in PICTURED_BEFORE_THE_RANGE_IS_KNOWN:
        return None
    tensor = next((t for t in index_tensors(incident) if t.counts), None)
    if tensor is None or tensor.counts is None:
        return None
    counts = [(int(v), int(c)) for v, c in tensor.counts]
    title = _("{path}: values in the batch").format(path=tensor.path)
    shown = ", ".join(f"{v} ×{c}" for v, c in counts)
    unknown = _(RANGE_UNKNOWN)
    return Picture(_histogram(title, unknown, counts, None, caption_fill="currentColor"),
                   _("{title}: {values}; {note}").format(title=title, values=shown,
                                                           note=unknown))


def _caption(details: dict[str, Any]) -> str:
    value, position = details.get("value"), details.get("position")
    if value is None:
        return ""
    at = (tuple(position) if len(position) > 1 else position[0]) if position else None
    op, argument = details.get("op"), details.get("argument", "?")
    if at is not None and op:
        return _("{value} at position {position} is outside the valid range ({op}, argument "
                 "{argument})").format(value=value, position=at, op=op, argument=argument)
    if at is not None:
        return _("{value} at position {position} is outside the valid range").format(
            value=value, position=at)
    if op:
        return _("{value} is outside the valid range ({op}, argument {argument})").format(
            value=value, op=op, argument=argument)
    return _("{value} is outside the valid range").format(value=value)


def _frame(title: str, caption: str, body: list[str], label: str,
           caption_fill: str = OUT_OF_RANGE) -> str:
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="cd-values-picture" role="img" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'aria-label="{escape(label)}" font-family="sans-serif" font-size="12" '
        f'style="color: inherit; max-width: 100%">',
        f"<title>{escape(label)}</title>",
        _text(LEFT, 18, title, weight="bold"),
    ]
    if caption:
        head.append(_text(LEFT, 36, caption, fill=caption_fill,
                          themed=ERROR_COLOUR if caption_fill == OUT_OF_RANGE else None))
    axis = (f'<line x1="{LEFT}" y1="{BOTTOM}" x2="{WIDTH - RIGHT}" y2="{BOTTOM}" '
            'stroke="currentColor" stroke-width="1"/>')
    return "\n".join([*head, *body, axis, "</svg>"])


def _text(x: float, y: float, text: str, *, anchor: str = "start", weight: str = "normal",
          fill: str = "currentColor", themed: str | None = None) -> str:
    style = f' style="fill: {themed}"' if themed else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}"{style}>{escape(text)}</text>')


class _Scale:
    """Maps values of [first, last] to slots across the plot's width."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.slots = first, last - first + 1
        self.slot = (WIDTH - LEFT - RIGHT) / self.slots

    def x(self, value: float) -> float:
        return LEFT + (value - self.first + 0.5) * self.slot


def _band(scale: _Scale, low: int, high: int) -> list[str]:
    left, right = scale.x(low - 0.5), scale.x(high - 0.5)
    return [f'<rect class="cd-valid-range" x="{left:.1f}" y="{TOP}" width="{right - left:.1f}" '
            f'height="{BOTTOM - TOP}" fill="currentColor" fill-opacity="0.08"/>',
            _text(right, TOP - 4, _("valid [{low}, {high})").format(low=low, high=high),
                  anchor="end")]


def _histogram(title: str, caption: str, counts: list[tuple[int, int]],
               valid: tuple[int, int] | None, caption_fill: str = OUT_OF_RANGE) -> str:
    """The value counts as bars; those outside `valid` in red, over its band (no band when
    the range is not known)."""
    values = [v for v, _ in counts]
    low, high = valid if valid is not None else (min(values), max(values) + 1)
    scale = _Scale(min(low, *values), max(high - 1, *values))
    tallest = max(c for _, c in counts)
    width = max(2.0, scale.slot * 0.7)
    body = _band(scale, low, high) if valid is not None else []
    for value, count in counts:
        bad = not low <= value < high
        height = (BOTTOM - TOP - 24) * count / tallest
        x = scale.x(value)
        body.append(f'<rect class="{"cd-bar-out" if bad else "cd-bar"}" x="{x - width / 2:.1f}" '
                    f'y="{BOTTOM - height:.1f}" width="{width:.1f}" height="{height:.1f}" '
                    f'fill="{OUT_OF_RANGE if bad else IN_RANGE}"><title>'
                    + escape(_("value {value}: {count}").format(value=value, count=count))
                    + "</title></rect>")
        if scale.slots <= TICKS_ALL_UP_TO or bad:
            body.append(_text(x, BOTTOM - height - 4, str(count), anchor="middle",
                              fill=OUT_OF_RANGE if bad else "currentColor"))
    ticks = set(range(scale.first, scale.first + scale.slots)) \
        if scale.slots <= TICKS_ALL_UP_TO else {scale.first, low, high - 1, *values}
    for value in sorted(ticks):
        bad = not low <= value < high
        body.append(_text(scale.x(value), BOTTOM + 16, str(value), anchor="middle",
                          fill=OUT_OF_RANGE if bad else "currentColor"))
    body.append(_text(WIDTH - RIGHT, BOTTOM + 34, _("value (bar height: count)"),
                      anchor="end"))
    return _frame(title, caption, body, f"{title}. {caption}", caption_fill)


def _number_line(title: str, caption: str, span: tuple[int, int], low: int, high: int,
                 value: Any) -> str:
    scale = _Scale(min(low, span[0]), max(high - 1, span[1]))
    body = _band(scale, low, high)
    y = (TOP + BOTTOM) / 2 + 10
    inside = (max(span[0], low), min(span[1], high - 1))
    if inside[0] <= inside[1]:
        body.append(_segment(scale, inside, y, IN_RANGE))
    for part in ((span[0], min(span[1], low - 1)), (max(span[0], high), span[1])):
        if part[0] <= part[1]:
            body.append(_segment(scale, part, y, OUT_OF_RANGE))
    marked = {value} if isinstance(value, int) else set()
    for tick in sorted({scale.first, low, high - 1, *span, *marked}):
        bad = not low <= tick < high
        body.append(_text(scale.x(tick), BOTTOM + 16, str(tick), anchor="middle",
                          fill=OUT_OF_RANGE if bad else "currentColor"))
    if isinstance(value, int):
        body.append(f'<circle cx="{scale.x(value):.1f}" cy="{y:.1f}" r="6" fill="none" '
                    'stroke="currentColor" stroke-width="2"/>')
    body.append(_text(WIDTH - RIGHT, BOTTOM + 34, _("values of the tensor (min..max)"),
                      anchor="end"))
    return _frame(title, caption, body, f"{title}. {caption}")


def _segment(scale: _Scale, part: tuple[int, int], y: float, color: str) -> str:
    left, right = scale.x(part[0] - 0.4), scale.x(part[1] + 0.4)
    return (f'<rect x="{left:.1f}" y="{y - 6:.1f}" width="{max(right - left, 2):.1f}" '
            f'height="12" fill="{color}"/>')
