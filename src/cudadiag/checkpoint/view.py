"""`checkpoints`: a directory's checkpoints, newest first, each with its verdict."""

from __future__ import annotations

from cudadiag.checkpoint import Verdict
from cudadiag.i18n import _


def render_checkpoints(directory: str, verdicts: list[Verdict]) -> str:
    """Return the checkpoints of `directory`, newest first, each with its verdict, and the
    one to resume from."""
    if not verdicts:
        return _("no checkpoint in {directory} (files with a manifest or a .pt/.pth/.ckpt "
                 "name)").format(directory=directory)
    trusted = next((v for v in verdicts if v.trusted), None)
    lines = [_("checkpoints in {directory}, newest first:").format(directory=directory)]
    lines += ["  " + v.describe() for v in verdicts]
    lines.append(_("resume from: {path}").format(path=trusted.path) if trusted else
                 _("no trusted checkpoint: none has a matching hash, finite tensors and a "
                   "time before the error"))
    return "\n".join(lines)
