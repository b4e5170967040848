"""The error-family table: what each family means, what to check first, what not to conclude.

This module is data. `classify.py` reads it; nothing else should hold diagnosis knowledge.

- `FAMILIES`: one entry per family (design.md's exact strings), in the user's words.
- `CUDA_ERRORS`: the CUDA/HIP runtime error codes cudadiag knows, with their
  `cudaGetErrorString` text, family and stickiness (NVIDIA's "the process must be terminated
  and relaunched" list: 700, 702, 710, 714-719).
- `SIGNATURES`: message patterns, each deciding a family. The earliest match in a text wins;
  at the same position the earlier entry in this list wins.
- `DETAIL_PATTERNS`: values pulled from the text once the family is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FAMILY_NAMES = (
    "device_assert",
    "illegal_memory",
    "oom",
    "op_unavailable",
    "device_mismatch",
    "dtype_mismatch",
    "shape_mismatch",
    "index_out_of_bounds",
    "library_status",
    "distributed",
    "driver",
    "unknown",
)


@dataclass(frozen=True)
class Family:
    """What a family of errors means for the user."""

    name: str
    title: str
    first_checks: tuple[str, ...]
    avoid: tuple[str, ...]
    asynchronous: bool = False
    """True when the error is reported after the fact, so the traceback line is only where it
    was noticed (guide point 3)."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "device_assert",
            "Device-side assertion",
            first_checks=(
                "Check the indices and targets given to the operator that failed: class "
                "targets must lie in [0, C) or equal ignore_index; embedding indices in "
                "[0, num_embeddings).",
                "Read the assertion line printed before the error (file, kernel, condition): "
                "it names the contract of the operator that was broken.",
                "Re-run the cell isolated with blocking launches (%cuda_isolate) to name the "
                "operator that really failed.",
                "Look at the batch in flight: the last incomplete batch, rare labels, empty or "
                "padded targets.",
            ),
            avoid=(
                "The GPU or the driver is broken.",
                "The line in the traceback (.item(), .cpu(), print) is the cause: it is only "
                "where the asynchronous error was noticed.",
                "A kernel restart fixes it: the restart clears the poisoned CUDA context, not "
                "the bad target or index.",
                "Widening the output layer or the embedding until the error goes away.",
            ),
            asynchronous=True,
        ),
        Family(
            "illegal_memory",
            "Illegal memory access on the device",
            first_checks=(
                "Re-run the cell isolated with blocking launches (%cuda_isolate) to name the "
                "kernel that faulted.",
                "Check sizes, indices and contiguity of the tensors given to custom kernels and "
                "binary extensions (flash-attn, xformers, apex, your own CUDA code).",
                "Turn optional extensions off one at a time and compare with a reference "
                "operator or the same operator on the CPU.",
                "Run compute-sanitizer --tool memcheck with PYTORCH_NO_CUDA_MEMORY_CACHING=1 "
                "(the caching allocator hides out-of-bounds accesses).",
            ),
            avoid=(
                "The GPU memory is faulty.",
                "It is an out-of-memory error.",
                "The operator in the traceback is the cause.",
                "Changing batch, precision and library at once: change one thing at a time.",
            ),
            asynchronous=True,
        ),
        Family(
            "oom",
            "Out of memory",
            first_checks=(
                "Check the shapes of this step: batch size, sequence length, image size; one "
                "outsized sample is enough.",
                "Check tensor lifetimes: losses summed without .item(), outputs kept in lists, "
                "the traceback of a caught exception pinning tensors.",
                "Check the process's memory: other processes on the GPU, memory reserved but "
                "unallocated (fragmentation), torch.cuda.memory_summary().",
            ),
            avoid=(
                "Every CUDA error means a lack of VRAM.",
                "A bigger GPU is needed, before measuring what the step really needs.",
                "Halving the batch size is the fix when one sample is outsized.",
            ),
        ),
        Family(
            "op_unavailable",
            "Operator or kernel unavailable",
            first_checks=(
                "Check versions: the PyTorch build (torch.version.cuda / torch.version.hip), "
                "the device's compute capability against the build's arch list.",
                "Check binary extensions (torchvision, xformers, flash-attn, ...) were built "
                "for this PyTorch and this CUDA or ROCm.",
                "Check the backend of the inputs: the operator may exist only for the CPU.",
                "Check the dtype: the operator may have no kernel for Half, BFloat16 or Int.",
            ),
            avoid=(
                "Reinstalling everything at random.",
                "Upgrading the driver without checking the build's CUDA version and arch list.",
                "The GPU is broken.",
            ),
        ),
        Family(
            "device_mismatch",
            "Tensors on different devices",
            first_checks=(
                "Check where the model sits (next(model.parameters()).device) and where each "
                "input of the operator was created.",
                "Look for tensors created inside forward() without device=, and buffers not "
                "registered with register_buffer (they do not move with .to()).",
                "Check the device of what the data loader yields.",
            ),
            avoid=(
                "Adding .to(device) copies everywhere without knowing where the stray tensor "
                "came from.",
                "Moving everything to the CPU to make it run.",
            ),
        ),
        Family(
            "dtype_mismatch",
            "Mismatched dtypes",
            first_checks=(
                "Check the dtype of each input of the operator: class targets must be "
                "torch.long; BCE and MSE targets floating point.",
                "Check autocast regions and .half() / .bfloat16() applied to parts of the model.",
                "Check the dtype produced by the data pipeline (numpy float64 becomes "
                "torch.float64).",
            ),
            avoid=(
                "Casting everything to float32 everywhere.",
                "Disabling mixed precision globally without finding the operator.",
            ),
        ),
        Family(
            "shape_mismatch",
            "Mismatched shapes",
            first_checks=(
                "Compare the shapes in the message with what the layer or loss expects.",
                "Check the last incomplete batch and variable sequence lengths.",
                "Check squeeze / unsqueeze / view / flatten before linear layers, and the "
                "target shape against the output shape for the loss.",
            ),
            avoid=(
                "Reshaping until it runs: view and reshape can silently mix samples.",
                "The data is corrupt.",
            ),
        ),
        Family(
            "index_out_of_bounds",
            "Index or target out of range",
            first_checks=(
                "Compare the value in the message with the size of the dimension.",
                "For class targets: a 1..C encoding instead of 0..C-1, an unexpected extra "
                "class, or ignore_index.",
                "For embeddings: indices against num_embeddings (vocabulary size, padding id).",
                "Check that the label mapping is a bijection onto range(C).",
            ),
            avoid=(
                "Widening the output layer or the embedding to make the error go away.",
                "On the GPU the same data only raises 'device-side assert triggered'; the CPU "
                "message is the clearer clue, not a different bug.",
            ),
        ),
        Family(
            "library_status",
            "CUDA library status (cuBLAS, cuDNN, ...)",
            first_checks=(
                "An earlier asynchronous error often surfaces as a library status: re-run the "
                "cell isolated with blocking launches (%cuda_isolate).",
                "CUBLAS_STATUS_NOT_INITIALIZED often means out of memory at handle creation, "
                "or an out-of-range embedding index just before.",
                "Check the layout and dtype of the inputs (contiguity; cuDNN NOT_SUPPORTED).",
                "Check the library versions shipped with the PyTorch build.",
            ),
            avoid=(
                "The library is broken.",
                "Reinstalling CUDA.",
                "Disabling cuDNN for good.",
            ),
            asynchronous=True,
        ),
        Family(
            "distributed",
            "Distributed / collective failure",
            first_checks=(
                "Find the first rank that failed and its own first error: the other ranks "
                "only time out waiting for it.",
                "Re-run with NCCL_DEBUG=INFO.",
                "Check that every rank runs the same collectives in the same order with the "
                "same shapes.",
                "Look for a CUDA error (out of memory, device assert) inside one rank before "
                "the collective.",
            ),
            avoid=(
                "The network is the cause.",
                "Raising the timeout fixes it.",
                "The rank that printed last is the culprit.",
            ),
        ),
        Family(
            "driver",
            "Driver or device initialisation",
            first_checks=(
                "Check that nvidia-smi (or rocm-smi) sees the GPU.",
                "Check the driver version against torch.version.cuda.",
                "Check CUDA_VISIBLE_DEVICES and the device index you ask for.",
                "For launch timeouts: a display watchdog on a GPU that also drives a screen.",
            ),
            avoid=(
                "Reinstalling PyTorch before checking the driver.",
                "The model code is wrong.",
            ),
        ),
        Family(
            "unknown",
            "Unrecognised error",
            first_checks=(
                "Find the first error in the output, not the last.",
                "Re-run the cell isolated with blocking launches (%cuda_isolate).",
                "Record versions and backend (cudadiag env).",
            ),
            avoid=("Concluding from the last message printed.",),
        ),
    )
}


@dataclass(frozen=True)
class CudaError:
    """One CUDA (or HIP) runtime error code."""

    code: int
    name: str
    text: str
    family: str
    sticky: bool = False
    distinctive: bool = False
    """True when the text alone (without `CUDA error:`) identifies the error, as in
    1.x's `cuda runtime error (59) : device-side assert triggered`."""
    hip_text: str | None = None


CUDA_ERRORS: tuple[CudaError, ...] = (
    CudaError(710, "cudaErrorAssert", "device-side assert triggered", "device_assert",
              sticky=True, distinctive=True),
    CudaError(700, "cudaErrorIllegalAddress", "an illegal memory access was encountered",
              "illegal_memory", sticky=True, distinctive=True),
    CudaError(702, "cudaErrorLaunchTimeout", "the launch timed out and was terminated",
              "driver", sticky=True, distinctive=True),
    CudaError(714, "cudaErrorHardwareStackError", "hardware stack error", "illegal_memory",
              sticky=True),
    CudaError(715, "cudaErrorIllegalInstruction", "an illegal instruction was encountered",
              "illegal_memory", sticky=True, distinctive=True),
    CudaError(716, "cudaErrorMisalignedAddress", "misaligned address", "illegal_memory",
              sticky=True),
    CudaError(717, "cudaErrorInvalidAddressSpace",
              "operation not supported on global/shared address space", "illegal_memory",
              sticky=True, distinctive=True),
    CudaError(718, "cudaErrorInvalidPc", "invalid program counter", "illegal_memory",
              sticky=True),
    CudaError(719, "cudaErrorLaunchFailure", "unspecified launch failure", "illegal_memory",
              sticky=True, distinctive=True),
    CudaError(2, "cudaErrorMemoryAllocation", "out of memory", "oom"),
    CudaError(209, "cudaErrorNoKernelImageForDevice",
              "no kernel image is available for execution on the device", "op_unavailable",
              distinctive=True),
    CudaError(98, "cudaErrorInvalidDeviceFunction", "invalid device function",
              "op_unavailable"),
    CudaError(222, "cudaErrorUnsupportedPtxVersion",
              "the provided PTX was compiled with an unsupported toolchain", "op_unavailable",
              distinctive=True),
    CudaError(801, "cudaErrorNotSupported", "operation not supported", "op_unavailable"),
    CudaError(35, "cudaErrorInsufficientDriver",
              "CUDA driver version is insufficient for CUDA runtime version", "driver",
              distinctive=True),
    CudaError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected", "driver",
              distinctive=True, hip_text="no ROCm-capable device is detected"),
    CudaError(101, "cudaErrorInvalidDevice", "invalid device ordinal", "driver"),
    CudaError(3, "cudaErrorInitializationError", "initialization error", "driver"),
    CudaError(46, "cudaErrorDevicesUnavailable",
              "CUDA-capable device(s) is/are busy or unavailable", "driver", distinctive=True),
    CudaError(804, "cudaErrorCompatNotSupportedOnDevice",
              "forward compatibility was attempted on non supported HW", "driver",
              distinctive=True),
    CudaError(999, "cudaErrorUnknown", "unknown error", "driver"),
)

CUDA_ERRORS_BY_CODE = {e.code: e for e in CUDA_ERRORS}
CUDA_ERRORS_BY_NAME = {e.name: e for e in CUDA_ERRORS}
CUDA_ERRORS_BY_NAME.update({"hip" + e.name[len("cuda"):]: e for e in CUDA_ERRORS})


@dataclass(frozen=True)
class Signature:
    """A message pattern that decides a family. Named groups become `details`."""

    family: str
    pattern: re.Pattern[str]
    sticky: bool = False
    fixed: dict[str, object] = field(default_factory=dict)
    """Details that the match implies (e.g. which kind of out-of-memory)."""
    required: str | None = None
    """A substring without which the pattern cannot match: skips patterns that do not start
    with a literal (and would scan long texts slowly) when it is absent."""


def _sig(family: str, pattern: str, *, sticky: bool = False, required: str | None = None,
         **fixed: object) -> Signature:
    return Signature(family, re.compile(pattern, re.IGNORECASE), sticky, dict(fixed), required)


def _runtime_error_signatures() -> list[Signature]:
    """`CUDA error: <text>` / `HIP error: <text>` for every known runtime error code."""
    signatures = []
    for err in CUDA_ERRORS:
        texts = [err.text] + ([err.hip_text] if err.hip_text else [])
        for text in texts:
            phrase = re.escape(text)
            prefix = r"(?:(?P<api>CUDA|HIP)(?: driver)? error: |cuda runtime error \(\d+\) : )"
            pattern = f"(?:{prefix}{phrase}|{phrase})" if err.distinctive else prefix + phrase
            fixed: dict[str, object] = {"error_code": err.code, "cuda_error": err.name}
            if err.family == "oom":
                fixed["oom_kind"] = "runtime"
            signatures.append(_sig(err.family, pattern, sticky=err.sticky, **fixed))
    return signatures


_ASSERT_LINE = (
    r"(?P<file>[^\s:]{1,256}\.(?:cu|cuh|hip)):(?P<line>\d+): (?P<kernel>[^\n]{0,256}?): "
    r"block: \[(?P<block>[\d, ]+)\], thread: \[(?P<thread>[\d, ]+)\] "
    r"Assertion `(?P<assertion>[^\n]+?)` failed"
)
_SIZE = r"[\d.]{1,12} ?[KMGTP]?i?B"

SIGNATURES: tuple[Signature, ...] = (
    # --- device assertions: the kernel's printf line comes before the exception
    _sig("device_assert", _ASSERT_LINE, sticky=True, required="Assertion `"),
    _sig("device_assert",
         r"(?P<file>[^\s:]{1,256}):(?P<line>\d+): (?P<kernel>[^\n]{0,256}?): "
         r"Device-side assertion `(?P<assertion>[^\n]+?)' failed", sticky=True, api="HIP",
         required="Device-side assertion"),
    _sig("device_assert",
         r"HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception\. "
         r"code: 0x1016", sticky=True, api="HIP"),
    _sig("illegal_memory",
         r"Memory access fault by GPU node-(?P<gpu_node>\d+)[^\n]*", sticky=True, api="HIP"),
    _sig("illegal_memory", r"HSA_STATUS_ERROR_EXCEPTION", sticky=True, api="HIP"),
    _sig("illegal_memory", r"CUDA_ERROR_(?:ILLEGAL_ADDRESS|LAUNCH_FAILED|MISALIGNED_ADDRESS)",
         sticky=True),
    _sig("device_assert", r"CUDA_ERROR_ASSERT", sticky=True),
    # --- distributed (before the CUDA texts NCCL quotes inside its own message)
    _sig("distributed",
         r"Watchdog caught collective operation timeout: (?P<work>Work\w+\([^)]*\))"),
    _sig("distributed", r"NCCL error in: (?P<location>[^,\n]+), (?P<reason>[^\n(]+)"),
    _sig("distributed", r"\b(?P<nccl_status>nccl(?:UnhandledCudaError|SystemError|"
                        r"InternalError|InvalidUsage|InvalidArgument|RemoteError))\b"),
    _sig("distributed", r"NCCL communicator was aborted"),
    _sig("distributed", r"Some NCCL operations have failed or timed out"),
    _sig("distributed", r"DistBackendError|DistNetworkError|DistStoreError"),
    _sig("distributed", r"ChildFailedError"),
    # --- out of memory
    _sig("oom", rf"(?P<api>CUDA|HIP) out of memory\. Tried to allocate (?P<requested>{_SIZE})",
         oom_kind="allocator"),
    _sig("oom", r"(?P<api>CUDA|HIP) out of memory", oom_kind="allocator"),
    _sig("oom", r"\bOutOfMemoryError\b", oom_kind="allocator"),
    _sig("oom", r"MPS backend out of memory", oom_kind="mps"),
    _sig("oom", r"DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                r"(?P<requested_bytes>\d+) bytes", oom_kind="cpu"),
    _sig("oom", r"(?P<status>CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED)",
         oom_kind="library"),
    _sig("oom", r"Cuda failure 2 'out of memory'", oom_kind="runtime"),
    _sig("oom", r"No executable batch size found", oom_kind="allocator"),
    # --- operator / kernel unavailable
    _sig("dtype_mismatch",
         r"\"(?P<op>\w*nll_loss\w*)\" not implemented for '(?P<dtype>\w+)'"),
    _sig("op_unavailable", r"\"(?P<op>[\w:.]+)\" not implemented for '(?P<dtype>\w+)'"),
    _sig("op_unavailable",
         r"Could not run '(?P<op>[^']+)' with arguments from the '(?P<dispatch_key>[^']+)' "
         r"backend"),
    _sig("op_unavailable", r"operator (?P<op>\w+::\w+) does not exist"),
    _sig("op_unavailable",
         r"The operator '(?P<op>[^']+)' is not currently implemented for the MPS device",
         dispatch_key="MPS"),
    _sig("op_unavailable",
         r"with CUDA capability (?P<capability>sm_\d+\w*) is not compatible with the current "
         r"PyTorch installation"),
    _sig("op_unavailable", r"Unable to find code object for all current devices", api="HIP"),
    _sig("op_unavailable", r"(?P<status>CUBLAS_STATUS_ARCH_MISMATCH|CUDNN_STATUS_ARCH_MISMATCH)"),
    _sig("op_unavailable", r"undefined symbol: (?P<symbol>\S+)"),
    _sig("op_unavailable",
         r"(?P<library>lib[\w.\-]{1,200}\.so[.\d]*): cannot open shared object file",
         required="cannot open shared object file"),
    _sig("op_unavailable", r"Could not load library (?P<library>\S+)"),
    _sig("op_unavailable", r"No available kernel\. +Aborting execution"),
    _sig("op_unavailable", r"FlashAttention only supports [^\n]+"),
    _sig("op_unavailable", r"Unsupported gpu architecture '(?P<capability>compute_\d+\w*)'"),
    _sig("op_unavailable", r"invalid value for --gpu-architecture"),
    _sig("op_unavailable", r"cuDNN version incompatibility"),
    # --- device / dtype mismatch
    _sig("device_mismatch", r"Expected all tensors to be on the same device"),
    _sig("device_mismatch",
         r"Expected object of device type (?P<device_a>\w+) but got device type "
         r"(?P<device_b>\w+) for argument #\d+ '(?P<argument>\w+)'(?: in call to (?P<op>\w+))?"),
    _sig("device_mismatch",
         r"Input type \((?P<device_a>torch\.cuda\.\w+)\) and (?:weight|bias) type "
         r"\((?P<device_b>torch\.(?!cuda\.)\w+)\) should be the same"),
    _sig("device_mismatch",
         r"Input type \((?P<device_a>torch\.(?!cuda\.)\w+)\) and (?:weight|bias) type "
         r"\((?P<device_b>torch\.cuda\.\w+)\) should be the same"),
    _sig("device_mismatch",
         r"indices should be either on cpu or on the same device as the indexed tensor"),
    _sig("device_mismatch",
         r"Tensor for argument #\d+ '(?P<argument>\w+)' is on (?P<device_a>\w+), but expected "
         r"it to be on (?P<device_b>\w+)"),
    _sig("device_mismatch", r"Expected a '(?P<device_a>\w+)' device type for generator but "
                            r"found '(?P<device_b>\w+)'"),
    _sig("device_mismatch",
         r"can't convert (?P<device_a>[\w:]+) device type tensor to numpy"),
    _sig("device_mismatch", r"must be on the current device"),
    _sig("device_mismatch", r"to have the same device as tensor for argument"),
    _sig("dtype_mismatch", r"expected scalar type (?P<expected>\w+) but found (?P<found>\w+)"),
    _sig("dtype_mismatch",
         r"Expected object of scalar type (?P<expected>\w+) but got scalar type (?P<found>\w+)"),
    _sig("dtype_mismatch",
         r"expected (?:m1|mat1) and (?:m2|mat2) to have the same dtype, but got: "
         r"(?P<found>\S+) != (?P<expected>\S+)"),
    _sig("dtype_mismatch", r"\b\w{1,30} and \w{1,30} must have the same dtype",
         required="must have the same dtype"),
    _sig("dtype_mismatch",
         r"Input type \((?P<found>[\w.:]+)\) and (?:weight|bias) type \((?P<expected>[\w.:]+)\) "
         r"should be the same"),
    _sig("dtype_mismatch",
         r"result type (?P<found>\w+) can't be cast to the desired output type "
         r"(?P<expected>\w+)"),
    _sig("dtype_mismatch", r"Found dtype (?P<found>\w+) but expected (?P<expected>\w+)"),
    _sig("dtype_mismatch",
         r"Expected floating point type for target with class probabilities, got "
         r"(?P<found>\w+)"),
    _sig("dtype_mismatch", r"Index put requires the source and destination dtypes match"),
    _sig("dtype_mismatch",
         r"Expected tensor for argument #\d+ '(?P<argument>\w+)' to have one of the following "
         r"scalar types"),
    # --- shape mismatch
    _sig("shape_mismatch",
         r"mat1 and mat2 shapes cannot be multiplied \((?P<shape_a>\d+x\d+) and "
         r"(?P<shape_b>\d+x\d+)\)"),
    _sig("shape_mismatch",
         r"The size of tensor a \((?P<size_a>\d+)\) must match the size of tensor b "
         r"\((?P<size_b>\d+)\) at non-singleton dimension (?P<dim>\d+)"),
    _sig("shape_mismatch",
         r"Expected input batch_size \((?P<size_a>\d+)\) to match target batch_size "
         r"\((?P<size_b>\d+)\)"),
    _sig("shape_mismatch", r"shape '(?P<shape>\[[^\]]*\])' is invalid for input of size "
                           r"(?P<numel>\d+)"),
    _sig("shape_mismatch", r"size mismatch, m1: \[[^\]]*\], m2: \[[^\]]*\]"),
    _sig("shape_mismatch", r"Sizes of tensors must match except in dimension \d+"),
    _sig("shape_mismatch", r"Given groups=\d+, weight of size \[[^\]]*\], expected input"
                           r"\[[^\]]*\] to have \d+ channels"),
    _sig("shape_mismatch", r"Using a target size \(torch\.Size\(\[[^\]]*\]\)\) that is "
                           r"different to the input size"),
    _sig("shape_mismatch", r"Target size \(torch\.Size\(\[[^\]]*\]\)\) must be the same as "
                           r"input size"),
    _sig("shape_mismatch", r"0D or 1D target tensor expected, multi-target not supported"),
    _sig("shape_mismatch", r"only batches of spatial targets supported"),
    _sig("shape_mismatch", r"Expected target size (?P<shape>\[[^\]]*\]), got"),
    _sig("shape_mismatch", r"Dimension out of range \(expected to be in range of"),
    # --- index out of bounds (CPU twins of device asserts)
    _sig("index_out_of_bounds", r"Target (?P<value>-?\d+) is out of bounds"),
    _sig("index_out_of_bounds", r"index out of range in self"),
    _sig("index_out_of_bounds",
         r"index (?P<value>-?\d+) is out of bounds for (?:dimension|axis) (?P<dim>\d+) with "
         r"size (?P<size>\d+)"),
    _sig("index_out_of_bounds", r"Assertion `cur_target >= 0 && cur_target < n_classes' failed"),
    _sig("index_out_of_bounds",
         r"index (?P<value>-?\d+) out of range for tensor of size (?P<shape>\[[^\]]*\])"),
    _sig("index_out_of_bounds", r"out of range: tried to access index (?P<value>-?\d+) on a "
                                r"tensor of (?P<size>\d+) elements"),
    _sig("index_out_of_bounds", r"Index \d+ of input takes value (?P<value>-?\d+) which is not "
                                r"in the valid range \[0, (?P<size>\d+)\)"),
    _sig("index_out_of_bounds", r"\btarget out of range\b"),
    # --- library status with no further cause
    _sig("library_status",
         r"(?P<status>CUBLAS_STATUS_\w+)(?: when calling `(?P<call>[^`(]+))?"),
    _sig("library_status", r"(?P<status>CUDNN_STATUS_\w+)"),
    _sig("library_status", r"cuDNN Frontend error: (?P<reason>[^\n]+)"),
    _sig("library_status", r"Unable to find a valid cuDNN algorithm to run convolution"),
    _sig("library_status", r"GET was unable to find an engine to execute this computation"),
    _sig("library_status", r"(?P<status>CUSOLVER_STATUS_\w+|CUSPARSE_STATUS_\w+|CUFFT_\w+)"),
    _sig("library_status",
         r"(?P<status>HIPBLAS_STATUS_\w+|rocblas_status_\w+|miopenStatus\w+|HIPFFT_\w+)",
         api="HIP"),
    # --- driver and initialisation
    _sig("driver", r"Found no NVIDIA driver on your system"),
    _sig("driver", r"The NVIDIA driver on your system is too old \(found version "
                   r"(?P<driver_version>\d+)\)"),
    _sig("driver", r"Torch not compiled with CUDA enabled"),
    _sig("driver", r"No CUDA GPUs are available"),
    _sig("driver", r"CUDA unknown error - this may be due to an incorrectly set up environment"),
    _sig("driver", r"Attempting to deserialize object on a CUDA device but "
                   r"torch\.cuda\.is_available\(\) is False"),
    _sig("driver", r"Cannot re-initialize CUDA in forked subprocess"),
    _sig("driver", r"CUDA call failed lazily at initialization"),
    _sig("driver", r"Attempting to deserialize object on CUDA device \d+ but "
                   r"torch\.cuda\.device_count\(\) is \d+"),
    _sig("driver", r"CUDA initialization: (?P<reason>[^\n]+)"),
    _sig("driver", r"NVIDIA-SMI has failed"),
    *_runtime_error_signatures(),
)

# Values looked for anywhere in the text once a family has been decided.
DETAIL_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "device_assert": (re.compile(_ASSERT_LINE),),
    "oom": tuple(
        re.compile(p)
        for p in (
            rf"Tried to allocate (?P<requested>{_SIZE})",
            rf"GPU (?P<device>\d+) has a total capacity of (?P<total>{_SIZE}) of which "
            rf"(?P<free>{_SIZE}) is free",
            rf"Of the allocated memory (?P<allocated>{_SIZE}) is allocated by PyTorch",
            rf"and (?P<reserved_unallocated>{_SIZE}) is reserved by PyTorch but unallocated",
            rf"Process (?P<process>\d+) has (?P<process_in_use>{_SIZE}) memory in use",
            # 1.x: (GPU 0; 7.93 GiB total capacity; 6.12 GiB already allocated; 20.00 MiB free;
            #       6.50 GiB reserved in total by PyTorch)
            rf"\(GPU (?P<device>\d+); (?P<total>{_SIZE}) total capacity; "
            rf"(?P<allocated>{_SIZE}) already allocated; (?P<free>{_SIZE}) free",
            rf"(?P<reserved>{_SIZE}) reserved in total by PyTorch",
        )
    ),
    "device_mismatch": tuple(
        re.compile(p)
        for p in (
            r"found at least two devices, (?P<device_a>[\w:]+) and (?P<device_b>[\w:]+)!",
            r"but got (?P<argument>\w+) is on (?P<device_a>[\w:]+), different from other "
            r"tensors on (?P<device_b>[\w:]+)",
            r"\(when checking argument(?: for argument (?P<argument>\w+))? in method "
            r"(?P<op>\w+)\)",
        )
    ),
    "op_unavailable": tuple(
        re.compile(p)
        for p in (
            r"with CUDA capability (?P<capability>sm_\d+\w*)",
            r"supports CUDA capabilities (?P<arch_list>sm_\w+(?: sm_\w+)*)",
        )
    ),
}

# Lines a device prints on its own (kernel printf, ROCm runtime) that never reach the exception.
DEVICE_MESSAGE = re.compile(
    r"Assertion `|Device-side assertion|Memory access fault by GPU|HSA_STATUS_ERROR"
)

# Hints that say something about how the message was produced, not which family it is.
HINT_PATTERNS: dict[str, re.Pattern[str]] = {
    "async_hint": re.compile(r"might be asynchronously reported at some other API call"),
    "blocking_hint": re.compile(r"For debugging consider passing "
                                r"(?P<blocking_hint>\w+=\d)"),
    "dsa_hint": re.compile(r"Compile with `TORCH_USE_(?:CUDA|HIP)_DSA`"),
    "log_file_hint": re.compile(r"run with CUDA_LOG_FILE=stderr"),
    "cuda_error_name": re.compile(r"Search for `(?P<cuda_error_name>(?:cuda|hip)Error\w+)'"),
}

# Fragmentation is likely when the allocator holds, reserved but unused, at least this share
# of what was asked for: the memory exists but not as one block.
FRAGMENTATION_RATIO = 1.0
FRAGMENTATION_CHECK = (
    "Memory reserved by PyTorch but unallocated ({reserved_unallocated}) is at least what was "
    "requested ({requested}): fragmentation is likely; try "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
)
RUNTIME_OOM_CHECK = (
    "This is CUDA's own out-of-memory (context creation, cuBLAS/cuDNN workspaces, NCCL, an "
    "extension), not PyTorch's allocator: check other processes on the GPU and memory held "
    "outside PyTorch."
)
ARCH_CHECK = (
    "The device's capability {capability} is not in the build's arch list ({arch_list}): "
    "install a PyTorch build that supports it."
)
