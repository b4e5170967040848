"""cudadiag's own tensor work, kept out of the user's torch modes.

A user's dispatch or function mode (the simulated device, a logging mode, FakeTensorMode,
`torch.device("cuda")` as a context or default device) applies to every tensor operation in
the thread, cudadiag's included. Reading RNG states, summarising or copying a batch, saving
and loading cudadiag's own files are host work that must neither be simulated, traced nor
redirected to a device: each runs inside `outside_user_modes()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def outside_user_modes() -> Iterator[None]:
    """Run the block with no torch dispatch mode and no torch function mode active; the
    modes are back, in their order, when it ends (also when it raises). Costs nothing when no
    mode is active or torch was never imported."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not (torch._C._len_torch_dispatch_stack()
                             or torch._C._len_torch_function_stack()):
        yield
        return
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield
