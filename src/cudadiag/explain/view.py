"""`explain`: the diagnosis of a log or pasted text, as the user reads it."""

from __future__ import annotations

from cudadiag.explain import Explanation, RankError, describe_process, seq_numbers
from cudadiag.i18n import _, localize, localize_all, ngettext
from cudadiag.ui.render import LIST_SHOWN


def render_explanation(explanation: Explanation, source: str) -> str:
    """Return what `cudadiag explain` prints for a log read from `source` (a file name or
    `standard input`): the first error, whether the process must restart, the other ranks'
    errors as consequences, what to check and what not to conclude."""
    d, first = explanation.diagnosis, explanation.first
    size = (f"{explanation.bytes / 10**6:,.1f} MB" if explanation.bytes >= 10**5
            else _("{count} bytes").format(count=f"{explanation.bytes:,}"))
    lines = ngettext("{count} line", "{count} lines", explanation.lines).format(
        count=f"{explanation.lines:,}")
    out = [_("cudadiag explain: {source} — {lines}, {size}").format(
        source=localize(source), lines=lines, size=size)]
    if first is None:
        out.append(_("no error found: no line of this log holds a known CUDA/PyTorch error or "
                     "a Python exception"))
        return "\n".join(out)
    if explanation.agreed and explanation.diagnosed is not None:
        out += [_("first failure, as cudadiag diagnosed the run (line {line}; every node of a "
                  "job prints the same; `cudadiag show {id}` shows it where the run was "
                  "recorded):").format(line=f"{first.line:,}",
                                       id=explanation.diagnosed.incident_id),
                f"  {first.evidence}"]
    else:
        out += [_("first error ({where}):").format(where=_where(first,
                                                              ranked=d.rank is not None)),
                f"  {localize(first.evidence)}"]
    if first.progress is not None:
        out.append("  " + _("training had reached: {progress}").format(
            progress=first.progress.describe()))
    if not explanation.agreed:
        out.append(localize(d.summary))
    out += [_("not confident: the same lines also fit {family} ({evidence})").format(
        family=a.family, evidence=a.evidence) for a in d.alternatives]
    out.append(_restart_line(explanation))
    if explanation.only_collective_failures:
        out.append(_collective_only_line(explanation))
    if explanation.consequences:
        out += _consequence_lines(explanation)
    out.append(_("check first:"))
    out += [f"  - {c}" for c in localize_all(d.first_checks)]
    out.append(_("do not conclude:"))
    out += [f"  - {c}" for c in localize_all(d.avoid)]
    return "\n".join(out)


def _restart_line(explanation: Explanation) -> str:
    """Whether the process must restart after the first error, and why."""
    d, first = explanation.diagnosis, explanation.first
    if explanation.agreed and not explanation.agreed_from_incident:
        return _("restart: as the incident says (`cudadiag show {id}` where the run was "
                 "recorded): this log shows only what followed the failure").format(
            id=explanation.diagnosed.incident_id if explanation.diagnosed else "")
    if d.sticky:
        evidence = d.details.get("sticky_evidence")
        return _("restart: yes — this error leaves the CUDA context unusable; the process "
                 "(in a notebook: the kernel) must restart. A restart fixes no bad target or "
                 "index.") + (_(" Seen in: {evidence}").format(evidence=evidence)
                              if evidence else "")
    if first is not None and first.exit_code is not None and d.family == "unknown":
        return _("restart: the process has already ended (a new run starts afresh)")
    return _("restart: not needed for this error (the CUDA context stays usable)")


def _consequence_lines(explanation: Explanation) -> list[str]:
    """The errors after the first one, as its probable consequences (LIST_SHOWN of them)."""
    first, d = explanation.first, explanation.diagnosis
    if d.rank is not None and first is not None:
        label = _("{process}'s failure").format(
            process=localize(describe_process(first.rank, local=first.local, node=None)))
    else:
        label = _("the first error")
    out = [_("later errors (probable consequences of {label}):").format(label=label)]
    out += ["  " + _consequence(c) for c in explanation.consequences[:LIST_SHOWN]]
    more = len(explanation.consequences) - LIST_SHOWN
    if more > 0:
        out.append("  " + _("… and {count} more").format(count=more))
    return out


def _consequence(error: RankError) -> str:
    """`local rank 0, line 12: oom — …`: one later error, where it is and what it says."""
    evidence = _shorten_line(error.evidence)
    if error.rank is None:
        return _("line {line}: {family} — {evidence}").format(
            line=f"{error.line:,}", family=error.family, evidence=evidence)
    return _("{process}, line {line}: {family} — {evidence}").format(
        process=localize(describe_process(error.rank, local=error.local, node=None)),
        line=f"{error.line:,}", family=error.family, evidence=evidence)


def _collective_only_line(explanation: Explanation) -> str:
    """Every failed rank failed in a collective: where to look instead (the silent ranks,
    the rank behind, the first watchdog, torchrun's first failure)."""
    line = _("every rank that failed did so in a collective (timeouts, aborts): no rank "
             "raised an error first. Look at the slowest or a missing rank, not at a kernel.")
    if explanation.silent_ranks:
        line += _(" Ranks with no error in this log: {ranks}.").format(
            ranks=", ".join(map(str, explanation.silent_ranks[:LIST_SHOWN])))
    seqs = seq_numbers(explanation)
    if len(set(seqs.values())) > 1:
        behind = min(seqs.values())
        line += _(" Collective sequence numbers: {numbers} (behind: {ranks}).").format(
            numbers=", ".join(_("rank {rank} at {seq}").format(rank=r, seq=n)
                              for r, n in sorted(seqs.items(), key=lambda kv: kv[1])),
            ranks=", ".join(str(r) for r, n in seqs.items() if n == behind))
    if explanation.first_dump_rank is not None:
        line += _(" Rank {rank}'s watchdog timed out first (Flight Recorder's dump signal): it "
                  "waited longest, on a collective some rank did not join.").format(
            rank=explanation.first_dump_rank)
    if explanation.root_cause_rank is not None:
        line += _(" torchrun names rank {rank} as the first failure.").format(
            rank=explanation.root_cause_rank)
    return line


def _where(first: RankError, *, ranked: bool) -> str:
    """`line 6, local rank 3 on node7`: where the first error is, and which process."""
    if not ranked and first.node is None:
        return _("line {line}").format(line=f"{first.line:,}")
    return _("line {line}, {process}").format(
        line=f"{first.line:,}",
        process=localize(describe_process(first.rank, local=first.local, node=first.node)))


def _shorten_line(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"
