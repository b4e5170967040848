"""`explain`: the diagnosis of a log or pasted text, as the user reads it."""

from __future__ import annotations

from cudadiag.explain import Explanation, RankError, describe_process, seq_numbers
from cudadiag.ui.render import LIST_SHOWN


def render_explanation(explanation: Explanation, source: str) -> str:
    """Return what `cudadiag explain` prints for a log read from `source` (a file name or
    `standard input`): the first error, whether the process must restart, the other ranks'
    errors as consequences, what to check and what not to conclude."""
    d, first = explanation.diagnosis, explanation.first
    size = (f"{explanation.bytes / 10**6:,.1f} MB" if explanation.bytes >= 10**5
            else f"{explanation.bytes:,} bytes")
    lines = f"{explanation.lines:,} line{'s' if explanation.lines != 1 else ''}"
    out = [f"cudadiag explain: {source} — {lines}, {size}"]
    if first is None:
        out.append("no error found: no line of this log holds a known CUDA/PyTorch error or a "
                   "Python exception")
        return "\n".join(out)
    out += [f"first error ({_where(first, ranked=d.rank is not None)}):", f"  {first.evidence}",
            d.summary]
    out += [f"not confident: the same lines also fit {a.family} ({a.evidence})"
            for a in d.alternatives]
    if d.sticky:
        evidence = d.details.get("sticky_evidence")
        out.append("restart: yes — this error leaves the CUDA context unusable; the process "
                   "(in a notebook: the kernel) must restart. A restart fixes no bad target or "
                   "index." + (f" Seen in: {evidence}" if evidence else ""))
    elif first.exit_code is not None and d.family == "unknown":
        out.append("restart: the process has already ended (a new run starts afresh)")
    else:
        out.append("restart: not needed for this error (the CUDA context stays usable)")
    if explanation.only_collective_failures:
        out.append(_collective_only_line(explanation))
    if explanation.consequences:
        label = (describe_process(first.rank, local=first.local, node=None) + "'s failure"
                 if d.rank is not None else "the first error")
        out.append(f"later errors (probable consequences of {label}):")
        out += [f"  {_consequence_where(c)}line {c.line:,}: {c.family} — "
                f"{_shorten_line(c.evidence)}" for c in explanation.consequences[:LIST_SHOWN]]
        if len(explanation.consequences) > LIST_SHOWN:
            out.append(f"  … and {len(explanation.consequences) - LIST_SHOWN} more")
    out.append("check first:")
    out += [f"  - {c}" for c in d.first_checks]
    out.append("do not conclude:")
    out += [f"  - {c}" for c in d.avoid]
    return "\n".join(out)


def _collective_only_line(explanation: Explanation) -> str:

    line = ("every rank that failed did so in a collective (timeouts, aborts): no rank raised "
            "an error first. Look at the slowest or a missing rank, not at a kernel.")
    if explanation.silent_ranks:
        line += " Ranks with no error in this log: " + ", ".join(
            map(str, explanation.silent_ranks[:LIST_SHOWN])) + "."
    seqs = seq_numbers(explanation)
    if len(set(seqs.values())) > 1:
        behind = min(seqs.values())
        line += " Collective sequence numbers: " + ", ".join(
            f"rank {r} at {n}" for r, n in sorted(seqs.items(), key=lambda kv: kv[1])
        ) + f" (behind: {', '.join(str(r) for r, n in seqs.items() if n == behind)})."
    if explanation.first_dump_rank is not None:
        line += (f" Rank {explanation.first_dump_rank}'s watchdog timed out first (Flight "
                 "Recorder's dump signal): it waited longest, on a collective some rank did "
                 "not join.")
    if explanation.root_cause_rank is not None:
        line += f" torchrun names rank {explanation.root_cause_rank} as the first failure."
    return line


def _where(first: RankError, *, ranked: bool) -> str:
    """`line 6, local rank 3 on node7`: where the first error is, and which process."""
    if not ranked and first.node is None:
        return f"line {first.line:,}"
    return f"line {first.line:,}, " + describe_process(first.rank, local=first.local,
                                                        node=first.node)


def _consequence_where(error: RankError) -> str:
    """`local rank 0, ` before a consequence's line, or nothing when it has no rank."""
    if error.rank is None:
        return ""
    return describe_process(error.rank, local=error.local, node=None) + ", "


def _shorten_line(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"
