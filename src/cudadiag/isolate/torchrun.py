"""`python -m cudadiag.isolate.torchrun FAILURES.json TORCHRUN-ARGS...`: PyTorch's own
torchrun (`torch.distributed.run.main`: rendezvous, restarts, error files, its "Root Cause"
summary), unchanged, with the failures it reports also written to FAILURES.json for cudadiag
(a TorchrunReport). Its output and its exit status are torchrun's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class TorchrunFailure:
    """One failed rank as torchrun saw it."""

    rank: int
    local_rank: int
    pid: int
    exit_code: int
    """Its exit status (negative: killed by that signal), the process's real one."""
    timestamp: float
    """When torchrun noticed the failure (seconds since the epoch)."""


@dataclass
class TorchrunReport:
    """What torchrun reported about a failed job: the rank it names as the root cause (the
    first failure it observed) and every failed rank."""

    root_cause: int | None = None
    failures: list[TorchrunFailure] = field(default_factory=list)

    def write(self, path: Path) -> None:
        """Write the report as JSON."""
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> TorchrunReport:
        """Read a report `write` wrote; an empty one when there is none (torchrun reported
        no failure) or it cannot be read."""
        try:
            data = json.loads(path.read_text())
            return cls(data["root_cause"], [TorchrunFailure(**f) for f in data["failures"]])
        except (OSError, ValueError, TypeError, KeyError):
            return cls()


def main(argv: list[str]) -> None:
    """Run torchrun with argv[2:]; on a failed job write its failures to argv[1], then let
    torchrun's error end the process as it would. Raises what torchrun raises."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    sys.argv = ["torchrun", *argv[2:]]  # torchrun's messages name itself
    try:
        torchrun(argv[2:])
    except ChildFailedError as exc:
        first, _ = exc.get_first_failure()
        TorchrunReport(first, [
            TorchrunFailure(rank, f.local_rank, f.pid, f.exitcode, f.timestamp)
            for rank, f in sorted(exc.failures.items())]).write(Path(argv[1]))
        raise


if __name__ == "__main__":
    main(sys.argv)
