"""A repro as a notebook (nbformat), and the check that it reproduces in a fresh kernel.

The verdict ("reproduces: yes/no") and the signature go in the notebook's metadata. The
check runs the notebook as written, from its own folder, except that the program runs in its
original working directory when the data it reads was not bundled. The kernel's own start-up
messages (the TCP warning of ipykernel, debugger notes) are kept out of the user's output.

nbformat is imported only when a notebook is written: its schema validator compiles grammars
at import (seconds), which must not happen in the kernel's thread when an export starts.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudadiag.classification import classify
from cudadiag.i18n import msg
from cudadiag.incident import Incident, Observed, Signature
from cudadiag.isolate.launcher import startup_environment
from cudadiag.privacy.redact import Redactor
from cudadiag.repro.document import Program, ReproDocument, build_document
from cudadiag.repro.staging import Staging, check_target

if TYPE_CHECKING:
    from nbformat import NotebookNode

VERIFY_TIMEOUT_S = 600


@dataclass
class ExportResult:
    """Where the repro went and whether it reproduces."""

    path: Path
    reproduces: bool | None
    observed: Observed
    batch_file: Path | None = None
    side_files: list[Path] | None = None


def to_notebook(doc: ReproDocument, chdir: str | None = None) -> NotebookNode:
    """The document as a notebook; `chdir` adds a cell that moves to that directory before
    the program (verification only). Raises nbformat.ValidationError on a bug."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb: NotebookNode = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    moves = [f"import os\nos.chdir({chdir!r})"] if chdir else []
    code = [*doc.setup, *moves, *([doc.script_setup] if doc.script_setup else []),
            *(source for _, source in doc.program)]
    nb.cells = [new_markdown_cell(doc.header()), *map(new_code_cell, code),
                new_markdown_cell(doc.closing)]
    nb.metadata["cudadiag"] = dict(doc.metadata)
    if doc.observed is not None:  # checked: the verdict, as the header states it
        nb.metadata["cudadiag"].update(reproduces=doc.reproduces,
                                       observed=dataclasses.asdict(doc.observed))
    nbformat.validate(nb)
    return nb


def export_notebook(incident: Incident, path: str | Path, cells: dict[int, str], *,
                    signature: Any, batch: tuple[int, Any] | None = None,
                    rng_states: dict[Any, dict[str, Any]] | None = None,
                    verify: bool = True, redactor: Redactor | None = None,
                    program: Program | None = None) -> ExportResult:
    """Write the repro notebook for `incident` at `path` with its side files, all at once,
    and, with `verify`, execute it in a fresh kernel and record whether it fails with the
    same signature. `program` gives everything beyond the cells (shipped values, setup,
    working directory, bundle).

    Raises ExportError for a bad path or when anything cannot be written (nothing is left
    behind then).
    """
    path = Path(path)
    check_target(path, (".ipynb",))
    program = program or Program(cells=cells)
    program.cells = cells
    program.batch = batch if batch is not None else program.batch
    program.rng_states = rng_states if rng_states is not None else program.rng_states
    doc = build_document(incident, program, path.stem, signature=signature.to_dict(),
                         redactor=redactor)
    return write_and_verify(doc, path, signature, verify)


def write_and_verify(doc: ReproDocument, path: Path, signature: Any, verify: bool,
                     timeout: float = VERIFY_TIMEOUT_S) -> ExportResult:
    """Stage the notebook and its side files beside `path`, check it reproduces there (each
    cell within `timeout` seconds), move everything into place. Raises ExportError (nothing
    left behind)."""
    import nbformat

    with Staging(path) as staging:
        for side in doc.side_files:
            staging.write(side.name, side.data)
        side_files = [path.parent / s.name for s in doc.side_files]
        result = ExportResult(path=path, reproduces=None, observed=Observed(),
                              side_files=side_files)
        result.batch_file = next((f for f in side_files if f.name.endswith(".batch.pt")),
                                 None)
        if verify:
            result.reproduces, result.observed = verify_notebook(
                to_notebook(doc, chdir=doc.chdir), staging.folder, signature,
                check_environment(doc), timeout)
            record_verdict(doc, result)
        staging.write(path.name, nbformat.writes(to_notebook(doc)).encode())
        staging.commit()
    return result


def record_verdict(doc: ReproDocument, result: ExportResult) -> Observed:
    """Put the verification's verdict into `doc`, for its header; return what it observed,
    scrubbed (as the header shows it)."""
    doc.reproduces = result.reproduces
    doc.observed = Observed(**Redactor().strings(dataclasses.asdict(result.observed)))
    return doc.observed


def check_environment(doc: ReproDocument) -> dict[str, str]:
    """The environment a repro's check starts from: this process's as it started, the
    blocking variables set, and without the variables the repro sets itself (a value the
    shell happens to have must not hide a repro that would fail without it)."""
    env = {k: v for k, v in startup_environment().items() if k not in doc.sets_itself}
    return {**env, **doc.env_vars}


def verify_notebook(nb: NotebookNode, folder: Path, signature: Signature,
                    env: dict[str, str], timeout: float = VERIFY_TIMEOUT_S
                    ) -> tuple[bool | None, Observed]:
    """Execute a copy of `nb` in a fresh kernel started in `folder` with the environment
    `env` (check_environment), each cell within `timeout` seconds; return (reproduces, what
    was observed). It reproduces when a cell fails with the same family, and the same
    exception type unless the original was a precheck (which exists only under cudadiag's
    tracer). Ctrl-C stops it: (None, a note)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    copy = nbformat.from_dict(nb)
    # "immediate": the check's kernel is killed, not asked to exit, both when the check ends
    # and at the interpreter's exit (nbclient's atexit hook); a graceful exit takes seconds,
    # in which a Jupyter server shutting the exporting kernel down sends it SIGTERM.
    client = NotebookClient(copy, timeout=int(timeout), kernel_name="python3",
                            allow_errors=True, shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(folder)}})
    with tempfile.TemporaryFile() as kernel_stderr:
        try:
            client.execute(env=env, stderr=kernel_stderr, stdout=subprocess.DEVNULL)
        except KeyboardInterrupt:
            return None, Observed(note=msg("verification interrupted"))
        except (CellTimeoutError, DeadKernelError, RuntimeError) as exc:
            kernel_stderr.seek(0)
            tail = kernel_stderr.read().decode(errors="replace").strip().splitlines()[-3:]
            return False, Observed(ename=type(exc).__name__,
                                   note=" ".join([str(exc).splitlines()[0], *tail])[:300])
    for cell in copy.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if errors:
            streams = "\n".join(o.get("text", "") for o in cell.outputs
                                if o.output_type == "stream")
            return verdict(signature, errors[0].ename, errors[0].evalue, streams)
    return False, Observed(note=msg("no cell raised"))


def verdict(signature: Signature, ename: str, evalue: str,
            context: str) -> tuple[bool, Observed]:
    """(reproduces, observed) for an error `ename: evalue` seen when running a repro."""
    family = classify(f"{ename}: {evalue}", context=context).family
    observed = Observed(ename=ename, evalue=(evalue.splitlines() or [""])[0][:300],
                        family=family)
    same_type = (signature.error_type.endswith("PrecheckError")
                 or signature.error_type.rsplit(".", 1)[-1] == ename)
    return family == signature.family and same_type, observed
