"""What torch.compile's generated code says about an error raised from it.

Inductor writes every compiled graph as a Python module (and, on the CPU, C++ files) under
its cache (`/tmp/torchinductor_<user>/`). An error of that code names a generated kernel
(`cpp_fused_index_mul_0`, `triton_poi_fused_index_0`), not the operator of the user's
code; the module's comments (`# Source Nodes: [...]`, `# Topologically Sorted Source Nodes:
[...], Original ATen: [...]`) and the kernel's name say which operators it fused, so the
diagnosis can give the checks of that operator.
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

from cudadiag.i18n import Text, msg
from cudadiag.incident import Diagnosis, exception_chain
from cudadiag.knowledge import FAMILIES, INDUCTOR_BOUNDS, OPERATOR_ADVICE

GENERATED_DIR = re.compile(r"torchinductor_[^/\\]*[/\\]")
"""Inductor's cache folder: every generated file lies under it."""
_KERNEL_NAME = re.compile(r"\b(?:cpp|triton_(?:poi|red|per|tem|for))_fused_(?P<ops>\w+?)_\d+\b")
_CALLED_KERNEL = re.compile(r"^\s*(?P<kernel>(?:cpp|triton_\w+?)_fused_\w+?_\d+)(?:\.run)?\(")
_SOURCE_NODES = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes: \[(?P<nodes>[^\]]*)\]"
                           r"(?:, Original ATen: \[(?P<aten>[^\]]*)\])?")
_BOUNDS = re.compile(rf"index out of bounds: (?P<bounds>{INDUCTOR_BOUNDS})")
_COMMENT_WINDOW = 12
"""How many lines above a kernel's call or definition its Source Nodes comment may lie."""
_MAX_READ = 4_000_000
"""Generated modules larger than this are not read (bytes)."""


def generated_code_details(exc: BaseException | None, text: str,
                           details: dict[str, Any]) -> dict[str, Any]:
    """Return what the generated code tells of an error (empty when it did not come from
    code torch.compile generated): `generated_file` (the file the message names),
    `generated_module` (the generated Python module the traceback ran), `generated_kernel`,
    `bounds` (the condition the kernel checked), `source_nodes` and `fused_aten` (the
    graph's nodes and aten operators the kernel fused, when the module says), and
    `fused_op` (the aten operator among them whose contract the checks are about). `exc`
    is the exception (its traceback leads to the generated module), `text` the error's
    text, `details` the diagnosis's. Raises nothing: an unreadable file only means fewer details."""
    frame = _generated_frame(exc)
    files = [str(details[k]) for k in ("generated_file", "file") if details.get(k)]
    if frame is None and not any(GENERATED_DIR.search(f) for f in files):
        return {}
    found: dict[str, Any] = {}
    bounds = details.get("bounds") or _first_group(_BOUNDS, text)
    if bounds:
        found["bounds"] = bounds
    kernel = str(details.get("kernel") or "")
    if files:
        found["generated_file"] = files[0]
    if frame is not None:
        found["generated_module"] = frame[0]
        kernel = _called_kernel(frame[0], frame[1]) or kernel
    module = found.get("generated_module") or found.get("generated_file", "")
    if not _KERNEL_NAME.search(kernel):
        kernel = _first_group(_KERNEL_NAME, text, 0)
    if kernel:
        found["generated_kernel"] = kernel
        found.update(_fused(module, kernel))
    return found


def _generated_frame(exc: BaseException | None) -> tuple[str, int] | None:
    """The innermost frame of generated code in `exc`'s tracebacks (file, line)."""
    if exc is None:
        return None
    for error in exception_chain(exc):
        frames = traceback.extract_tb(error.__traceback__)
        for frame in reversed(frames):
            if GENERATED_DIR.search(frame.filename) and frame.filename.endswith(".py"):
                return frame.filename, frame.lineno or 0
    return None


def _called_kernel(path: str, line: int) -> str:
    """The generated kernel called on `line` of the module at `path` ('' when none)."""
    lines = _read_lines(path)
    if not 0 < line <= len(lines):
        return ""
    m = _CALLED_KERNEL.match(lines[line - 1])
    return m.group("kernel") if m else ""


def _fused(path: str, kernel: str) -> dict[str, Any]:
    """The nodes and aten operators `kernel` fused: the module's Source Nodes comment next
    to the kernel's definition or call, else the operators its name lists."""
    fused: dict[str, Any] = {}
    lines = _read_lines(path) if path.endswith(".py") else []
    for index, line in enumerate(lines):
        if kernel not in line:
            continue
        for above in reversed(lines[max(0, index - _COMMENT_WINDOW): index + 1]):
            m = _SOURCE_NODES.search(above)
            if m:
                fused["source_nodes"] = m.group("nodes").strip()
                if m.group("aten"):
                    fused["fused_aten"] = m.group("aten").strip()
                break
        if fused:
            break
    named = fused.get("fused_aten") or _first_group(_KERNEL_NAME, kernel, "ops")
    op = _advised_operator(str(named))
    if op:
        fused["fused_op"] = f"aten::{op}"
    return fused


def _advised_operator(named: str) -> str:
    """The longest operator with first checks of its own named in `named` (`index_mul`,
    `aten.index, aten.mul`), '' when none."""
    words = "_" + re.sub(r"\baten\.|[^\w]+", "_", named).strip("_") + "_"
    ops = sorted((op for advice in OPERATOR_ADVICE for op in advice.ops), key=len,
                 reverse=True)
    return next((op for op in ops if f"_{op}_" in words), "")


def _read_lines(path: str) -> list[str]:
    try:
        file = Path(path)
        if file.stat().st_size > _MAX_READ:
            return []
        return file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _first_group(pattern: re.Pattern[str], text: str, group: int | str = 1) -> str:
    m = pattern.search(text)
    return m.group(group) if m else ""


def describe_generated_code(diagnosis: Diagnosis, exc: BaseException | None,
                            text: str) -> None:
    """Add to `diagnosis` what the generated code says (generated_code_details) and, when
    the error came from it, say so in its summary: the kernel, the condition it checked and
    the operators it fused. Raises nothing."""
    found = generated_code_details(exc, text, diagnosis.details)
    if not found:
        return
    diagnosis.details.update({k: v for k, v in found.items() if k not in diagnosis.details})
    diagnosis.details.setdefault("compiled", "inductor")
    summary = _compiled_summary(FAMILIES[diagnosis.family].title,
                                found.get("generated_kernel") or msg("a kernel"),
                                found.get("bounds"),
                                found.get("fused_aten") or found.get("source_nodes")
                                or found.get("fused_op"))
    diagnosis.summary = (msg("{summary} — the CUDA context is unusable: restart the process",
                             summary=summary) if diagnosis.sticky else summary)


def _compiled_summary(title: str, kernel: str, bounds: str | None, fused: str | None) -> Text:
    """The summary of an error raised from generated code, as a sentence to keep: the
    family's title, the condition that failed (`bounds`) or that it was raised, the kernel,
    the operators it fused."""
    if bounds and fused:
        return msg("{title}: `{bounds}` failed in {kernel} generated by torch.compile, fusing "
                   "{fused}", title=title, bounds=bounds, kernel=kernel, fused=fused)
    if bounds:
        return msg("{title}: `{bounds}` failed in {kernel} generated by torch.compile",
                   title=title, bounds=bounds, kernel=kernel)
    if fused:
        return msg("{title}: raised from {kernel} generated by torch.compile, fusing {fused}",
                   title=title, kernel=kernel, fused=fused)
    return msg("{title}: raised from {kernel} generated by torch.compile", title=title,
               kernel=kernel)
