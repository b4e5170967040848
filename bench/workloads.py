"""How long each step of the four realistic workloads takes, as a user runs them.

Scripts: `cudadiag run` (to the diagnosis), `cudadiag export --bundle` (minimize, write,
verify). Notebooks (in a real kernel, nbclient's per-cell timing): the failing cell,
`%cuda_isolate`, `%cudadiag export --bundle --wait`. Everything on the simulated device.

    python bench/workloads.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.workloads.notebooks import (  # noqa: E402
    CHAR_MLP,
    CURRICULUM,
    notebook,
    write_labels,
    write_names,
)

SCRIPTS = (("train_classifier.py", "image classifier script"),
           ("word_lm.py", "language-model script"))


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def script_steps(folder: Path, script: str) -> list[tuple[str, float]]:
    shutil.copy(ROOT / "tests" / "workloads" / script, folder / script)
    cli = [sys.executable, "-m", "cudadiag.cli"]
    run_s, ran = timed([*cli, "run", "--", sys.executable, script, "--simulated"], folder)
    incident_id = ran.stderr.split("cudadiag [", 1)[1].split("]", 1)[0]
    export_s, done = timed([*cli, "export", incident_id, "repro.py", "--bundle"], folder)
    verdict = "reproduces: yes" in done.stdout
    return [("cudadiag run", run_s), (f"cudadiag export (reproduces: {verdict})", export_s)]


def cell_seconds(cell: object) -> float:
    timing = cell.metadata["execution"]  # type: ignore[attr-defined]
    start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def notebook_steps(folder: Path, cells: list[str], write_data: object) -> list[tuple[str, float]]:
    from nbclient import NotebookClient

    write_data(folder)  # type: ignore[operator]
    nb = notebook([*cells, "%cuda_isolate", "%cudadiag export repro.ipynb --bundle --wait"])
    NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    failing, isolate, export = nb.cells[-3:]
    verdict = any("reproduces: yes" in o.get("text", "") for o in export.outputs)
    return [("the failing cell", cell_seconds(failing)), ("%cuda_isolate", cell_seconds(isolate)),
            (f"%cudadiag export (reproduces: {verdict})", cell_seconds(export))]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CUDADIAG_HOME"] = str(Path(tmp) / "home")
        rows: list[tuple[str, list[tuple[str, float]]]] = []
        for script, title in SCRIPTS:
            folder = Path(tmp) / script
            folder.mkdir()
            rows.append((title, script_steps(folder, script)))
        for name, cells, data in (("character MLP notebook", CHAR_MLP, write_names),
                                  ("full-batch notebook", CURRICULUM, write_labels)):
            folder = Path(tmp) / name.replace(" ", "-")
            folder.mkdir()
            rows.append((name, notebook_steps(folder, cells, data)))
    for title, steps in rows:
        print(title)
        for step, seconds in steps:
            print(f"  {step:45} {seconds:6.1f} s")


if __name__ == "__main__":
    main()
