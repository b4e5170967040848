"""Export a minimized repro as a notebook, then check it reproduces in a fresh kernel.

The notebook: a Markdown header (first error, family, operator, step, batch, environment);
a cell that sets the blocking variables before torch is imported (diagnostic only); the
recorded batch, inlined with exact dtype, shape and strides when small, else saved beside the
notebook; the minimized cells; the first checks. Everything it carries is scrubbed
(redact.py). The verdict ("reproduces: yes/no") and the signature go in its metadata.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from cudadiag.batch import tensors_of
from cudadiag.classify import classify
from cudadiag.incident import Incident
from cudadiag.isolate.launcher import NVIDIA_BLOCKING, ROCM_BLOCKING
from cudadiag.own_work import outside_user_modes
from cudadiag.repro.minimize import Signature
from cudadiag.repro.redact import Redactor
from cudadiag.repro.report import render_report

INLINE_MAX_ELEMENTS = 10_000
VERIFY_TIMEOUT_S = 600


@dataclass
class ExportResult:
    """Where the notebook went and whether it reproduces."""

    path: Path
    reproduces: bool | None
    observed: dict[str, Any]
    batch_file: Path | None = None


def export_notebook(incident: Incident, path: str | Path, cells: dict[int, str], *,
                    signature: Signature, batch: tuple[int, Any] | None = None,
                    rng_states: dict[int, dict[str, Any]] | None = None,
                    verify: bool = True, redactor: Redactor | None = None) -> ExportResult:
    """Write the repro notebook for `incident` at `path` and, with `verify`, execute it in a
    fresh kernel and record whether it fails with the same signature.

    Raises ValueError for a path that does not end in .ipynb, OSError when it cannot be
    written, nbformat.ValidationError if the notebook does not validate (a bug).
    """
    path = Path(path)
    if path.suffix != ".ipynb":
        raise ValueError(f"{path}: the repro notebook's name must end in .ipynb")
    scrub = redactor or Redactor()
    path.parent.mkdir(parents=True, exist_ok=True)
    backend_vars = ROCM_BLOCKING if incident.env and incident.env.hip else NVIDIA_BLOCKING
    with outside_user_modes():  # cudadiag's own tensor work, not the user's (simulated) device
        batch_cell, batch_file = _batch_cell(batch, path)
        rng_cell = _rng_cell({n: rng_states[n] for n in cells if rng_states and n in rng_states},
                             path)
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        new_markdown_cell(_header(incident, scrub)),
        new_code_cell(_blocking_cell(backend_vars)),
        *([new_code_cell(batch_cell)] if batch_cell else []),
        *([new_code_cell(rng_cell)] if rng_cell else []),
        *(new_code_cell(f"# In[{n}]\n" + (f"restore_rng({n})\n" if rng_cell else "")
                        + scrub.code(source)) for n, source in cells.items()),
        new_markdown_cell(_closing(incident)),
    ]
    nb.metadata["cudadiag"] = scrub.strings({"incident": incident.id,
                                             "signature": signature.to_dict(),
                                             "reproduces": None})
    nbformat.validate(nb)
    nbformat.write(nb, path)
    result = ExportResult(path=path, reproduces=None, observed={}, batch_file=batch_file)
    if verify:
        result.reproduces, result.observed = verify_notebook(nb, path, signature, backend_vars)
        nb.metadata["cudadiag"].update(reproduces=result.reproduces,
                                       observed=scrub.strings(result.observed))
        nbformat.write(nb, path)
    return result


def verify_notebook(nb: nbformat.NotebookNode, path: Path, signature: Signature,
                    env_vars: dict[str, str]) -> tuple[bool, dict[str, Any]]:
    """Execute a copy of `nb` in a fresh kernel (blocking variables set before it starts);
    return (reproduces, what was observed). It reproduces when a cell fails with the same
    family, and the same exception type unless the original was a precheck (which exists
    only under cudadiag's tracer)."""
    from nbclient import NotebookClient

    copy = nbformat.from_dict(nb)
    client = NotebookClient(copy, timeout=VERIFY_TIMEOUT_S, kernel_name="python3",
                            allow_errors=True, resources={"metadata": {"path": str(path.parent)}})
    client.execute(env={**os.environ, **env_vars})
    for cell in copy.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if not errors:
            continue
        streams = "\n".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        error = errors[0]
        family = classify(f"{error.ename}: {error.evalue}", context=streams).family
        observed = {"ename": error.ename, "evalue": error.evalue.splitlines()[0][:300],
                    "family": family}
        same_type = (signature.error_type.endswith("PrecheckError")
                     or signature.error_type.rsplit(".", 1)[-1] == error.ename)
        return family == signature.family and same_type, observed
    return False, {"ename": None, "family": None, "note": "no cell raised"}


def _header(incident: Incident, scrub: Redactor) -> str:
    return ("# Minimized repro\n\n"
            "Generated by cudadiag from incident "
            f"`{incident.id}`. Run all cells: the last code cell should fail as below.\n\n"
            + render_report(incident, scrub).replace("## ", "## First error: ", 1))


def _blocking_cell(variables: dict[str, str]) -> str:
    lines = ["# Diagnostic only: synchronous kernel launches, so the failing operator raises",
             "# where it runs. Set before torch is imported (the variables count only before",
             "# CUDA initialises). Never time anything with them on.", "import os", ""]
    lines += [f'os.environ["{k}"] = "{v}"' for k, v in variables.items()]
    return "\n".join(lines)


def _closing(incident: Incident) -> str:
    d = incident.diagnosis
    checks = "\n".join(f"- {c}" for c in d.first_checks)
    avoid = "\n".join(f"- {c}" for c in d.avoid)
    return f"## What to check first\n\n{checks}\n\n## Conclusions to avoid\n\n{avoid}\n"


def _batch_cell(batch: tuple[int, Any] | None, path: Path) -> tuple[str | None, Path | None]:
    if batch is None:
        return None, None
    import torch

    step, data = batch
    elements = sum(t.numel() for t in tensors_of(data))
    intro = ["import torch", "from cudadiag.batch import replay_batch", ""]
    if elements <= INLINE_MAX_ELEMENTS and all(_inlinable(t) for t in tensors_of(data)):
        body = [f"batch = {_literal(data)}"]
        file = None
    else:
        file = path.with_suffix(".batch.pt")
        torch.save(data, file)
        body = [f"batch = torch.load({file.name!r}, weights_only=False)  # saved beside this "
                "notebook"]
    body.append(f"replay_batch({step}, batch)  # the next watch() yields only this batch, as "
                f"step {step}")
    return "\n".join(intro + body), file


def _rng_cell(states: dict[int, dict[str, Any]], path: Path) -> str | None:
    """A helper that puts the RNG streams back where each cell found them originally (an
    unseeded random batch then fails at the same iteration)."""
    if not states:
        return None
    import torch

    file = path.with_suffix(".rng.pt")
    torch.save({n: {k: v for k, v in s.items() if k != "cuda"} for n, s in states.items()},
               file)
    return "\n".join([
        "import random", "import torch", "",
        f"_rng = torch.load({file.name!r}, weights_only=False)  # saved beside this notebook",
        "", "", "def restore_rng(cell):",
        '    """The RNG states this cell started from in the original run."""',
        "    states = _rng.get(cell, {})",
        '    if "torch" in states:', '        torch.set_rng_state(states["torch"])',
        '    if "random" in states:', '        random.setstate(states["random"])',
        '    if "numpy" in states:', "        import numpy",
        '        numpy.random.set_state(states["numpy"])',
    ])


def _inlinable(t: Any) -> bool:
    """Dense layouts (a permutation of a contiguous one) can be rebuilt exactly by
    empty_strided + copy_; overlapping or expanded ones go to a file."""
    if t.dtype.is_floating_point and not bool(t.isfinite().all()):
        return False  # nan/inf have no literal; the file keeps them exactly
    if t.numel() == 0 or t.is_contiguous():
        return True
    return 0 not in t.stride() and sorted(t.stride()) == sorted(
        t.permute(*sorted(range(t.dim()), key=lambda d: -t.stride(d))).contiguous().stride())


def _literal(data: Any) -> str:
    import torch

    if isinstance(data, torch.Tensor):
        t = data.detach().cpu()
        dtype = str(t.dtype)
        values = t.contiguous().reshape(-1).tolist()
        shape, stride = list(t.shape), list(t.stride())
        flat = f"torch.tensor({values!r}, dtype={dtype}).reshape({shape})"
        if t.is_contiguous():
            return flat
        return f"torch.empty_strided({shape}, {stride}, dtype={dtype}).copy_({flat})"
    if isinstance(data, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in data.items()) + "}"
    if isinstance(data, tuple):
        return "(" + "".join(f"{_literal(v)}, " for v in data) + ")"
    if isinstance(data, list):
        return "[" + ", ".join(_literal(v) for v in data) + "]"
    return repr(data)
