"""The words shown for what the record keeps as keys: the details of a diagnosis (`file`,
`kernel`, `assertion` beside the first error) and the statuses of compatibility checks
(`FAIL`), each in the language of the moment. A key without a label is shown as it is."""

from __future__ import annotations

from cudadiag.i18n import N_, _
from cudadiag.i18n.width import pad_to_width

DETAIL_LABELS = {
    "file": N_("file"), "line": N_("line"), "kernel": N_("kernel"),
    "assertion": N_("assertion"), "block": N_("block"), "thread": N_("thread"),
    "op": N_("op"), "argument": N_("argument"), "value": N_("value"),
    "position": N_("position"), "valid_range": N_("valid range"),
    "ignore_index": N_("ignore_index"), "index": N_("index"), "dim": N_("dim"),
    "size": N_("size"), "shape": N_("shape"), "dtype": N_("dtype"), "device": N_("device"),
    "device_a": N_("first device"), "device_b": N_("second device"),
    "requested": N_("requested"), "free": N_("free"), "total": N_("total"),
    "allocated": N_("allocated"), "reserved": N_("reserved"),
    "reserved_unallocated": N_("reserved, unallocated"), "capability": N_("capability"),
    "arch_list": N_("arch list"), "error_code": N_("error code"),
    "cuda_error": N_("CUDA error"), "cuda_error_name": N_("CUDA error name"),
    "backend": N_("backend"), "exception_type": N_("exception type"),
    "library": N_("library"), "expected": N_("expected"), "found": N_("found"),
    "reason": N_("reason"), "exit_code": N_("exit code"), "wrapped_by": N_("wrapped by"),
}
"""The details most diagnoses hold, by their key in the record."""
COMPAT_STATUSES = {"pass": N_("PASS"), "warn": N_("WARN"), "fail": N_("FAIL"),
                   "skip": N_("SKIP")}
"""A compatibility check's status as `cudadiag env --check` shows it."""
STATUS_WIDTH = 4


def detail_label(key: str) -> str:
    """Return the label of the detail `key` in the language of the moment (the key itself
    when it has none)."""
    return _(DETAIL_LABELS[key]) if key in DETAIL_LABELS else key


def compat_status(status: str) -> str:
    """Return a compatibility check's `status` (`fail`) as shown (`FAIL`), in the language
    of the moment, padded to STATUS_WIDTH columns."""
    label = _(COMPAT_STATUSES[status]) if status in COMPAT_STATUSES else status.upper()
    return pad_to_width(label, STATUS_WIDTH)
