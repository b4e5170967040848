"""The environment record of an incident, and backend detection.

Never initialises CUDA: device fields are read only when this process has initialised CUDA
itself; otherwise they say why they are unavailable. ROCm builds keep the `torch.cuda` API and
the `cuda` device name, so ROCm is recognised by `torch.version.hip` (method point 13).
"""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from cudadiag.i18n import msg
from cudadiag.incident import EnvInfo

# Binary extensions with their own compatibility matrix (method point 12), reported when loaded.
BINARY_EXTENSIONS = (
    "torchvision", "torchaudio", "torchtext", "triton", "xformers", "flash_attn", "apex",
    "bitsandbytes", "deepspeed", "transformer_engine", "torch_scatter", "torch_sparse",
    "torch_cluster", "mmcv", "detectron2", "vllm", "torchao", "cupy", "numba",
)
_GIT_CACHE_SECONDS = 30.0
_git_cache: dict[str, tuple[float, str | None, bool | None]] = {}


def collect_env() -> EnvInfo:
    """Return the environment of this process: versions, backend, device, code revision.

    Never raises and never initialises CUDA; fields that cannot be read say
    `unavailable: <reason>`. Takes well under 50 ms once torch is imported.
    """
    import torch

    info = EnvInfo(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        torch=torch.__version__,
        cuda=torch.version.cuda,
        hip=getattr(torch.version, "hip", None),
        cudnn=_cudnn_version(torch),
        arch_list=_arch_list(torch),
        extensions=loaded_extensions(),
    )
    info.backend = detect_backend(torch)
    info.cuda_initialized = _cuda_initialized(torch)
    _fill_device(info, torch)
    info.code_revision, info.code_dirty = code_revision(os.getcwd())
    return info


def detect_backend(torch_module: ModuleType | None = None) -> str:
    """Return `rocm`, `cuda`, `mps` or `cpu` for this process's PyTorch build, without
    initialising CUDA. A CUDA or ROCm build whose GPUs cannot be counted without initialising
    CUDA is reported by its build."""
    torch = torch_module or sys.modules.get("torch") or importlib.import_module("torch")
    if getattr(torch.version, "hip", None):
        return "rocm" if _gpu_count(torch) != 0 else "cpu"
    if torch.version.cuda:
        return "cuda" if _gpu_count(torch) != 0 else "cpu"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and _safe(mps.is_available, False):
        return "mps"
    return "cpu"


def loaded_extensions() -> dict[str, str]:
    """Return {name: version} of the binary extensions this process has imported."""
    import importlib.metadata  # not at import: `cudadiag run`'s own process never needs it

    found = {}
    for name in BINARY_EXTENSIONS:
        module = sys.modules.get(name)
        if module is None:
            continue
        version = getattr(module, "__version__", None)
        if not isinstance(version, str):
            try:
                version = importlib.metadata.version(name.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
        found[name] = version
    return found


def code_revision(directory: str) -> tuple[str | None, bool | None]:
    """Return (commit, dirty) of the git repository holding `directory`, or (None, None)
    outside a repository or without git. Cached for a few seconds per directory."""
    cached = _git_cache.get(directory)
    if cached and time.monotonic() - cached[0] < _GIT_CACHE_SECONDS:
        return cached[1], cached[2]
    commit = _git(directory, "rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git(directory, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    _git_cache[directory] = (time.monotonic(), commit, dirty)
    return commit, dirty


def _git(directory: str, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cudnn_version(torch: ModuleType) -> str | None:
    version = _safe(lambda: torch.backends.cudnn.version(), None)
    return str(version) if version else None


def _arch_list(torch: ModuleType) -> list[str]:
    # torch.cuda.get_arch_list() calls is_available(), which initialises the driver; the
    # compiled-in flags can be read without it.
    flags = _safe(lambda: torch._C._cuda_getArchFlags(), None)
    return flags.split() if isinstance(flags, str) else []


def _cuda_initialized(torch: ModuleType) -> bool:
    return bool(_safe(lambda: torch.cuda.is_initialized(), False))


def _gpu_count(torch: ModuleType) -> int | None:
    """GPU count through NVML/amdsmi (no CUDA initialisation), or the live count when CUDA is
    already initialised; None when it cannot be known without initialising CUDA."""
    if _cuda_initialized(torch):
        count: int | None = _safe(lambda: torch.cuda.device_count(), None)
        return count
    probe = getattr(
        torch.cuda, "_device_count_amdsmi" if torch.version.hip else "_device_count_nvml", None
    )
    count = _safe(probe, -1) if probe else -1
    return count if isinstance(count, int) and count >= 0 else None


def _fill_device(info: EnvInfo, torch: ModuleType) -> None:
    count = _gpu_count(torch)
    info.gpu_count = str(count) if count is not None else (
        msg("unavailable: cannot count GPUs without initialising CUDA") if info.cuda or info.hip
        else None
    )
    if info.backend not in ("cuda", "rocm"):
        return
    if not info.cuda_initialized:
        reason = msg("unavailable: CUDA not initialised in this process (cudadiag never "
                     "initialises it)")
        info.device_name = info.capability = reason
        return
    try:
        index = torch.cuda.current_device()
        info.device_name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        gcn_arch = getattr(torch.cuda.get_device_properties(index), "gcnArchName", "")
    except Exception as exc:  # a poisoned context raises here; the record must still be made
        info.device_name = info.capability = msg("unavailable: {error}",
                                                 error=(str(exc).splitlines() or [""])[0])
        return
    info.capability = gcn_arch.split(":")[0] if info.hip and gcn_arch else f"sm_{major}{minor}"
    if info.arch_list:
        info.device_in_arch_list = any(
            arch == info.capability or arch.endswith(f"_{major}{minor}")
            for arch in info.arch_list
        )


def _safe(fn: Callable[[], Any], default: Any) -> Any:
    """fn(), or `default` when it raises: a broken driver must not break the record."""
    try:
        return fn()
    except Exception:
        return default
