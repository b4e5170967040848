"""The repro of a multi-rank job (`cudadiag run --nproc-per-node N`, or a job across nodes):
the same launcher (torchrun) with the same number of ranks, on one machine (`--standalone`),
running a copy of the script; or, when a re-run cannot show the failure, a plain refusal.

A multi-rank program is exported whole: its ranks need each other, so the minimizer (one
process per candidate) cannot run it. The check runs the repro and reads its output the way
`cudadiag explain` reads a job's log: it reproduces when a rank fails first with an error of
its own of the incident's family. A failure that is the job's communication (only
collectives failed, the rendezvous, a peer gone) or a rank killed from outside is refused:
one machine's re-run would not say whether it is the same.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cudadiag.errors import ExportError
from cudadiag.explain import explain_text, is_consequence
from cudadiag.i18n import _, localize, msg
from cudadiag.incident import Incident, Observed, ReproInfo
from cudadiag.log.store import IncidentStore
from cudadiag.privacy.secret_names import looks_secret
from cudadiag.repro.staging import Staging, check_target

LAUNCHER_VARIABLES = re.compile(
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_RANK|"
    r"ROLE_NAME|ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_\w+|TORCH_NCCL_\w+|"
    r"NCCL_ASYNC_ERROR_HANDLING|CUDADIAG_\w+|PET_\w+|OMP_NUM_THREADS)$")
"""What torchrun (or cudadiag) sets in each rank: the repro's torchrun sets its own."""
_ERROR_TYPE = re.compile(r"^\s*(?:\[\w+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception))\b")


@dataclass
class RankExport:
    """What exporting a multi-rank job wrote and saw."""

    path: Path
    program: Path
    """The copy of the script the repro runs, beside it."""
    ranks: int
    command: list[str]
    """torchrun's command line, as the repro runs it (the script's name relative)."""
    reproduces: bool | None = None
    observed: Observed = field(default_factory=Observed)


def is_multi_rank(incident: Incident) -> bool:
    """True for the incident of a job of several ranks (torchrun's, or spawned processes)."""
    return bool(incident.run.ranks)


def refusal(incident: Incident) -> str | None:
    """Why the job cannot be exported as a repro (None: it can)."""
    run, first = incident.run, next(
        (r for r in incident.run.ranks if r.rank == incident.diagnosis.rank), None)
    if run.mode != "cli" or not run.command:
        return _("its ranks were started by notebook cells (torch.multiprocessing or "
                 "%cuda_isolate --nproc-per-node); only a `cudadiag run` job is exported as "
                 "a job: run the program as a script with cudadiag run --nproc-per-node N")
    if run.command[0] == "-m":
        return _("it ran a module (python -m); only scripts can be exported")
    if incident.diagnosis.family == "distributed" or (first is not None and first.consequence):
        return _("its first failure is the job's communication (only collectives failed, "
                 "the rendezvous, or a peer gone), not an error of a rank's own: a re-run on "
                 "one machine would not show whether it is the same. Look at the rank the "
                 "summary names: {summary}").format(
            summary=localize(incident.diagnosis.summary) or incident.error.message)
    if first is not None and first.outcome == "died":
        return _("rank {rank} ended without an error of its own ({ending}): what ended it "
                 "(the host's out-of-memory killer, a crash) is outside the program, and a "
                 "re-run would not say whether it is the same").format(
            rank=first.rank, ending=first.signal or first.exit_status)
    return None


def export_rank_job(incident: Incident, path: Path, *, verify: bool = True,
                    timeout: float = 600.0, store: IncidentStore | None = None) -> RankExport:
    """Write `path` (a .py that runs the job under torchrun on this machine) and the copy of
    the script beside it, check that it fails the same way (unless not `verify`, within
    `timeout` seconds), record the verdict with the incident. Raises ExportError when the
    job cannot be exported (refusal()), the path is no script's or the script is gone."""
    check_target(path, (".py",))
    reason = refusal(incident)
    if reason is not None:
        raise ExportError(_("incident {id} cannot be exported as a repro: {reason}").format(
            id=incident.id, reason=reason))
    source = _script_source(incident)
    export = RankExport(path, path.with_name(f"{path.stem}_program.py"),
                        _rank_count(incident), [])
    export.command = ["--standalone", "--nproc-per-node", str(export.ranks),
                      export.program.name, *incident.run.command[1:]]
    with Staging(path) as staging:
        staging.write(export.program.name, source.encode())
        launcher = staging.write(path.name, _launcher_script(incident, export).encode())
        if verify:
            export.reproduces, export.observed = _verify(incident, launcher, timeout)
        staging.commit()
    incident.repro = ReproInfo(path=str(path), reproduces=export.reproduces,
                               observed=export.observed)
    try:
        (store or IncidentStore()).append(incident)
    except OSError as exc:
        print(_("cudadiag: the repro was written, but its verdict could not be added to the "
                "incident log: {error}").format(error=exc), file=sys.stderr)
    return export


def _script_source(incident: Incident) -> str:
    """The script the job ran, read in the run's working folder."""
    cwd = incident.run.cwd or os.getcwd()
    script = os.path.join(cwd, incident.run.command[0])
    try:
        return Path(script).read_text()
    except OSError as exc:
        raise ExportError(_("incident {id}: cannot read its script {script}: {reason}").format(
            id=incident.id, script=script, reason=exc.strerror)) from None


def _rank_count(incident: Incident) -> int:
    """The job's ranks: nodes times processes per node when torchrun's options say both,
    else the ranks recorded."""
    words = incident.run.launcher
    counts = [words[i + 1] for i, w in enumerate(words[:-1])
              if w in ("--nnodes", "--nproc-per-node", "--nproc_per_node")]
    if len(counts) == 2 and all(c.isdigit() for c in counts):
        return int(counts[0]) * int(counts[1])
    if "--nnodes" not in words and counts and counts[0].isdigit():
        return int(counts[0])
    return len(incident.run.ranks)


def _launcher_script(incident: Incident, export: RankExport) -> str:
    environ = {name: value for name, value in incident.run.environ.items()
               if value is not None and not LAUNCHER_VARIABLES.match(name)
               and not looks_secret(name) and "[REDACTED:" not in value}
    summary = localize(incident.diagnosis.summary) or incident.error.message
    return "\n".join([
        "# " + _("cudadiag repro of incident {id}: the job as {ranks} ranks under torchrun, "
                 "on this machine").format(id=incident.id, ranks=export.ranks),
        "# " + _("The job: {summary}").format(summary=summary),
        "# " + _("It ran as: torchrun {launcher} -- {command}").format(
            launcher=" ".join(incident.run.launcher), command=" ".join(incident.run.command)),
        "# " + _("Here: torchrun {command}").format(command=" ".join(export.command)),
        "# " + _("{program} is a copy of {script}; run this file from the folder the job ran "
                 "in when the program opens files by relative paths.").format(
            program=export.program.name, script=incident.run.command[0]),
        "# " + _("Not minimized: the ranks of a job need each other. Exit status: "
                 "torchrun's."),
        "import os",
        "import subprocess",
        "import sys",
        "",
        "here = os.path.dirname(os.path.abspath(__file__))",
        f"environ = {{**os.environ, **{environ!r}, 'CUDA_LAUNCH_BLOCKING': '1'}}",
        f"command = {export.command!r}",
        "command[3] = os.path.join(here, command[3])",
        "sys.exit(subprocess.call([sys.executable, '-m', 'torch.distributed.run', *command],",
        "                         env=environ))",
        ""])


def _verify(incident: Incident, launcher: Path, timeout: float) -> tuple[bool, Observed]:
    """Run the repro in the folder the job ran in (files it opens by relative paths are
    there), else in its own; read its output as a job's log."""
    cwd = incident.run.cwd if incident.run.cwd and os.path.isdir(incident.run.cwd) else \
        launcher.parent
    try:
        done = subprocess.run([sys.executable, str(launcher)], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, Observed(note=msg("still running after {seconds} s",
                                        seconds=format(timeout, "g")))
    explained = explain_text(done.stdout + done.stderr)
    first = explained.first
    if first is None or first.diagnosis is None:
        return False, Observed(note=msg("exited with status {status} without an error",
                                        status=done.returncode))
    found = _ERROR_TYPE.match(first.evidence)
    observed = Observed(ename=found.group(1).rsplit(".", 1)[-1] if found else None,
                        family=first.family, evalue=first.evidence.strip()[:300],
                        note=msg("rank {rank} failed first", rank=first.rank)
                        if first.rank is not None else None)
    own = not is_consequence(first.diagnosis)
    return own and first.family == incident.diagnosis.family, observed
