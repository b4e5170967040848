"""Which family each status code and exception class belongs to: ordered rules, the first that
matches a row's library and name decides. The family names are knowledge.FAMILY_NAMES's
(tests/test_error_codes.py checks every row gets one)."""

from __future__ import annotations

import re

_RUNTIMES = ("cuda_runtime", "cuda_driver", "hip")

CODE_RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    # (libraries, name pattern, family); a name matches when the pattern is found in it
    (_RUNTIMES, r"^(?:cuda|hip)(?:Success|ErrorNotReady)$|^CUDA_(?:SUCCESS|ERROR_NOT_READY)$",
     "unknown"),
    (_RUNTIMES, r"Assert|ASSERT", "device_assert"),
    (_RUNTIMES, r"StreamCapture|CapturedEvent|GraphExecUpdate|STREAM_CAPTURE|CAPTURED_EVENT"
                r"|GRAPH_EXEC_UPDATE", "cuda_graph"),
    (_RUNTIMES, r"MemoryAllocation|OutOfMemory|OUT_OF_MEMORY", "oom"),
    (_RUNTIMES, r"IllegalAddress|LaunchFailure|HardwareStackError|IllegalInstruction"
                r"|MisalignedAddress|InvalidAddressSpace|InvalidPc|Contained|TensorMemoryLeak"
                r"|ILLEGAL_ADDRESS|LAUNCH_FAILED|HARDWARE_STACK_ERROR|ILLEGAL_INSTRUCTION"
                r"|MISALIGNED_ADDRESS|INVALID_ADDRESS_SPACE|INVALID_PC|CONTAINED"
                r"|TENSOR_MEMORY_LEAK", "illegal_memory"),
    (_RUNTIMES, r"NoKernelImage|InvalidDeviceFunction|NoBinaryForGpu|Ptx|PTX|JitCompiler"
                r"|JIT_COMPILER|InvalidKernelImage|InvalidImage|INVALID_IMAGE|InvalidKernelFile"
                r"|NO_BINARY_FOR_GPU|NotSupported$|NOT_SUPPORTED$|LaunchOutOfResources"
                r"|LAUNCH_OUT_OF_RESOURCES|SharedObject|SHARED_OBJECT|FunctionNotLoaded"
                r"|FUNCTION_NOT_LOADED|UnsupportedExecAffinity|UNSUPPORTED_EXEC_AFFINITY",
     "op_unavailable"),
    (_RUNTIMES, r"Driver|DRIVER|NoDevice|NO_DEVICE|InvalidDevice$|INVALID_DEVICE$|Initiali"
                r"|INITIALI|Deinitialized|DEINITIALIZED|DevicesUnavailable|DeviceUnavailable"
                r"|DEVICE_UNAVAILABLE|DevicesUnavailable|Compat|COMPAT|SystemNotReady"
                r"|SYSTEM_NOT_READY|StubLibrary|STUB_LIBRARY|Unknown$|UNKNOWN$|LaunchTimeout"
                r"|LaunchTimeOut|LAUNCH_TIMEOUT|Ecc|ECC|Nvlink|NVLINK|Mps|MPS|NotPermitted"
                r"|NOT_PERMITTED|DeviceNotLicensed|DEVICE_NOT_LICENSED|ExternalDevice"
                r"|EXTERNAL_DEVICE|DeviceUninitialized|DEVICE_UNINITIALIZED|ProfilerDisabled"
                r"|InsufficientDriver|CdpVersion|CDP_VERSION|Timeout$|TIMEOUT$", "driver"),
    (_RUNTIMES, r"", "unknown"),
    (("nccl",), r"Success$|InProgress$|NumResults$", "unknown"),
    (("nccl",), r"", "distributed"),
    (("cublas", "cusparse", "cusolver", "cufft", "curand", "nvrtc", "cudnn"),
     r"SUCCESS$|_SUCCESS_", "unknown"),
    (("cublas", "cusparse", "cusolver", "cufft", "curand", "nvrtc", "cudnn"),
     r"ALLOC|OUT_OF_MEMORY", "oom"),
    (("cublas", "cusparse", "cusolver", "cufft", "curand", "cudnn"), r"ARCH_MISMATCH",
     "op_unavailable"),
    (("cublas", "cusparse", "cusolver", "cufft", "curand", "nvrtc", "cudnn"), r"",
     "library_status"),
    (("hsa",), r"HSA_STATUS_SUCCESS|HSA_STATUS_INFO|CU_MASK_REDUCED", "unknown"),
    (("hsa",), r"MEMORY_APERTURE_VIOLATION|MEMORY_FAULT|ILLEGAL_INSTRUCTION|_EXCEPTION$"
               r"|ERROR_FATAL", "illegal_memory"),
    (("hsa",), r"INVALID_ISA|INVALID_CODE_OBJECT|OUT_OF_REGISTERS", "op_unavailable"),
    (("hsa",), r"OUT_OF_RESOURCES", "oom"),
    (("hsa",), r"", "driver"),
)

HSA_STICKY = frozenset({
    # Errors of a queue: ROCr reports them to the queue's callback, whose default (the HIP
    # runtime's, rocdevice.cpp `Device::callbackQueue`) aborts the process
    # (ROCm/ROCR-Runtime hsa.h: HSA_STATUS_ERROR_FATAL "may require process termination")
    "HSA_STATUS_ERROR_EXCEPTION", "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    "HSA_STATUS_ERROR_MEMORY_FAULT", "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION",
    "HSA_STATUS_ERROR_FATAL",
})
HSA_STICKY_SOURCE = ("ROCm/ROCR-Runtime hsa.h (HSA_STATUS_ERROR_FATAL: \"may require process "
                     "termination\"); queue errors abort in HIP's Device::callbackQueue")
HIP_STICKY_SOURCE = "its CUDA twin's doc comment in driver_types.h (HIP follows CUDA's semantics)"

EXCEPTION_RULES: tuple[tuple[str, str, bool], ...] = (
    # (pattern on the qualified class name, family, wrapper): a wrapper only carries another
    # error (the chain's cause or the message it quotes decides); the first match wins
    (r"OutOfMemoryError$", "oom", False),
    (r"^torch\._inductor\.exc\.(?:InductorError|LoweringException|SubgraphLoweringException)$"
     r"|^torch\._dynamo\.exc\.(?:BackendCompilerFailed|TorchRuntimeError|InternalTorchDynamo"
     r"Error|ShortenTraceback)$", "unknown", True),
    (r"TritonMissing$|GPUTooOldForTriton$|TritonUnavailableError$|InvalidCxxCompiler$"
     r"|CppCompileError$|CUDACompileError$|XPUCompileError$|PTXASError$|OutOfResources$"
     r"|MissingOperatorWith(?:out)?Decomp$|InvalidBackend$", "op_unavailable", False),
    # Triton's front end could not turn the kernel's source into IR for this target: every
    # error while visiting the kernel's AST is re-raised as CompilationError with the source
    # line (triton/compiler/code_generator.py CodeGenerator.visit; errors.py), as an
    # unsupported construct or a failed static_assert are (its subclasses)
    (r"^triton\.compiler\.errors\.(?:CompilationError|CompileTimeAssertionFailure"
     r"|UnsupportedLanguageConstruct)$", "op_unavailable", False),
    (r"^torch\.cuda\.DeferredCudaCallError$", "driver", False),
    # torchrun's report of a child that died, and the collectives' errors that carry NCCL's
    (r"^torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError$", "unknown",
     True),
    (r"^torch\.distributed\.Dist(?:Backend|Network|Store)Error$", "distributed", True),
    (r"^torch\.distributed\.", "distributed", False),
    (r"^torch\.AcceleratorError$|^torch\.cuda\.CudaError$", "unknown", True),
    (r"", "unknown", False),
)
"""`AcceleratorError` is a wrapper: its `error_code` (or the text it carries) decides."""


def code_family(library: str, name: str) -> str:
    """Return the family of status code `name` of `library` (the first rule that matches).
    Raises LookupError when no rule covers the library."""
    for libraries, pattern, family in CODE_RULES:
        if library in libraries and re.search(pattern, name):
            return family
    raise LookupError(f"no family rule for library {library!r}")


def exception_family(qualified_name: str) -> tuple[str, bool]:
    """Return (family, wrapper) for an exception class named `qualified_name`."""
    for pattern, family, wrapper in EXCEPTION_RULES:
        if re.search(pattern, qualified_name):
            return family, wrapper
    raise LookupError(qualified_name)
