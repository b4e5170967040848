"""The words shown for what the record keeps as keys: the details of a diagnosis (`file`,
`kernel`, `assertion` beside the first error) and the statuses of compatibility checks
(`FAIL`), each in the language of the moment. A key without a label is shown as it is."""

from __future__ import annotations

from cudadiag.i18n import N_, _
from cudadiag.i18n.width import pad_to_width

DETAIL_KEYS = frozenset((
    N_("file"), N_("line"), N_("kernel"), N_("assertion"), N_("block"), N_("thread"), N_("op"),
    N_("argument"), N_("value"), N_("position"), N_("valid_range"), N_("ignore_index"),
    N_("index"), N_("dim"), N_("size"), N_("shape"), N_("dtype"), N_("device"), N_("device_a"),
    N_("device_b"), N_("requested"), N_("free"), N_("total"), N_("allocated"), N_("reserved"),
    N_("reserved_unallocated"), N_("capability"), N_("arch_list"), N_("error_code"),
    N_("cuda_error"), N_("cuda_error_name"), N_("backend"), N_("exception_type"),
    N_("library"), N_("expected"), N_("found"), N_("reason"), N_("exit_code"),
    N_("wrapped_by"),
))
"""The details most diagnoses hold, by their key in the record: each key is its own message
id, so English shows the record's key as it is and a translation gives the label."""
COMPAT_STATUSES = {"pass": N_("PASS"), "warn": N_("WARN"), "fail": N_("FAIL"),
                   "skip": N_("SKIP")}
"""A compatibility check's status as `cudadiag env --check` shows it."""
STATUS_WIDTH = 4


def detail_label(key: str) -> str:
    """Return the label of the detail `key` in the language of the moment (the key itself
    when it has none)."""
    return _(key) if key in DETAIL_KEYS else key


def compat_status(status: str) -> str:
    """Return a compatibility check's `status` (`fail`) as shown (`FAIL`), in the language
    of the moment, padded to STATUS_WIDTH columns."""
    label = _(COMPAT_STATUSES[status]) if status in COMPAT_STATUSES else status.upper()
    return pad_to_width(label, STATUS_WIDTH)
