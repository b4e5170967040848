"""How far a training got, from what its log shows before the error: the last frame of a
progress bar (tqdm's, drawn by the Hugging Face Trainer and Lightning's TQDMProgressBar;
rich's, drawn by Lightning's RichProgressBar) and the Trainer's last logged `{'loss': ...}`
line. The bars' forms are data (PROGRESS_BARS, with their sources); `cudadiag explain` also
uses them to cut a bar's frame off an error printed right after it on the same line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from cudadiag.i18n import _

PROGRESS_SCAN_BYTES = 16 * 2**10
"""Bytes before an error searched for the last bar frame and logged line (a bar redraws on
one line: these hold its latest frames)."""
MAX_FRAME_CHARS = 2000
"""A longer frame is no progress bar (and is not parsed as one)."""


@dataclass(frozen=True)
class BarForm:
    """One progress bar's frame as it is drawn: `pattern` matches it at the start of a frame
    with the groups `stage` (its description), `done`, `total` and `metrics` (its postfix)."""

    name: str
    pattern: re.Pattern[str]
    metric: re.Pattern[str]
    """One `name=value` (or `name: value`) of the postfix."""
    source: str


TQDM_POSTFIX = re.compile(r",\s*(?P<name>[\w./-]+)=(?P<value>[^,\]]+)")
"""One `, name=value` of tqdm's postfix (set_postfix's `{k}={v}`, joined by ', ')."""

PROGRESS_BARS = (
    BarForm(
        name="tqdm",
        pattern=re.compile(
            r"(?:(?P<stage>[^|\r\n]{1,200}?):\s*)?(?:\s*\d{1,3}%)?\|[^|\r\n]{0,400}\|\s*"
            r"(?P<done>\d+)/(?P<total>\d+|\?)\s*\[[^\],\r\n]*(?:,\s*[^\],\r\n]*?it/s|"
            r",\s*[^\],\r\n]*?s/it|,\s*\?it/s)?(?P<metrics>[^\]\r\n]{0,1000})\]"),
        metric=TQDM_POSTFIX,
        source="tqdm's default bar_format: '{l_bar}{bar}{r_bar}', l_bar '{desc}: "
               "{percentage:3.0f}%|', r_bar '| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, "
               "{rate_fmt}{postfix}]' (tqdm/std.py, format_meter); the Trainer's "
               "ProgressCallback and Lightning's TQDMProgressBar ('Epoch 0') draw it"),
    BarForm(
        name="tqdm without a total",
        pattern=re.compile(
            r"(?:(?P<stage>[^|\r\n:]{1,200}):(?:\s*:)?\s*)?(?P<done>\d+)it \[[\d:]+"
            r"(?:,\s*[^\],\r\n]*?(?:it/s|s/it))?(?P<metrics>[^\]\r\n]{0,1000})\]"),
        metric=TQDM_POSTFIX,
        source="tqdm's bar_format when the total is unknown: '{l_bar}{n_fmt}{unit} "
               "[{elapsed}, {rate_fmt}{postfix}]' (tqdm/std.py, format_meter), as Lightning "
               "draws it for an iterable dataset: 'Epoch 3: : 67190it [6:05:52,  3.06it/s, "
               "loss=2.15, v_num=m9eu]' (uzh-rpg/RVT#60)"),
    BarForm(
        name="rich",
        pattern=re.compile(
            r"(?P<stage>(?:Epoch \d+(?:/\d+)?|Validation|Sanity Checking|Testing|"
            r"Predicting|Training))\s+[━╸╺╴╶─ ]+\s(?P<done>\d+)/(?P<total>\d+|\?)\s+"
            r"[\d:]+\s+•\s+[-\d:]+\s*(?:[\d.]+(?:it/s|s/it))?(?P<metrics>.*)"),
        metric=re.compile(r"\s(?P<name>[\w./-]+): (?P<value>\S+)"),
        source="Lightning's RichProgressBar (lightning/pytorch/callbacks/progress/"
               "rich_progress.py): description 'Epoch N/M', BarColumn, "
               "'{completed}/{total}', elapsed • remaining, the rate, then the metrics as "
               "'name: value'"),
)

LOGGED_LINE = re.compile(r"\{'(?:loss|train_loss|eval_loss)': [^{}\r\n]{0,2000}\}")
"""The Trainer's logged metrics, a dict's repr printed above its bar (transformers'
ProgressCallback.on_log: `self.training_bar.write(str(logs))`; strings since 5.x, floats
before)."""


@dataclass
class TrainingProgress:
    """How far the training got before its error, as its log shows it."""

    bar: str = ""
    """The bar's last frame, as printed."""
    stage: str | None = None
    """What the bar counted (`Epoch 0`), when it says."""
    done: int | None = None
    total: int | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    """The bar's postfix (`train_loss=1.080`)."""
    logged: dict[str, str] = field(default_factory=dict)
    """The Trainer's last logged line (`loss`, `epoch`, `learning_rate`...)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (`cudadiag explain --json`)."""
        return {"bar": self.bar, "stage": self.stage, "done": self.done, "total": self.total,
                "metrics": self.metrics, "logged": self.logged}

    def describe(self) -> str:
        """Return one line for the user: `Epoch 0, bar at 4/8, train_loss=1.080; last logged:
        loss 1.101, epoch 0.375`."""
        parts = []
        if self.done is not None:
            steps = _("bar at {position}").format(
                position=f"{self.done}/{self.total}" if self.total else self.done)
            parts.append(", ".join(p for p in (self.stage, steps) if p))
            parts += [f"{k}={v}" for k, v in self.metrics.items()]
        said = ", ".join(parts)
        if self.logged:
            logged = _("last logged: {values}").format(
                values=", ".join(f"{k} {v}" for k, v in self.logged.items()))
            said = _("{bar}; {logged}").format(bar=said, logged=logged) if said else logged
        return said


def bar_length(frame: str) -> int:
    """Return the number of characters of the progress bar that starts `frame` (after its
    rank prefix), or 0 when it starts with none."""
    if len(frame) > MAX_FRAME_CHARS and "|" not in frame[:MAX_FRAME_CHARS]:
        return 0
    for form in PROGRESS_BARS:
        m = form.pattern.match(frame, 0, MAX_FRAME_CHARS)
        if m is not None:
            return m.end()
    return 0


def progress_before(text: bytes) -> TrainingProgress | None:
    """Return the training progress the end of `text` shows (its last bar frame and its
    last logged line), or None when it shows neither."""
    bar: TrainingProgress | None = None
    logged: dict[str, str] | None = None
    for raw in reversed(re.split(rb"[\r\n]", text[-PROGRESS_SCAN_BYTES:])):
        frame = raw.decode("utf-8", errors="replace").strip()
        if bar is None:
            bar = _read_bar(frame)
        if logged is None:
            logged = _read_logged(frame)
        if bar is not None and logged is not None:
            break
    if bar is None and logged is None:
        return None
    progress = bar or TrainingProgress()
    progress.logged = logged or {}
    return progress


def progress_after(text: str) -> TrainingProgress | None:
    """Return the first bar frame among the lines of `text` (rich's bar is printed once, when
    the training has stopped: after the error), or None."""
    for line in text.splitlines():
        found = _read_bar(line.strip())
        if found is not None:
            return found
    return None


def _read_bar(frame: str) -> TrainingProgress | None:
    """The progress a bar's frame shows, found anywhere in the frame (after a rank prefix),
    or None when it holds no bar."""
    if len(frame) > MAX_FRAME_CHARS:
        return None
    for form in PROGRESS_BARS:
        m = form.pattern.search(frame)
        if m is not None:
            total = m.groupdict().get("total") or ""
            return TrainingProgress(
                bar=frame[m.start():m.end()].strip(), stage=(m["stage"] or "").strip() or None,
                done=int(m["done"]), total=int(total) if total.isdigit() else None,
                metrics={k: v.strip() for k, v in form.metric.findall(" " + m["metrics"])})
    return None


def _read_logged(frame: str) -> dict[str, str] | None:
    """The values of the Trainer's logged line in `frame`, or None when it holds none."""
    m = LOGGED_LINE.search(frame)
    if m is None:
        return None
    try:
        values = ast.literal_eval(m.group())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(values, dict):
        return None
    return {str(k): str(v) for k, v in values.items()}
