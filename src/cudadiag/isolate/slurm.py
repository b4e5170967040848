"""What SLURM says about the node a command runs on (`srun cudadiag run ...`): how many
nodes the job has, which one this is, the first host of its node list (where the nodes
meet) and the job's id. Variables as SLURM documents them for srun's tasks
(https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_BRACKETS = re.compile(r"^(?P<prefix>[^\[,]*)\[(?P<ranges>[^\]]*)\]")


@dataclass(frozen=True)
class SlurmNode:
    """This node of a SLURM job."""

    nnodes: int
    """SLURM_NNODES (SLURM_JOB_NUM_NODES)."""
    node_id: int
    """SLURM_NODEID: this node's place in the job, 0 first."""
    first_host: str
    """The first host of SLURM_JOB_NODELIST (SLURM_NODELIST)."""
    job_id: str
    """SLURM_JOB_ID."""


def slurm_node(environ: Mapping[str, str]) -> SlurmNode | None:
    """This node of the SLURM job the environment describes; None outside SLURM or when a
    variable is missing or malformed."""
    nnodes = environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES")
    node_id = environ.get("SLURM_NODEID")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not (nnodes and nnodes.isdigit() and node_id and node_id.isdigit() and nodelist):
        return None
    host = first_host(nodelist)
    if host is None:
        return None
    return SlurmNode(int(nnodes), int(node_id), host, environ.get("SLURM_JOB_ID", "none"))


def first_host(nodelist: str) -> str | None:
    """The first host of a SLURM host list: `gpu-[03-05,9],cpu1` gives `gpu-03` (the
    padding of a range is kept); None for an empty or malformed list."""
    text = nodelist.strip()
    found = _BRACKETS.match(text)
    if found is None:
        host = text.split(",")[0]
        return host or None
    first = found.group("ranges").split(",")[0].split("-")[0]
    return f"{found.group('prefix')}{first}" if first.isdigit() else None
