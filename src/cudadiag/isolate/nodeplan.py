"""Where a job across nodes meets (`cudadiag run --nnodes N --node-rank K --rdzv-backend
c10d --rdzv-endpoint HOST:PORT ...`): the checks of what the user gave, SLURM's variables for
what they left out (isolate/slurm.py), and the settings each node's agent runs with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.errors import TorchrunOptionsError
from cudadiag.i18n import _
from cudadiag.isolate.slurm import SlurmNode, slurm_node

C10D_DEFAULT_PORT = 29400
"""torchrun's port for a c10d endpoint given without one (c10d_rendezvous_backend)."""
JOIN_TIMEOUT_S = 600.0
"""torchrun's default `--rdzv-conf join_timeout`: how long a node waits for the others."""


@dataclass(frozen=True)
class NodePlan:
    """One node's part in a job across nodes."""

    nnodes: int
    node_rank: int
    run_id: str
    """torchrun's `--rdzv-id`: the job's name in the rendezvous."""
    host: str
    port: int
    """The c10d endpoint, where the agents meet (and agree on the first failure)."""
    join_timeout: float
    record_dir: Path | None = None
    """A folder every node sees: the reports go there instead of the rendezvous store."""
    from_slurm: list[str] = field(default_factory=list)
    """The settings taken from SLURM's variables, as options (said when the run starts)."""


def plan_nodes(options: list[str], node_rank: int | None, record_dir: str | None,
               environ: Mapping[str, str]) -> tuple[list[str], NodePlan | None]:
    """torchrun's options (with what SLURM adds) and this node's plan; None for a job on one
    node. Raises TorchrunOptionsError for a node count that is a range, a node rank
    missing or out of range, a job across nodes without c10d and its endpoint."""
    from torch.distributed.run import get_args_parser

    given, _unknown = get_args_parser().parse_known_args([*options, "script.py"])
    default, _unknown = get_args_parser().parse_known_args(["script.py"])
    slurm = slurm_node(environ)
    added: list[str] = []
    has_nnodes = "--nnodes" in _flags(options)
    if slurm is not None and slurm.nnodes > 1 and (not has_nnodes or str(given.nnodes) != "1"):
        added = _slurm_options(given, default, slurm, has_nnodes)
        options = [*options, *added]
        given, _unknown = get_args_parser().parse_known_args([*options, "script.py"])
        if node_rank is None:
            node_rank = slurm.node_id
            added = ["--node-rank", str(node_rank), *added]
    nnodes = _node_count(str(given.nnodes))
    if nnodes == 1:
        if node_rank or record_dir:
            raise TorchrunOptionsError(
                _("{option} is for a job across nodes: give --nnodes N too").format(
                    option="--node-rank" if node_rank else "--record-dir"))
        return options, None
    plan = _plan(given, nnodes, node_rank, record_dir, added)
    if given.rdzv_backend == "static":  # the only backend that takes the node's rank
        options = [*options, "--node-rank", str(plan.node_rank)]
    return options, plan


def _plan(given: Any, nnodes: int, node_rank: int | None, record_dir: str | None,
          from_slurm: list[str]) -> NodePlan:
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if node_rank is None:
        raise TorchrunOptionsError(
            _("--nnodes {nnodes}: say which node this agent is: --node-rank K (0 to {last}), "
              "one agent per node").format(nnodes=nnodes, last=nnodes - 1))
    if not 0 <= node_rank < nnodes:
        raise TorchrunOptionsError(
            _("--node-rank {rank} is out of range for --nnodes {nnodes} (0 to {last})").format(
                rank=node_rank, nnodes=nnodes, last=nnodes - 1))
    if given.rdzv_backend != "c10d" and record_dir is None:
        raise TorchrunOptionsError(
            _("--nnodes {nnodes}: across nodes cudadiag needs --rdzv-backend c10d (the nodes "
              "agree on the first failure through its store), or --record-dir DIR on a "
              "filesystem every node sees").format(nnodes=nnodes))
    if given.rdzv_backend == "c10d" and not given.rdzv_endpoint:
        raise TorchrunOptionsError(
            _("--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT: where the nodes meet (the "
              "address of the first node, the same on every node)").format(nnodes=nnodes))
    try:
        host, port = parse_rendezvous_endpoint(given.rdzv_endpoint or "localhost",
                                               default_port=C10D_DEFAULT_PORT)
    except ValueError as exc:
        raise TorchrunOptionsError(f"--rdzv-endpoint {given.rdzv_endpoint}: {exc}") from None
    return NodePlan(nnodes, node_rank, str(given.rdzv_id), host, port,
                    _join_timeout(str(given.rdzv_conf)),
                    Path(record_dir) if record_dir is not None else None, from_slurm)


def _node_count(text: str) -> int:
    low, _colon, high = text.partition(":")
    if high and low != high:
        raise TorchrunOptionsError(
            _("--nnodes {value}: an elastic node count is not supported (each node's report "
              "is waited for); give one number").format(value=text))
    if not low.isdigit() or int(low) < 1:
        raise TorchrunOptionsError(
            _("--nnodes {value}: expected a number of nodes (1 or more)").format(value=text))
    return int(low)


def _join_timeout(conf: str) -> float:
    """`--rdzv-conf`'s join_timeout (seconds), else torchrun's default."""
    for pair in conf.split(","):
        key, _equals, value = pair.partition("=")
        if key.strip() == "join_timeout":
            try:
                return float(value)
            except ValueError:
                raise TorchrunOptionsError(
                    _("--rdzv-conf join_timeout={value}: expected seconds").format(
                        value=value)) from None
    return JOIN_TIMEOUT_S


def _slurm_options(given: Any, default: Any, slurm: SlurmNode, has_nnodes: bool
                   ) -> list[str]:
    """The options SLURM's variables give that the user left out."""
    added = [] if has_nnodes else ["--nnodes", str(slurm.nnodes)]
    if given.rdzv_backend == default.rdzv_backend:
        added += ["--rdzv-backend", "c10d"]
    if not given.rdzv_endpoint:
        added += ["--rdzv-endpoint", f"{slurm.first_host}:{C10D_DEFAULT_PORT}"]
    if given.rdzv_id == default.rdzv_id:
        added += ["--rdzv-id", slurm.job_id]
    return added


def _flags(options: list[str]) -> set[str]:
    return {w.split("=")[0].replace("_", "-") for w in options if w.startswith("--")}
