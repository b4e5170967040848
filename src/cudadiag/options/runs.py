"""The options of the runs cudadiag starts, each defined once: `%cuda_isolate`,
`%%blocking_launch`, `%cuda_compare`, `%cudadiag validate` and `cudadiag run` take the ones
that apply to them from here."""

from __future__ import annotations

from cudadiag.i18n import N_
from cudadiag.options.option import option
from cudadiag.options.types import node_index, positive_seconds, processes_per_node

TIMEOUT = option("--timeout", type=positive_seconds, metavar="S",
                 help=N_("kill a run (its whole process group) after S seconds"))
NO_BLOCKING = option("--no-blocking", action="store_true",
                     help=N_("a faithful asynchronous run (no blocking launches, no tracer, no "
                             "prechecks): does the error reproduce at all?"))
NO_PRECHECK = option("--no-precheck", action="store_true",
                     help=N_("let index-taking kernels run unchecked, to see the raw CUDA error"))
NO_TRACE = option("--no-trace", action="store_true", help=N_("do not record aten operators"))
NPROC_PER_NODE = option(
    "--nproc-per-node", "--nproc_per_node", type=processes_per_node, metavar="N",
    dest="nproc_per_node",
    help=N_("run as N ranks of a torchrun job (torch.distributed.run; a number, or auto, cpu, "
            "gpu as torchrun takes it; --standalone unless rendezvous options are given): the "
            "incident names the rank that failed first, the others' errors are its "
            "consequences. Cells that call torch.multiprocessing.spawn need no option: each "
            "process they start is a rank"))
NODE_RANK = option(
    "--node-rank", "--node_rank", type=node_index, metavar="K", dest="node_rank",
    help=N_("in a job across nodes (--nnodes N, one `cudadiag run` per node): which node this "
            "is, 0 to N-1 (under SLURM: SLURM_NODEID when left out)"))
RECORD_DIR = option(
    "--record-dir", metavar="DIR", dest="record_dir",
    help=N_("in a job across nodes: a folder every node sees (a shared filesystem), where the "
            "nodes' agents leave their reports instead of the rendezvous store"))
SHIP = option("--ship", default="auto", metavar="auto|none|a,b",
              help=N_("values sent to the child instead of replaying the cells that made them: "
                      "auto (only what the analysis shows untouched), none, or names"))
BATCH = option("--batch", metavar="last|STEP",
               help=N_("replay one batch recorded by watch(): the child's watch() yields only "
                       "that batch, with its original step number"))
ALLOW_SIDE_EFFECTS = option(
    "--allow-side-effects", action="store_true",
    help=N_("replay cells that write, delete or move files, start processes or reach the "
            "network, or run such a cell more than once (refused otherwise: ship their values "
            "instead)"))
