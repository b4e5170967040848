"""`checkpoints`: a directory's checkpoints, newest first, each with its verdict."""

from __future__ import annotations

from cudadiag.checkpoint import Verdict


def render_checkpoints(directory: str, verdicts: list[Verdict]) -> str:
    """Return the checkpoints of `directory`, newest first, each with its verdict, and the
    one to resume from."""
    if not verdicts:
        return f"no checkpoint in {directory} (files with a manifest or a .pt/.pth/.ckpt name)"
    trusted = next((v for v in verdicts if v.trusted), None)
    lines = [f"checkpoints in {directory}, newest first:"]
    lines += ["  " + v.describe() for v in verdicts]
    lines.append(f"resume from: {trusted.path}" if trusted else
                 "no trusted checkpoint: none has a matching hash, finite tensors and a time "
                 "before the error")
    return "\n".join(lines)
