"""The status codes and exception classes with their family, stickiness and source, and the
lookups by name and by number."""

from __future__ import annotations

from dataclasses import dataclass

from cudadiag.error_codes.family_rules import (
    HIP_STICKY_SOURCE,
    HSA_STICKY,
    HSA_STICKY_SOURCE,
    code_family,
    exception_family,
)
from cudadiag.error_codes.nvidia_codes import NVIDIA_CODES
from cudadiag.error_codes.python_exceptions import PYTHON_EXCEPTIONS
from cudadiag.error_codes.rocm_codes import ROCM_CODES


@dataclass(frozen=True)
class ErrorCode:
    """One status code of a library of the GPU stack."""

    library: str
    """cuda_runtime, cuda_driver, hip, hsa, nccl, cublas, cusparse, cusolver, cufft, curand,
    nvrtc or cudnn."""
    code: int
    name: str
    text: str
    """The library's own message for it (its GetErrorString), else its doc comment."""
    family: str
    sticky: bool
    """True when the code leaves the process's GPU context unusable."""
    source: str
    sticky_source: str = ""


@dataclass(frozen=True)
class ExceptionClass:
    """One exception class of torch or triton."""

    name: str
    """Qualified: `torch._inductor.exc.InductorError`."""
    bases: tuple[str, ...]
    family: str
    wrapper: bool
    """True when the class only carries another error (its cause or its message decides)."""
    source: str


def _twin(name: str) -> str:
    return "cuda" + name[len("hip"):] if name.startswith("hip") else name


def _hip_sticky(cuda_sticky: dict[str, bool], name: str) -> bool:
    return cuda_sticky.get(_twin(name).lower(), False)


def _codes() -> tuple[ErrorCode, ...]:
    cuda_sticky = {name.lower(): sticky for library, _, name, _, sticky, _ in NVIDIA_CODES
                   if library == "cuda_runtime"}
    rows = [ErrorCode(library, code, name, text, code_family(library, name), sticky, source,
                      source if sticky else "")
            for library, code, name, text, sticky, source in NVIDIA_CODES]
    for library, code, name, text, _, source in ROCM_CODES:
        if library == "hip":
            sticky = _hip_sticky(cuda_sticky, name)
            sticky_source = HIP_STICKY_SOURCE if sticky else ""
        else:
            sticky = name in HSA_STICKY
            sticky_source = HSA_STICKY_SOURCE if sticky else ""
        rows.append(ErrorCode(library, code, name, text, code_family(library, name), sticky,
                              source, sticky_source))
    return tuple(rows)


def _exceptions() -> tuple[ExceptionClass, ...]:
    return tuple(ExceptionClass(name, bases, *exception_family(name),
                                f"{versions}: the class, by import")
                 for name, bases, versions in PYTHON_EXCEPTIONS)


ERROR_CODES = _codes()
EXCEPTION_CLASSES = _exceptions()
BY_NAME: dict[str, ErrorCode] = {}
for _row in ERROR_CODES:
    BY_NAME.setdefault(_row.name, _row)
RUNTIME_BY_CODE = {row.code: row for row in ERROR_CODES if row.library == "cuda_runtime"}
"""cudaError_t by number: what `torch.AcceleratorError.error_code` holds on CUDA (and, the
numbers being CUDA's, on ROCm builds, whose HIP codes mirror them)."""
EXCEPTIONS_BY_NAME = {row.name: row for row in EXCEPTION_CLASSES}


def runtime_code(number: int) -> ErrorCode | None:
    """Return the CUDA runtime error numbered `number`, or None."""
    return RUNTIME_BY_CODE.get(number)


def code_named(name: str) -> ErrorCode | None:
    """Return the status code called `name` in any library (`cudaErrorAssert`,
    `hipErrorNoBinaryForGpu`, `CUBLAS_STATUS_EXECUTION_FAILED`, `ncclSystemError`...), or None."""
    return BY_NAME.get(name)


def exception_class(qualified_name: str) -> ExceptionClass | None:
    """Return the torch/triton exception class called `qualified_name`, or None."""
    return EXCEPTIONS_BY_NAME.get(qualified_name)
