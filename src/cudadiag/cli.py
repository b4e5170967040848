"""The `cudadiag` command: environment, the incident log, and a CPU demo."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Sequence

DEMO_CELLS = (
    "%load_ext cudadiag",
    "%xmode Minimal",
    "import torch, torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()  # CPU tensors behave like a CUDA device",
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(8, 4)           # 4 classes: 0..3\n"
    "x = torch.randn(3, 8)\n"
    "target = torch.tensor([0, 2, 4])         # 4 is not a class\n"
    "loss = F.cross_entropy(model(x), target) # the kernel fails here, silently",
    "print('loss', loss.item())               # ...and the error surfaces here",
    "y = torch.ones(2) * 2                    # every later cell is warned",
    "%cudadiag show",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `cudadiag` command; returns its exit status (2 for bad arguments)."""
    parser = _parser()
    args = parser.parse_args(argv)
    return args.handler(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cudadiag",
        description="Diagnose PyTorch CUDA errors: environment, incident log, demo.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    env = sub.add_parser("env", help="print the environment (versions, backend, device)",
                         description="Print versions, backend and device of this machine.")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    env.set_defaults(handler=_cmd_env)
    incidents = sub.add_parser("incidents", help="list recorded incidents, oldest first",
                               description="List the incidents of the log, oldest first.")
    incidents.add_argument("--family", help="only incidents of this family (e.g. oom)")
    incidents.set_defaults(handler=_cmd_incidents)
    show = sub.add_parser("show", help="print one incident in full",
                          description="Print one incident in full.")
    show.add_argument("id", nargs="?", help="incident id or unique prefix (default: newest)")
    show.add_argument("--json", action="store_true", help="print the incident as JSON")
    show.set_defaults(handler=_cmd_show)
    demo = sub.add_parser(
        "demo", help="run a simulated device-side assert in an IPython shell on the CPU",
        description="Run the guide's example (4 classes, targets [0, 2, 4]) on a simulated "
                    "CUDA device in an IPython shell, and print what cudadiag captured.",
    )
    demo.add_argument("--keep", action="store_true",
                      help="record the demo's incident in your incident log")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def _cmd_env(args: argparse.Namespace) -> int:
    import torch

    from cudadiag.env import collect_env

    _initialise_cuda_if_present(torch)
    info = dataclasses.asdict(collect_env())
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            print(f"{key + ':':{width + 1}} {value}")
    return 0


def _initialise_cuda_if_present(torch: object) -> None:
    """This command is its own process: initialising CUDA here touches nobody's state, and
    lets the device name and capability be reported."""
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        return
    try:
        if torch.cuda.is_available():
            torch.cuda.init()
    except Exception as exc:  # a broken driver is part of what this command reports
        print(f"cudadiag: CUDA could not be initialised: {exc}", file=sys.stderr)


def _cmd_incidents(args: argparse.Namespace) -> int:
    from cudadiag.kernel.store import IncidentStore
    from cudadiag.ui.render import render_table

    incidents = IncidentStore().load()
    if args.family:
        incidents = [i for i in incidents if i.diagnosis.family == args.family]
    print(render_table(incidents))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from cudadiag.kernel.store import IncidentNotFound, IncidentStore
    from cudadiag.ui.render import render_text

    try:
        incident = IncidentStore().get(args.id)
    except IncidentNotFound as exc:
        print(f"cudadiag show: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(incident.to_dict(), indent=2) if args.json else render_text(incident))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if not args.keep:
        os.environ["CUDADIAG_HOME"] = tempfile.mkdtemp(prefix="cudadiag-demo-")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    print("cudadiag demo: a simulated CUDA device on the CPU (no GPU needed)\n")
    for source in DEMO_CELLS:
        prompt = f"In [{shell.execution_count}]: "
        print(prompt + source.replace("\n", "\n" + " " * (len(prompt) - 5) + "...: "))
        sys.stdout.flush()
        shell.run_cell(source, store_history=True)
        sys.stdout.flush()
        sys.stderr.flush()
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
