"""`python -m cudadiag.isolate.torchrun FAILURES.json TORCHRUN-ARGS...`: PyTorch's own
torchrun (`torch.distributed.run.main`: rendezvous, restarts, error files, its "Root Cause"
summary), unchanged, with the failures it reports also written to FAILURES.json for cudadiag
(a rankfiles.LauncherReport). Its output and its exit status are torchrun's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cudadiag.isolate.rankfiles import LauncherFailure, LauncherReport


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
        LauncherReport(first, [
            LauncherFailure(rank, f.local_rank, f.pid, f.exitcode, f.timestamp)
            for rank, f in sorted(exc.failures.items())]).write(Path(argv[1]))
        raise


if __name__ == "__main__":
    main(sys.argv)
