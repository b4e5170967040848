"""The incident log at scale: 1,000, 10,000 and 100,000 real-size incidents.

The records are real: made now by the project's own end-to-end workloads (the language-model
script through `cudadiag run`, the method's worked example in an IPython shell and its
`%cuda_isolate`), plus any log given with --records (e.g. the logs the end-to-end tests
wrote). They are varied (new ids, times over the last 170 days, cell numbers, and the
diagnosis of other families) and written straight into the log's SQLite database, under a
temporary folder removed at the end. For each size it times, as a user meets them: append
one incident (median), list all, filter by family (every match), show one by id (the
commands' own work, in-process), open the panel's selector; and `cudadiag incidents` (the
newest 50), `cudadiag incidents --all` and `cudadiag show` as whole commands (a fresh
interpreter each). Then the growth from 1k to 100k and the
targets: append <= 5 ms, list or filter 10,000 <= 300 ms, show <= 50 ms, nothing above 2 s
at 100,000.

    python bench/store_scale.py [--records HOME ...] [--sizes 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from cudadiag import classify  # noqa: E402
from cudadiag.incident import Incident  # noqa: E402
from cudadiag.log.database import connect, put, transaction  # noqa: E402
from cudadiag.log.entry import entry_for_incident  # noqa: E402
from cudadiag.log.records import record_json  # noqa: E402
from cudadiag.log.store import IncidentStore  # noqa: E402

OTHER_FAMILIES = (
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)",
    "CUDA error: an illegal memory access was encountered",
    "Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:0 and cpu!",
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x128 and 256x10)",
)
TARGETS = (("append", 1_000, 0.005), ("append", 10_000, 0.005), ("append", 100_000, 0.005),
           ("list all", 10_000, 0.300), ("filter by family", 10_000, 0.300),
           ("show one by id", 1_000, 0.050), ("show one by id", 10_000, 0.050),
           ("show one by id", 100_000, 0.050))
AT_MOST_AT_100K = 2.0
ID_MARK, TIME_MARK, CELL_MARK = "@@id@@", "@@created@@", 987_654_321
SPAN_S = 170 * 86_400


def made_now(folder: Path) -> list[Incident]:
    """Real incidents of the project's end-to-end workloads, recorded in a fresh home."""
    home = folder / "made-now"
    env = {**os.environ, "CUDADIAG_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    script = folder / "word_lm.py"
    script.write_text((ROOT / "tests" / "workloads" / "word_lm.py").read_text())
    cli = [sys.executable, "-m", "cudadiag.cli"]
    subprocess.run([*cli, "run", "--", sys.executable, str(script), "--simulated"],
                   cwd=folder, env=env, capture_output=True, check=False)
    subprocess.run([sys.executable, "-c", GUIDE_IN_A_SHELL], cwd=folder, env=env,
                   capture_output=True, check=False)
    return IncidentStore(home).load()


GUIDE_IN_A_SHELL = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in ("%load_ext cudadiag",
             "import torch, torch.nn.functional as F\\n"
             "from cudadiag.testing import simulated_cuda\\nsim = simulated_cuda().start()",
             "model = torch.nn.Linear(8, 4)\\nx = torch.randn(3, 8)\\n"
             "target = torch.tensor([0, 2, 4])\\nloss = F.cross_entropy(model(x), target)",
             "print('loss', loss.item())",
             "%cuda_isolate 3"):
    shell.run_cell(cell, store_history=True)
"""


def templates(incidents: list[Incident]) -> list[Incident]:
    """Each incident as recorded, and once more per other family (its diagnosis replaced)."""
    varied = list(incidents)
    for n, message in enumerate(OTHER_FAMILIES):
        twin = Incident.from_dict(incidents[n % len(incidents)].to_dict())
        twin.diagnosis = classify(message)
        varied.append(twin)
    return varied


def write_log(home: Path, kinds: list[Incident], count: int, seed: int) -> list[str]:
    """Write `count` varied incidents into the log's database in one transaction, oldest
    first; return their ids."""
    home.mkdir(mode=0o700, parents=True)
    (home / "config.json").write_text('{"retention": {"incidents": 1000000, "days": 3650}}')
    rng = random.Random(seed)
    shapes = []
    for incident in kinds:
        marked = Incident.from_dict(incident.to_dict())
        marked.id, marked.created_at = ID_MARK, TIME_MARK
        if marked.run.mode == "kernel" and marked.run.cells:
            marked.run.cells = [CELL_MARK]
        shapes.append((record_json(marked), incident))
    start = time.time() - SPAN_S
    ids = []
    conn = connect(home, lambda _conn: None)
    with transaction(conn):
        for n in range(count):
            text, incident = shapes[rng.randrange(len(shapes))]
            record_id = f"{rng.getrandbits(48):012x}"
            created = time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                    time.gmtime(start + SPAN_S * n / count))
            cell = rng.randrange(1, 400)
            record = (text.replace(ID_MARK, record_id).replace(TIME_MARK, created)
                      .replace(str(CELL_MARK), str(cell)))
            entry = entry_for_incident(incident)
            if incident.run.mode == "kernel" and incident.run.cells:
                entry = entry._replace(cell=cell)
            put(conn, entry._replace(id=record_id, created_at=created), record)
            ids.append(record_id)
    return ids


def timed(step: Callable[[], object], repeat: int) -> float:
    """The median wall time of `step` over `repeat` runs, in seconds."""
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def command_s(home: Path, *words: str) -> float:
    env = {**os.environ, "CUDADIAG_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cudadiag.cli", *words], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - begin


def measure(home: Path, ids: list[str], kinds: list[Incident]) -> dict[str, float]:
    from cudadiag.log.listing import run_listing
    from cudadiag.panel.widget import Panel
    from cudadiag.ui.render import render_text

    store = IncidentStore(home)
    options = dict(family=None, since=None, mode=None, cell=None, stats=False, prune=False,
                   keep=None, keep_days=None, last=50, all=True)
    everything = argparse.Namespace(**options)
    family = argparse.Namespace(**{**options, "family": "oom"})
    picks = iter(random.Random(1).sample(ids, 7))
    figures = {}
    figures["list all"] = timed(lambda: run_listing(everything, IncidentStore(home)), 3)
    figures["filter by family"] = timed(lambda: run_listing(family, IncidentStore(home)), 3)
    figures["show one by id"] = timed(
        lambda: render_text(IncidentStore(home).get(next(picks)[:8])), 5)
    figures["open the panel's selector"] = timed(lambda: Panel(store=IncidentStore(home)), 3)
    figures["`cudadiag incidents` (command)"] = command_s(home, "incidents")
    figures["`cudadiag incidents --all` (command)"] = command_s(home, "incidents", "--all")
    figures["`cudadiag show ID` (command)"] = command_s(home, "show", ids[len(ids) // 2][:8])
    made = [Incident.from_dict(kinds[n % len(kinds)].to_dict()) for n in range(30)]
    for incident in made:
        incident.id = f"{random.getrandbits(48):012x}"
    appends = iter(made)
    figures["append"] = timed(lambda: store.append(next(appends)), len(made))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", nargs="*", default=[], type=Path,
                        help="cudadiag homes whose incidents to use too")
    parser.add_argument("--sizes", nargs="*", type=int, default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="store-scale-") as tmp:
        folder = Path(tmp)
        real = made_now(folder)
        for log in args.records:
            real += IncidentStore(log.parent if log.is_file() else log).load()
        kinds = templates(real)
        sizes = sorted(len(record_json(i).encode()) for i in kinds)
        print(f"{len(real)} real incidents ({', '.join(sorted({i.run.mode for i in real}))}), "
              f"{len(kinds)} kinds after variation; record bytes: median "
              f"{statistics.median(sizes):,.0f}, largest {sizes[-1]:,}")
        results: dict[int, dict[str, float]] = {}
        for count in args.sizes:
            home = folder / f"home-{count}"
            begin = time.perf_counter()
            ids = write_log(home, kinds, count, seed=count)
            log_mb = sum(p.stat().st_size for p in home.glob("incidents.sqlite3*")) / 1e6
            print(f"{count:,} incidents written in {time.perf_counter() - begin:.1f} s "
                  f"({log_mb:,.0f} MB of database)")
            results[count] = measure(home, ids, kinds)
        report(results)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def report(results: dict[int, dict[str, float]]) -> None:
    sizes = sorted(results)
    steps = list(results[sizes[0]])
    print(f"\n{'step':34}" + "".join(f"{n:>12,}" for n in sizes) + "   growth")
    for step in steps:
        cells = "".join(f"{results[n][step] * 1000:>10.1f}ms" for n in sizes)
        growth = results[sizes[-1]][step] / results[sizes[0]][step]
        print(f"{step:34}{cells}   x{growth:.1f}")
    failed = []
    for step, count, limit in TARGETS:
        if count in results and results[count][step] > limit:
            failed.append(f"{step} at {count:,}: {results[count][step] * 1000:.1f} ms > "
                          f"{limit * 1000:g} ms")
    top = max(sizes)
    if top >= 100_000:
        failed += [f"{step} at {top:,}: {value:.2f} s > {AT_MOST_AT_100K:g} s"
                   for step, value in results[top].items()
                   if value > AT_MOST_AT_100K]
    print("\ntargets: " + ("all met" if not failed else "MISSED: " + "; ".join(failed)))


if __name__ == "__main__":
    main()
