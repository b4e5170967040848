"""What runs with what (method point 12), as data with its sources: read by compat.py.

Collected in /work/corpus/compat.json (versions as printed by each source). Where a source
was only seen as a mirror or a translation, the row says so; keep each row's source when you
add one.
"""

from __future__ import annotations

from dataclasses import dataclass

NVIDIA_RELEASE_NOTES = (
    "https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html "
    "(Table 3: CUDA Toolkit and Corresponding Driver Versions)"
)
NVIDIA_MVC = (
    "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html "
    "(Table 1)"
)
TORCH_BUILD_SCRIPT = "pytorch/pytorch .ci/manywheel/build_cuda.sh"
RELEASE_MATRIX = (
    "pytorch/pytorch RELEASE.md 'Release Compatibility Matrix' (up to 2.3 upstream; 2.4 and "
    "later only seen as a translated copy)"
)
VISION_README = "pytorch/vision README.md (table up to torch 2.3 upstream; later via forks)"
AUDIO_MATRIX = "https://docs.pytorch.org/audio/2.11.0/installation.html (Compatibility Matrix)"
INSTALL_PAGE = "https://pytorch.org/get-started/locally/"
WHEEL_INDEX = "https://download.pytorch.org/whl/{variant}"


@dataclass(frozen=True)
class DriverMinimum:
    """The oldest driver a CUDA toolkit version's GA release shipped with."""

    cuda: str
    linux: str
    windows: str | None
    source: str = NVIDIA_RELEASE_NOTES


CUDA_MIN_DRIVER = (
    DriverMinimum("13.2", "595.45.04", None),
    DriverMinimum("13.1", "590.44.01", None),
    DriverMinimum("13.0", "580.65.06", None),
    DriverMinimum("12.9", "575.51.03", "576.02"),
    DriverMinimum("12.8", "570.26", "570.65"),
    DriverMinimum("12.6", "560.28.03", "560.76"),
    DriverMinimum("12.5", "555.42.02", "555.85"),
    DriverMinimum("12.4", "550.54.14", "551.61"),
    DriverMinimum("12.3", "545.23.06", "545.84"),
    DriverMinimum("12.2", "535.54.03", "536.25"),
    DriverMinimum("12.1", "530.30.02", "531.14"),
    DriverMinimum("12.0", "525.60.13", "527.41"),
    DriverMinimum("11.8", "520.61.05", "520.06"),
    DriverMinimum("11.7", "515.43.04", "516.01"),
    DriverMinimum("11.6", "510.39.01", "511.23"),
    DriverMinimum("11.5", "495.29.05", "496.04"),
    DriverMinimum("11.4", "470.42.01", "471.11"),
    DriverMinimum("11.3", "465.19.01", "465.89"),
    DriverMinimum("11.2", "460.27.03", "460.82"),
    DriverMinimum("11.1", "455.23", "456.38"),
    DriverMinimum("11.0", "450.51.05", "451.48"),
    DriverMinimum("10.2", "440.33", "441.22"),
)
"""Newest first. From CUDA 11 on, a build runs (with limited features: no PTX JIT of newer
PTX) on an older driver of the same major release: MINOR_VERSION_MINIMUM."""

MINOR_VERSION_MINIMUM = {
    13: DriverMinimum("13.x", "580", "580", NVIDIA_MVC),
    12: DriverMinimum("12.x", "525.60.13", "527.41", NVIDIA_MVC),
    11: DriverMinimum("11.x", "450.80.02", "452.39", NVIDIA_MVC),
}
"""The oldest driver of each CUDA major release under minor version compatibility."""

PTX_JIT_RULE = (
    "PTX (compute_XY) is compiled by the driver for any GPU of capability >= X.Y, but only by "
    "a driver at least as new as the CUDA that produced it (cudaErrorUnsupportedPtxVersion "
    "otherwise); 'a' targets (sm_90a) run on that capability only; 'f' targets (sm_100f) on "
    "the same major with an equal or higher minor; SASS (sm_XY) on the same major with an "
    "equal or higher minor. Sources: https://docs.nvidia.com/cuda/maxwell-compatibility-guide"
    ", https://developer.nvidia.com/blog/nvidia-blackwell-and-nvidia-cuda-12-9-introduce-"
    "family-specific-architecture-features, https://reviews.llvm.org/D155851"
)
ROCM_RULE = (
    "ROCm builds are fat binaries per gfx target with no forward compatibility: the device's "
    "gfx target must be in the build's arch list (PYTORCH_ROCM_ARCH). Source: "
    "pytorch/pytorch .ci/docker/manywheel/build.sh; compat.json rocm_gfx notes"
)


@dataclass(frozen=True)
class WheelVariant:
    """A PyTorch wheel index and the capabilities its builds carry (TORCH_CUDA_ARCH_LIST)."""

    variant: str
    cuda: str
    torch: str
    """The pip requirement of the releases this row describes."""
    archs: str
    source: str


WHEEL_VARIANTS = (
    WheelVariant("cu130", "13.0", "torch>=2.12", "7.5;8.0;8.6;9.0;10.0;12.0+PTX",
                 f"{RELEASE_MATRIX} 'PyTorch CUDA Support Matrix' (2.12-2.14, 13.0.2)"),
    WheelVariant("cu132", "13.2", "torch>=2.12", "7.5;8.0;8.6;9.0;10.0;12.0+PTX",
                 f"{RELEASE_MATRIX} 'PyTorch CUDA Support Matrix' (2.12-2.14, 13.2.1)"),
    WheelVariant("cu126", "12.6", "torch>=2.12", "5.0;6.0;7.0;7.5;8.0;8.6;9.0",
                 f"{RELEASE_MATRIX} 'PyTorch CUDA Support Matrix' (2.12-2.14, 12.6.3)"),
    WheelVariant("cu128", "12.8", "torch>=2.8,<2.11", "7.0;7.5;8.0;8.6;9.0;10.0;12.0",
                 f"{TORCH_BUILD_SCRIPT} @ 799d09f215740cc4fb78e0bd278dce469e33ddcb (2.9/2.10) "
                 "and @ 00c7a380b8369d08e02dd400aa76dc6c0738b589 (2.8)"),
    WheelVariant("cu118", "11.8", "torch>=2.2,<2.7", "3.7;5.0;6.0;7.0;7.5;8.0;8.6;9.0",
                 "pytorch/builder manywheel/build_cuda.sh (2.2-2.6 era)"),
)
"""Tried in this order when advising which build supports a capability."""


@dataclass(frozen=True)
class Companions:
    """The torchvision, torchaudio and triton releases built for one PyTorch minor release."""

    torch: str
    torchvision: str | None
    torchaudio: str | None
    """`2.11+`: built on PyTorch's stable ABI, runs with that release and later ones."""
    triton: str | None
    """The triton pip pin of the Linux wheels (None before 2.0, or not seen)."""
    source: str


TORCH_COMPANIONS = (
    Companions("2.14", None, "2.11+", None, RELEASE_MATRIX),
    Companions("2.13", "0.28", "2.11+", None, f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.12", "0.27", "2.11+", None, f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.11", "0.26", "2.11+", "3.6.0",
               f"{VISION_README}; {AUDIO_MATRIX}; https://github.com/Tavris1/"
               "ComfyUI-Easy-Install/issues/192 (torch 2.11.0 requires triton==3.6.0)"),
    Companions("2.10", "0.25", "2.10", "3.6.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.9", "0.24", "2.9", "3.5.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.8", "0.23", "2.8", "3.4.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.7", "0.22", "2.7", "3.3.1",
               f"{VISION_README}; {AUDIO_MATRIX}; torch 2.7.1 requires triton==3.3.1"),
    Companions("2.6", "0.21", "2.6", "3.2.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.5", "0.20", "2.5", "3.1.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.4", "0.19", "2.4", "3.0.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.3", "0.18", "2.3", "2.3.1",
               f"{VISION_README}; {AUDIO_MATRIX}; https://github.com/pytorch/pytorch/pull/"
               "127290 (triton 2.3.1 for torch 2.3.1; 2.3.0 for 2.3.0)"),
    Companions("2.2", "0.17", "2.2", "2.2.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.1", "0.16", "2.1", "2.1.0", f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("2.0", "0.15", "2.0", "2.0.0",
               f"{VISION_README}; {AUDIO_MATRIX}; https://github.com/S-LoRA/S-LoRA/issues/8"),
    Companions("1.13", "0.14", "0.13", None, f"{VISION_README}; {AUDIO_MATRIX}"),
    Companions("1.12", "0.13", "0.12", None, f"{VISION_README}; {AUDIO_MATRIX}"),
)
COMPANION_RULE = (
    "torchvision and (before 2.11) torchaudio binaries hold C++/CUDA extensions linked "
    "against exactly one PyTorch minor release ('TorchAudio and PyTorch from different "
    f"releases cannot be used together'). Sources: {AUDIO_MATRIX}; {VISION_README}"
)
EXTENSION_RULE = (
    "A compiled extension is linked against the PyTorch it was built with: another PyTorch "
    "release fails at import with 'undefined symbol' or 'operator ... does not exist'. "
    "Sources: torch/utils/cpp_extension.py; https://github.com/Dao-AILab/flash-attention/"
    "issues/931; https://data.pyg.org/whl/ (wheels tagged +pt<torch>cu<cuda>)"
)
COMPANION_PACKAGES = ("torchvision", "torchaudio", "triton", "pytorch-triton-rocm")
