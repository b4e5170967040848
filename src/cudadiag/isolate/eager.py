"""An isolated re-run of compiled code runs it eagerly.

Inside torch.compile's generated code the tracer sees no aten operator (the kernels are
Inductor's), so an isolated re-run of a cell whose failure came from compiled code, or
which compiles, turns compilation off: the compiled functions run as written, and the
tracer and prechecks name the operator and the value. torch reads TORCH_COMPILE_DISABLE
when it is imported; a child forked from the warm interpreter imported torch before its
environment was set, so the worker also sets the flag it initialises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cudadiag.i18n import N_

if TYPE_CHECKING:
    from cudadiag.incident import Incident

DISABLE_VARIABLE = "TORCH_COMPILE_DISABLE"
GRAPH_CAPTURE_FAMILY = "cuda_graph"
EAGER_ENV = {DISABLE_VARIABLE: "1"}
EAGER_LINE = N_("cudadiag: compilation disabled in the re-run (TORCH_COMPILE_DISABLE=1): the "
              "torch.compile'd code runs eagerly, so the tracer names the aten operator and "
              "the value")
COMPILED_PATH_LINE = N_(
    "cudadiag: the fault is in the compiled path: the same cells run eagerly (compilation "
    "disabled) finished without error — compare the two with %cuda_compare --variants eager "
    "(original: {original})")
"""Shown with `_` (the verdict of an eager re-run that finished without error)."""
_COMPILES = re.compile(r"\btorch\.compile\b|\btorch\._dynamo\b|\bdynamo\.optimize\b")


def should_run_eagerly(original: Incident | None, sources: Iterable[str],
                       env: dict[str, str]) -> bool:
    """Return True when an isolated re-run should disable compilation: the original failure
    came from code torch.compile generated or from a CUDA graph capture (torch.compile's
    reduce-overhead mode captures graphs: eagerly, none are), or a replayed cell compiles,
    and the user did not set TORCH_COMPILE_DISABLE (`env`: the run's --env variables)."""
    if DISABLE_VARIABLE in env:
        return False
    if original is not None and (original.diagnosis.details.get("compiled")
                                 or original.diagnosis.family == GRAPH_CAPTURE_FAMILY):
        return True
    return any(_COMPILES.search(source) for source in sources)


def disable_compilation_if_asked(torch: Any) -> bool:
    """Turn torch.compile off in this process when its environment asks for it
    (TORCH_COMPILE_DISABLE=1); return True when it did. Raises nothing: a torch without
    dynamo has nothing to disable."""
    if os.environ.get(DISABLE_VARIABLE) != "1":
        return False
    try:
        import torch._dynamo
    except ImportError:
        return False
    torch._dynamo.config.disable = True
    return True
