"""The content of a repro, whatever its format: a header, the setup code, the minimized
program, the first checks, and the side files it loads.

Setup, in the order it runs: the blocking variables (before torch is imported; diagnostic
only), the values the kernel shipped to the isolated run, the recorded batch, the RNG states
each cell (and a reduced loop) started from, the script's command line. Small values and
batches are inlined with exact dtype, shape and strides; the rest is saved beside the repro.
Everything the code and the header carry is scrubbed (redact.py); bundled data paths are
rewritten to the copies (bundle.py). notebook.py and script.py render it.
"""

from __future__ import annotations

import io
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag.batch import tensors_of
from cudadiag.incident import Incident
from cudadiag.isolate.launcher import NVIDIA_BLOCKING, ROCM_BLOCKING
from cudadiag.own_work import outside_user_modes
from cudadiag.repro.bundle import Bundle, rewrite_paths
from cudadiag.repro.redact import Redactor
from cudadiag.repro.report import render_report

INLINE_MAX_ELEMENTS = 10_000


@dataclass
class Program:
    """What runs: the minimized cells and what they start from."""

    cells: dict[int, str]
    rng_states: dict[Any, dict[str, Any]] = field(default_factory=dict)
    """States by cell number (and by the key of a reduced loop)."""
    batch: tuple[int, Any] | None = None
    values: Path | None = None
    """The pickled values shipped from the kernel."""
    setup: str | None = None
    """Code run before the cells (a script's command line)."""
    cwd: str | None = None
    files_read: list[str] = field(default_factory=list)
    bundle: Bundle | None = None
    notes: list[str] = field(default_factory=list)
    """Lines about how it was minimized, for the header."""


@dataclass
class SideFile:
    """A file the repro loads, by its name relative to the repro's folder."""

    name: str
    data: bytes


@dataclass
class ReproDocument:
    """A repro ready to render: Markdown header and closing, code blocks, side files."""

    header: str
    setup: list[str]
    program: list[tuple[int, str]]
    closing: str
    side_files: list[SideFile]
    env_vars: dict[str, str]
    metadata: dict[str, Any]
    chdir: str | None = None
    """Where the program must run when its data was not bundled (used by verification)."""
    script_setup: str | None = None


def build_document(incident: Incident, program: Program, stem: str, *,
                   signature: dict[str, Any], redactor: Redactor | None = None
                   ) -> ReproDocument:
    """The repro of `incident` running `program`; side files are named `<stem>.<kind>`.
    Raises OSError when a bundled file cannot be read."""
    scrub = redactor or Redactor()
    env_vars = ROCM_BLOCKING if incident.env and incident.env.hip else NVIDIA_BLOCKING
    side: list[SideFile] = []
    setup = [_blocking_block(env_vars)]
    states = {k: v for k, v in program.rng_states.items()
              if k in program.cells or isinstance(k, str)}
    with outside_user_modes():  # cudadiag's own tensor work, not the user's (simulated) device
        values = _values_block(program.values, stem, side)
        batch = _batch_block(program.batch, stem, side)
        rng = _rng_block(states, stem, side)
    bundle = program.bundle
    if bundle is not None and bundle.copied:
        setup.append(_bundle_folder_block(bundle.folder))  # before the side files are read
    setup += [b for b in (values, batch, rng) if b]
    if bundle is not None:
        for source, copy in bundle.copied.items():
            side.append(SideFile(copy, Path(source).read_bytes()))
    cells = []
    for number, source in program.cells.items():
        code = rewrite_paths(source, bundle) if bundle else source
        restore = f"restore_rng({number})\n" if rng and number in states else ""
        cells.append((number, f"# In[{number}]\n{restore}{scrub.code(code)}"))
    files = [scrub(f) for f in program.files_read]
    return ReproDocument(
        header=_header(incident, program, scrub, files),
        setup=setup,
        program=cells,
        closing=_closing(incident),
        side_files=side,
        env_vars=env_vars,
        metadata=scrub.strings({"incident": incident.id, "signature": signature,
                                "reproduces": None, "files_read": files,
                                "bundled": sorted(bundle.copied.values()) if bundle else []}),
        chdir=program.cwd if program.files_read and not bundle else None,
        script_setup=scrub.code(program.setup) if program.setup else None,
    )


def literal(value: Any) -> str | None:
    """Python source that rebuilds `value` exactly (tensors with dtype, shape and strides),
    or None when it has no such literal (or is too large to inline)."""
    if sum(t.numel() for t in tensors_of(value)) > INLINE_MAX_ELEMENTS:
        return None
    return _literal(value)


def _header(incident: Incident, program: Program, scrub: Redactor, files: list[str]) -> str:
    lines = ["# Minimized repro", "",
             f"Generated by cudadiag from incident `{incident.id}`. Run it from the top: it "
             "should fail as below.", ""]
    if incident.run.command:
        lines += [f"Command line: `{scrub(' '.join(incident.run.command))}`, working "
                  f"directory `{scrub(program.cwd or '.')}`.", ""]
    lines += [f"- {note}" for note in program.notes]
    if files:
        bundle = program.bundle
        lines += ["", "Files the program read: " + ", ".join(f"`{f}`" for f in files) + "."]
        if bundle is None:
            lines += ["They are not bundled: run this from the program's working directory "
                      f"(`{scrub(program.cwd or '.')}`), or export again with `--bundle`."]
        else:
            if bundle.copied:
                lines += [f"Copied beside this file: {len(bundle.copied)} (paths in the code "
                          "point at the copies)."]
            left = [*bundle.too_large, *bundle.missing]
            if left:
                lines += ["Not copied (larger than 20 MB, or gone): "
                          + ", ".join(f"`{scrub(f)}`" for f in left) + "."]
    lines.append("")
    return "\n".join(lines) + "\n" + render_report(incident, scrub).replace(
        "## ", "## First error: ", 1)


def _blocking_block(variables: dict[str, str]) -> str:
    lines = ["# Diagnostic only: synchronous kernel launches, so the failing operator raises",
             "# where it runs. Set before torch is imported (the variables count only before",
             "# CUDA initialises). Never time anything with them on.", "import os", ""]
    lines += [f'os.environ["{k}"] = "{v}"' for k, v in variables.items()]
    return "\n".join(lines)


def _bundle_folder_block(folder: str) -> str:
    """Code that moves to the repro's own folder, where `folder` (the bundled files, named
    relative to it in the code) is, wherever the repro was started from: a script knows its
    `__file__`; a notebook's kernel starts in its folder in Jupyter, and VS Code and Jupyter
    Server name the notebook (nbclient and papermill may start it elsewhere)."""
    return "\n".join([
        f"# The program reads the copies in {folder}/ beside this repro: run it from there,",
        "# wherever it was started.",
        "import os", "",
        "_places = [os.path.dirname(os.path.abspath(p)) for p in (",
        "    globals().get('__file__'), globals().get('__vsc_ipynb_file__'),",
        "    os.environ.get('JPY_SESSION_NAME')) if p] + [os.getcwd()]",
        f"_beside = [p for p in _places if os.path.isdir(os.path.join(p, {folder!r}))]",
        "if not _beside:",
        f"    raise FileNotFoundError({folder + '/ (the data this repro reads) is not here: '!r}",
        "                            'keep it beside the repro and start the repro from its '",
        "                            'folder')",
        "os.chdir(_beside[0])",
    ])


def _closing(incident: Incident) -> str:
    d = incident.diagnosis
    checks = "\n".join(f"- {c}" for c in d.first_checks)
    avoid = "\n".join(f"- {c}" for c in d.avoid)
    return f"## What to check first\n\n{checks}\n\n## Conclusions to avoid\n\n{avoid}\n"


def _values_block(values: Path | None, stem: str, side: list[SideFile]) -> str | None:
    """Inline the shipped values that have a literal; the others go to `<stem>.values.pkl`
    (all of them, as kept, when they cannot be read back here)."""
    if values is None:
        return None
    data = values.read_bytes()
    try:
        loaded: dict[str, Any] = pickle.loads(data)
    except Exception:  # a class this process cannot import: the file travels as it is
        loaded = {}
    inline = {name: code for name, value in loaded.items()
              if (code := literal(value)) is not None}
    rest = {name: value for name, value in loaded.items() if name not in inline}
    lines = ["# Values the isolated run received from the kernel (instead of replaying the "
             "cells that made them)", "import torch", ""]
    lines += [f"{name} = {code}" for name, code in inline.items()]
    if rest or not loaded:
        import cloudpickle

        name = f"{stem}.values.pkl"
        side.append(SideFile(name, cloudpickle.dumps(rest) if loaded else data))
        shown = ", ".join(rest) or "the shipped values"
        lines += ["import pickle", "", f"with open({name!r}, 'rb') as f:  # {shown}: saved "
                  "beside this file", "    globals().update(pickle.load(f))"]
    return "\n".join(lines)


def _batch_block(batch: tuple[int, Any] | None, stem: str, side: list[SideFile]) -> str | None:
    if batch is None:
        return None
    step, data = batch
    intro = ["import torch", "from cudadiag.batch import replay_batch", ""]
    code = literal(data)
    if code is not None:
        body = [f"batch = {code}"]
    else:
        name = f"{stem}.batch.pt"
        side.append(SideFile(name, _torch_bytes(data)))
        body = [f"batch = torch.load({name!r}, weights_only=False)  # saved beside this file"]
    body.append(f"replay_batch({step}, batch)  # the next watch() yields only this batch, as "
                f"step {step}")
    return "\n".join(intro + body)


def _rng_block(states: dict[Any, dict[str, Any]], stem: str,
               side: list[SideFile]) -> str | None:
    """A helper that puts the RNG streams back where each cell (or a reduced loop) found
    them originally: an unseeded random batch then fails at the same iteration."""
    if not states:
        return None
    name = f"{stem}.rng.pt"
    side.append(SideFile(name, _torch_bytes(
        {n: {k: v for k, v in s.items() if k != "cuda"} for n, s in states.items()})))
    return "\n".join([
        "import random", "import torch", "",
        f"_rng = torch.load({name!r}, weights_only=False)  # saved beside this file",
        "", "", "def restore_rng(cell):",
        '    """The RNG states this cell (or loop) started from in the original run."""',
        "    states = _rng.get(cell, {})",
        '    if "torch" in states:',
        '        torch.set_rng_state(torch.as_tensor(states["torch"], dtype=torch.uint8))',
        '    if "random" in states:', '        random.setstate(states["random"])',
        '    if "numpy" in states:', "        import numpy",
        '        numpy.random.set_state(states["numpy"])',
    ])


def _torch_bytes(value: Any) -> bytes:
    """torch.save into memory: the write to disk is ours, so a full disk is an OSError
    (torch's own writer reports it as a RuntimeError from its C++ internals)."""
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _inlinable(t: Any) -> bool:
    """Dense layouts (a permutation of a contiguous one) can be rebuilt exactly by
    empty_strided + copy_; overlapping or expanded ones, and nan/inf, go to a file."""
    if t.dtype.is_floating_point and not bool(t.isfinite().all()):
        return False
    if t.numel() == 0 or t.is_contiguous():
        return True
    return 0 not in t.stride() and sorted(t.stride()) == sorted(
        t.permute(*sorted(range(t.dim()), key=lambda d: -t.stride(d))).contiguous().stride())


def _literal(data: Any) -> str | None:
    import torch

    if isinstance(data, torch.Tensor):
        t = data.detach()
        if t.device.type != "cpu" or t.is_sparse or t.is_quantized or not _inlinable(t):
            return None
        dtype = str(t.dtype)
        values = t.contiguous().reshape(-1).tolist()
        shape, stride = list(t.shape), list(t.stride())
        flat = f"torch.tensor({values!r}, dtype={dtype}).reshape({shape})"
        if t.is_contiguous():
            return flat
        return f"torch.empty_strided({shape}, {stride}, dtype={dtype}).copy_({flat})"
    if type(data) is dict:
        items = [(_literal(k), _literal(v)) for k, v in data.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if type(data) in (list, tuple):
        parts = [_literal(v) for v in data]
        if any(p is None for p in parts):
            return None
        if type(data) is tuple:
            return "(" + "".join(f"{p}, " for p in parts) + ")"
        return "[" + ", ".join(parts) + "]"  # type: ignore[arg-type]
    if type(data) is float and not math.isfinite(data):
        return None
    if data is None or type(data) in (bool, int, float, str, bytes):
        return repr(data)
    return None
