"""One change at a time (method point 9): the variants `%cuda_compare` runs, as one table, and
their application inside the isolated child.

Parent side: `VARIANTS` says what each variant changes, which environment variables it needs
and when it means nothing on this PyTorch build ("not applicable", never dropped).

Child side: a comparison run is the planned cells between three cells of cudadiag's own
(`program_cells`): `setup()` applies the variant before any cell runs (so a model built in an
earlier cell lands on the CPU, a `.half()` there stays fp32), `start()` sets the variant's
flags again and starts the clock right before the compared cell, and `finish()` writes the
wall time, the changes the variant actually made, the device the cells used and the values the
compared cell assigned. Each change is counted: a variant that changed nothing says so. A
module named by `child_hooks` in the options (validate/child.py: it chooses the steps and records
what they saw) gets the same three calls, so a feature built on comparisons adds its child code
without this module importing it.
"""

from __future__ import annotations

import importlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudadiag import probes
from cudadiag.i18n import N_, _

SETUP_CELL = 900_001
START_CELL = 900_002
FINISH_CELL = 900_003
"""Cell numbers of cudadiag's own cells in a comparison run (no notebook reaches them)."""
OUTPUT_MAX_BYTES = 256 * 2**20
"""An assigned tensor larger than this is not copied for comparison (named as unsaved)."""
INFO_FILE = "info.json"
OUTPUTS_FILE = "outputs.pt"


@dataclass(frozen=True)
class Variant:
    """One change: its name, what it does in words, the environment it needs, and why it
    would mean nothing on a build (`missing(torch)` returns that reason, or None)."""

    name: str
    change: str
    missing: Callable[[Any], str | None] = lambda torch: None
    env: dict[str, str] = field(default_factory=dict)
    sets_flag: bool = False
    """It sets a flag (the flag is what it changed) instead of counting its changes, where
    zero means its row ran the reference again."""


def _no_cudnn(torch: Any) -> str | None:
    return None if torch.backends.cudnn.is_available() else N_("this PyTorch build has no cuDNN")


def _no_sdpa(torch: Any) -> str | None:
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return None
    return N_("this PyTorch has no scaled_dot_product_attention")


def _no_tf32(torch: Any) -> str | None:
    if torch.version.cuda:
        return None
    return N_("TF32 is an NVIDIA matmul mode; this build has no CUDA")


def _no_compile(torch: Any) -> str | None:
    return None if hasattr(torch, "compile") else N_("this PyTorch has no torch.compile")


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("cpu", N_("modules and tensors on the CPU (the simulated device off)")),
    Variant("fp32", N_("autocast off; .half()/.bfloat16() and fp16/bf16 dtypes made fp32")),
    Variant("no_cudnn", "torch.backends.cudnn.enabled = False", _no_cudnn, sets_flag=True),
    Variant("sdpa_math", N_("scaled_dot_product_attention on the math backend"), _no_sdpa),
    Variant("no_tf32", N_("TF32 off in matmul and cuDNN; float32 matmul precision 'highest'"),
            _no_tf32, sets_flag=True),
    Variant("deterministic", "torch.use_deterministic_algorithms(True)",
            env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, sets_flag=True),
    Variant("contiguous", N_("non-contiguous tensor arguments copied contiguous before each "
                          "operator that does not write in place")),
    Variant("eager", N_("torch.compile disabled (compiled code runs eagerly)"), _no_compile,
            env={"TORCH_COMPILE_DISABLE": "1"}),
)}


def program_cells(options: dict[str, Any]) -> tuple[tuple[int, str], tuple[int, str],
                                                     tuple[int, str]]:
    """Return cudadiag's setup, start and finish cells for a comparison run with `options`
    (JSON-ready: `variant`, `dir`, `outputs`, and what validation adds)."""
    module = f"__import__({__name__!r}, fromlist=['_'])"
    return ((SETUP_CELL, f"{module}.setup({json.dumps(options)!r})"),
            (START_CELL, f"{module}.start()"),
            (FINISH_CELL, f"{module}.finish(globals())"))


# --------------------------------------------------------------------------- child side

_session: dict[str, Any] = {}


def setup(options_json: str) -> None:
    """Apply the variant named in the options before any cell runs (child side)."""
    options = json.loads(options_json)
    counts: Counter[str] = Counter()
    _session.update(options=options, counts=counts, started=None)
    variant = options.get("variant")
    if variant:
        _APPLY[variant](counts)
    hooks = _child_hooks()
    if hooks is not None:
        hooks.setup(options)


def start() -> None:
    """Set the variant's flags again (an earlier cell may have changed them) and start the
    compared cell's clock (child side)."""
    flags = _FLAGS.get(_session["options"].get("variant"))
    if flags is not None:
        flags()
    hooks = _child_hooks()
    if hooks is not None:
        hooks.start()
    _session["started"] = time.perf_counter()


def finish(namespace: dict[str, Any]) -> None:
    """Write the run's info and the compared cell's values to the options' folder (child
    side). Never raises: the run's outcome is the cells', not this bookkeeping's."""
    ended = time.perf_counter()
    folder = Path(_session["options"]["dir"])
    info: dict[str, Any] = {"wall_s": None}
    if probes.simulator_skipped_entries():
        _session["counts"][N_("simulated device entries skipped")] = (
            probes.simulator_skipped_entries())
    info["changes"] = dict(_session["counts"])
    try:
        if _session["started"] is not None:
            info["wall_s"] = ended - _session["started"]
        info["device"] = _device_used()
        info["unsaved"] = _save_outputs(namespace, _session["options"].get("outputs", []),
                                        folder / OUTPUTS_FILE)
        hooks = _child_hooks()
        if hooks is not None:
            hooks.finish(info)
    except Exception as exc:  # reported in the row, never raised
        info["error"] = f"{type(exc).__name__}: {exc}"
    (folder / INFO_FILE).write_text(json.dumps(info, default=str))



def _child_hooks() -> Any:
    """The module named by the options' `child_hooks` (with setup(options), start() and
    finish(info)), imported; None when the options name none."""
    name = _session["options"].get("child_hooks")
    return importlib.import_module(name) if name else None


def _device_used() -> str:
    import torch

    if torch.cuda.is_initialized():
        return "cuda"
    if probes.simulator_in_use():
        return "simulated"
    return "cpu"


def _save_outputs(namespace: dict[str, Any], names: list[str], path: Path) -> dict[str, str]:
    """Save CPU copies of the tensors (and numbers) the compared cell assigned; return the
    names that could not be copied, with why."""
    import torch

    from cudadiag.own_work import outside_user_modes

    saved: dict[str, Any] = {}
    unsaved: dict[str, str] = {}
    with outside_user_modes():
        for name in names:
            value = namespace.get(name)
            try:
                if isinstance(value, torch.Tensor):
                    size = value.numel() * value.element_size()
                    if size > OUTPUT_MAX_BYTES:
                        unsaved[name] = _("{size:,} bytes, above the comparison's budget "
                                          "of {budget:,}").format(size=size,
                                                                  budget=OUTPUT_MAX_BYTES)
                        continue
                    saved[name] = value.detach().to("cpu", copy=True)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    saved[name] = torch.tensor(float(value), dtype=torch.float64)
            except Exception as exc:  # a poisoned device: say so per name
                unsaved[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        torch.save(saved, path)
    return unsaved


def _device_wanted(value: Any) -> bool:
    """True for a device argument that names CUDA (a string, a torch.device, an index)."""
    import torch

    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, (str, torch.device)):
        try:
            return torch.device(value).type == "cuda"
        except (RuntimeError, ValueError):
            return False
    return False


def _apply_cpu(counts: Counter[str]) -> None:
    from torch.overrides import TorchFunctionMode

    probes.switch_off_simulator()  # the simulator, once imported, enters nothing

    class OnTheCpu(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name == "cuda" and args:
                counts[N_("device moves kept on the CPU")] += 1
                return args[0]
            if name == "to":
                moved = [("cpu" if _device_wanted(a) and not isinstance(a, int) else a)
                         for a in args[1:]]
                if moved != list(args[1:]):
                    counts[N_("device moves kept on the CPU")] += 1
                    args = (args[0], *moved)
            if _device_wanted(kwargs.get("device")):
                counts[N_("device moves kept on the CPU")] += 1
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    OnTheCpu().__enter__()


_HALF = ("float16", "bfloat16")


def _apply_fp32(counts: Counter[str]) -> None:
    import torch
    from torch.overrides import TorchFunctionMode

    def wide(value: Any) -> Any:
        if isinstance(value, torch.dtype) and str(value).removeprefix("torch.") in _HALF:
            counts[N_("fp16/bf16 casts made fp32")] += 1
            return torch.float32
        return value

    class InFloat32(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name in ("half", "bfloat16") and args and args[0].is_floating_point():
                counts[N_("fp16/bf16 casts made fp32")] += 1
                return args[0].float()
            if name == "to":
                args = (args[0], *map(wide, args[1:]))
            if "dtype" in kwargs:
                kwargs["dtype"] = wide(kwargs["dtype"])
            return func(*args, **kwargs)

    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    def autocast_off(self: Any, *args: Any, **kwargs: Any) -> None:
        counts[N_("autocast regions off")] += 1
        kwargs["enabled"] = False
        original(self, *args[:2], **kwargs)  # device_type, dtype; enabled forced off

    autocast.__init__ = autocast_off  # type: ignore[method-assign]
    InFloat32().__enter__()


def _counting(counts: Counter[str], functions: dict[str, str]) -> None:
    """Count calls of the functions named (name -> what the count says)."""
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            label = functions.get(getattr(func, "__name__", ""))
            if label:
                counts[label] += 1
            return func(*args, **(kwargs or {}))

    Counting().__enter__()


_INPLACE_DUNDERS = frozenset({
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
    "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
    "__imatmul__", "__setitem__", "__set__",
})
_LAYOUT_QUERIES = frozenset({
    "__get__", "size", "stride", "dim", "is_contiguous", "contiguous", "storage_offset",
    "data_ptr", "numel", "element_size", "untyped_storage", "is_floating_point",
    "_has_compatible_shallow_copy_type", "__repr__", "__format__", "__str__",
})


def _apply_contiguous(counts: Counter[str]) -> None:
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    def contiguous(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not value.is_contiguous():
            counts[N_("non-contiguous inputs copied")] += 1
            return value.contiguous()
        return value

    class Contiguous(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            writes = name in _INPLACE_DUNDERS or (name.endswith("_") and not
                                                  name.startswith("__")) or "out" in kwargs
            if writes or name in _LAYOUT_QUERIES:
                return func(*args, **kwargs)
            return func(*tree_map(contiguous, args), **tree_map(contiguous, kwargs))

    Contiguous().__enter__()


def _apply_eager(counts: Counter[str]) -> None:
    import torch
    import torch._dynamo

    torch._dynamo.config.disable = True  # a warm child imported torch before its env was set
    compile_ = torch.compile

    def eager_compile(*args: Any, **kwargs: Any) -> Any:
        counts[N_("torch.compile calls run eagerly")] += 1
        return compile_(*args, **kwargs)

    torch.compile = eager_compile


def _flags_no_cudnn() -> None:
    import torch

    torch.backends.cudnn.enabled = False


def _flags_sdpa_math() -> None:
    import torch

    backends = torch.backends.cuda
    for switch in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(backends, switch):
            getattr(backends, switch)(False)
    backends.enable_math_sdp(True)


def _flags_no_tf32() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _flags_deterministic() -> None:
    import torch

    torch.use_deterministic_algorithms(True)


_FLAGS: dict[str | None, Callable[[], None]] = {
    "no_cudnn": _flags_no_cudnn,
    "sdpa_math": _flags_sdpa_math,
    "no_tf32": _flags_no_tf32,
    "deterministic": _flags_deterministic,
}


def _with_flags(name: str) -> Callable[[Counter[str]], None]:
    def apply(counts: Counter[str]) -> None:
        _FLAGS[name]()

    return apply


def _sdpa_math(counts: Counter[str]) -> None:
    _flags_sdpa_math()
    _counting(counts, {"scaled_dot_product_attention": N_("attention calls on the math backend")})


_APPLY: dict[str, Callable[[Counter[str]], None]] = {
    "cpu": _apply_cpu,
    "fp32": _apply_fp32,
    "no_cudnn": _with_flags("no_cudnn"),
    "sdpa_math": lambda counts: _sdpa_math(counts),
    "no_tf32": _with_flags("no_tf32"),
    "deterministic": _with_flags("deterministic"),
    "contiguous": _apply_contiguous,
    "eager": _apply_eager,
}
