"""classify(): every family, every message era, the first error of a cascade, details."""

from __future__ import annotations

import pytest
import torch

from cudadiag import classify
from cudadiag.knowledge import FAMILIES, FAMILY_NAMES

DOCS = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
ASYNC_1X = (
    "CUDA kernel errors might be asynchronously reported at some other API call,so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1."
)
ASYNC_2X = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
DSA = "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
NLL_ASSERT = (
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: "
    "block: [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed."
)
OOM_2X = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total "
    "capacity of 14.57 GiB of which 1.58 GiB is free. Process 2493055 has 12.02 GiB memory in "
    "use. Of the allocated memory 10.21 GiB is allocated by PyTorch, and 2.50 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

# (text, family, sticky): written from PyTorch's own formats (CUDAException.cpp,
# CUDACachingAllocator.cpp, ATen/cuda/Exceptions.h, the CPU kernels' TORCH_CHECKs).
SAMPLES = [
    # device_assert, every era
    (f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC_1X}", "device_assert", True),
    (f"RuntimeError: CUDA error: device-side assert triggered\n{ASYNC_2X}.\n{DSA}",
     "device_assert", True),
    (f"torch.AcceleratorError: CUDA error: device-side assert triggered\nSearch for "
     f"`cudaErrorAssert' in {DOCS} for more information.\n{ASYNC_2X}\n{DSA}", "device_assert",
     True),
    ("RuntimeError: cuda runtime error (59) : device-side assert triggered at "
     "/pytorch/aten/src/THC/generic/THCTensorCopy.cpp:20", "device_assert", True),
    (f"{NLL_ASSERT}\nTraceback (most recent call last):\n  File \"train.py\", line 40, in "
     f"<module>\n    loss.item()\nRuntimeError: CUDA error: device-side assert triggered",
     "device_assert", True),
    ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1292: indexSelectLargeIndex: block: "
     "[222,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
     "device_assert", True),
    ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: "
     "[0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` "
     "failed.", "device_assert", True),
    ("../aten/src/ATen/native/cuda/Loss.cu:95: operator(): block: [0,0,0], thread: [1,0,0] "
     "Assertion `target_val >= zero && target_val <= one` failed.", "device_assert", True),
    # device assert first, then the cascade: the first error decides
    (f"{NLL_ASSERT}\nRuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
     "`cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
     "device_assert", True),
    (f"{NLL_ASSERT}\n[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463,"
     " OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 "
     "milliseconds before timing out.", "device_assert", True),
    # ROCm
    ("RuntimeError: HIP error: device-side assert triggered\nHIP kernel errors might be "
     "asynchronously reported at some other API call, so the stacktrace below might be "
     "incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3\nCompile with "
     "`TORCH_USE_HIP_DSA` to enable device-side assertions.", "device_assert", True),
    ("Memory access fault by GPU node-4 (Agent handle: 0x55d1c0e0) on address (nil). Reason: "
     "Page not present or supervisor privilege.\nAborted (core dumped)", "illegal_memory", True),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 63.98 GiB of which 1.02 GiB is free.", "oom", False),
    ("RuntimeError: HIP error: invalid device function\nHIP kernel errors might be "
     "asynchronously reported at some other API call, so the stacktrace below might be "
     "incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3", "op_unavailable", False),
    ("rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: "
     "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
     "op_unavailable", False),
    # illegal memory and the other sticky launch errors
    (f"RuntimeError: CUDA error: an illegal memory access was encountered\n{ASYNC_2X}\n{DSA}",
     "illegal_memory", True),
    (f"torch.AcceleratorError: CUDA error: unspecified launch failure\nSearch for "
     f"`cudaErrorLaunchFailure' in {DOCS} for more information.", "illegal_memory", True),
    ("RuntimeError: CUDA error: misaligned address\nCUDA kernel errors might be asynchronously "
     "reported at some other API call, so the stacktrace below might be incorrect.",
     "illegal_memory", True),
    ("RuntimeError: CUDA error: an illegal instruction was encountered", "illegal_memory", True),
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
     "illegal_memory", True),
    ("RuntimeError: CUDA error: the launch timed out and was terminated", "driver", True),
    # out of memory
    (OOM_2X, "oom", False),
    ("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total "
     "capacity; 6.12 GiB already allocated; 20.00 MiB free; 6.50 GiB reserved in total by "
     "PyTorch)", "oom", False),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
     "oom", False),
    (f"RuntimeError: CUDA error: out of memory\nFor more detailed error information, run with "
     f"CUDA_LOG_FILE=stderr\n{DSA}", "oom", False),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't "
     "allocate memory: you tried to allocate 137438953472 bytes. Error code 12 (Cannot "
     "allocate memory)", "oom", False),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: "
     "1.2 GB, max allowed: 18.13 GB).", "oom", False),
    ("RuntimeError: No executable batch size found, reached zero.", "oom", False),
    # operator / kernel unavailable
    (f"RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
     f"{ASYNC_2X}.\n{DSA}", "op_unavailable", False),
    ("UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with "
     "the current PyTorch installation.\nThe current PyTorch install supports CUDA "
     "capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.", "op_unavailable", False),
    ("NotImplementedError: Could not run 'torchvision::nms' with arguments from the 'CUDA' "
     "backend. This could be because the operator doesn't exist for this backend, or was "
     "omitted during the selective/custom build process (if using custom build).",
     "op_unavailable", False),
    ("RuntimeError: \"addmm_sparse_cuda\" not implemented for 'Half'", "op_unavailable", False),
    ("RuntimeError: operator torchvision::nms does not exist", "op_unavailable", False),
    ("NotImplementedError: The operator 'aten::_linalg_solve_ex.result' is not currently "
     "implemented for the MPS device.", "op_unavailable", False),
    ("ImportError: /usr/lib/python3/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-"
     "gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "op_unavailable", False),
    # CUDA graphs: the runtime's capture errors (cudaErrorStreamCapture*), cudagraph trees'
    ("torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing\n"
     "CUDA kernel errors might be asynchronously reported at some other API call, so the "
     "stacktrace below might be incorrect.", "cuda_graph", False),
    ("RuntimeError: CUDA error: capturing stream has unjoined work", "cuda_graph", False),
    ("RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by "
     "a subsequent run.", "cuda_graph", False),
    # device mismatch, old and new wording
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two "
     "devices, cuda:0 and cpu! (when checking argument for argument index in method "
     "wrapper__index_select)", "device_mismatch", False),
    ("RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, "
     "different from other tensors on cuda:0 (when checking argument in method "
     "wrapper_CUDA_addmm)", "device_mismatch", False),
    ("RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) "
     "should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
     "device_mismatch", False),
    ("RuntimeError: Expected object of device type cuda but got device type cpu for argument "
     "#1 'self' in call to _th_mm", "device_mismatch", False),
    ("TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
     "the tensor to host memory first.", "device_mismatch", False),
    # dtype mismatch
    ("RuntimeError: expected scalar type Long but found Int", "dtype_mismatch", False),
    ("RuntimeError: \"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for "
     "'Int'", "dtype_mismatch", False),
    ("RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != "
     "c10::Half", "dtype_mismatch", False),
    ("RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor)"
     " should be the same", "dtype_mismatch", False),
    ("RuntimeError: result type Float can't be cast to the desired output type Long",
     "dtype_mismatch", False),
    # shape mismatch
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)",
     "shape_mismatch", False),
    ("RuntimeError: The size of tensor a (3) must match the size of tensor b (4) at "
     "non-singleton dimension 1", "shape_mismatch", False),
    ("ValueError: Expected input batch_size (32) to match target batch_size (16).",
     "shape_mismatch", False),
    ("RuntimeError: shape '[2, 3]' is invalid for input of size 10", "shape_mismatch", False),
    ("RuntimeError: Given groups=1, weight of size [64, 3, 3, 3], expected input[1, 1, 28, 28] "
     "to have 3 channels, but got 1 channels instead", "shape_mismatch", False),
    # index out of bounds: the CPU twins
    ("IndexError: Target 4 is out of bounds.", "index_out_of_bounds", False),
    ("IndexError: index out of range in self", "index_out_of_bounds", False),
    ("IndexError: index 27 is out of bounds for dimension 0 with size 27",
     "index_out_of_bounds", False),
    ("RuntimeError: Assertion `cur_target >= 0 && cur_target < n_classes' failed.  at "
     "/pytorch/aten/src/THNN/generic/ClassNLLCriterion.c:94", "index_out_of_bounds", False),
    # library status
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( "
     "handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`", "library_status",
     False),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
     "`cublasCreate(handle)`", "library_status", False),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
     "passed in a non-contiguous input.", "library_status", False),
    ("RuntimeError: cuDNN Frontend error: No valid execution plans built.", "library_status",
     False),
    ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "library_status", False),
    # distributed
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
     "details), NCCL version 2.20.5\nncclSystemError: System call (e.g. socket, malloc) or "
     "external library call failed or device error.", "distributed", False),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, "
     "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 "
     "milliseconds before timing out.", "distributed", False),
    ("ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 2 "
     "'out of memory'", "distributed", False),
    # driver
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
     "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
     "driver", False),
    ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found "
     "version 12080). Please update your GPU driver by downloading and installing a new "
     "version from the URL: http://www.nvidia.com/Download/index.aspx", "driver", False),
    ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
     "driver", False),
    ("AssertionError: Torch not compiled with CUDA enabled", "driver", False),
    ("RuntimeError: CUDA error: invalid device ordinal\nGPU device may be out of range, do you "
     "have enough GPUs?", "driver", False),
    ("RuntimeError: No CUDA GPUs are available", "driver", False),
    # wrapped by libraries
    ("transformers: RuntimeError: Failed to import transformers.models.llama because of the "
     "following error (look up to see its traceback):\n/lib/flash_attn_2_cuda.so: undefined "
     "symbol: _ZN3c105ErrorC2E", "op_unavailable", False),
    ("lightning.fabric.utilities.exceptions: Error in training_step: RuntimeError: CUDA error: "
     "device-side assert triggered", "device_assert", True),
    ("accelerate: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.",
     "oom", False),
    # more wordings from the same sources
    ("RuntimeError: CUDA driver error: an illegal memory access was encountered",
     "illegal_memory", True),
    ("RuntimeError: Input, output and indices must be on the current device",
     "device_mismatch", False),
    ("RuntimeError: Expected tensor for 'out' to have the same device as tensor for argument "
     "#2 'mat1'; but device 1 does not equal 0 (while checking arguments for addmm)",
     "device_mismatch", False),
    ("RuntimeError: Expected tensor for argument #1 'indices' to have one of the following "
     "scalar types: Long, Int; but got torch.cuda.FloatTensor instead (while checking "
     "arguments for embedding)", "dtype_mismatch", False),
    ("RuntimeError: Expected target size [32, 10], got [32]", "shape_mismatch", False),
    ("IndexError: Dimension out of range (expected to be in range of [-1, 0], but got 1)",
     "shape_mismatch", False),
    ("RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
     "library_status", False),
    ("torch.distributed.DistNetworkError: Connection reset by peer", "distributed", False),
    ("torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: "
     "device >= 0 && device < num_gpus INTERNAL ASSERT FAILED", "driver", False),
    ("RuntimeError: Attempting to deserialize object on CUDA device 3 but "
     "torch.cuda.device_count() is 1.", "driver", False),
    ("RuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)",
     "op_unavailable", False),
    # nothing known
    ("KeyError: 'labels'", "unknown", False),
]


def _sample(fragment: str) -> str:
    (text,) = [text for text, _, _ in SAMPLES if fragment in text]
    return text


@pytest.mark.parametrize(("text", "family", "sticky"), SAMPLES, ids=range(len(SAMPLES)))
def test_sample_messages_get_their_family_and_stickiness(text: str, family: str, sticky: bool):
    d = classify(text)
    assert (d.family, d.sticky) == (family, sticky), d.evidence


def test_there_are_at_least_forty_samples_covering_every_family():
    assert len(SAMPLES) >= 40
    assert {family for _, family, _ in SAMPLES} == set(FAMILY_NAMES)


def test_every_family_has_checks_and_conclusions_to_avoid():
    for name in FAMILY_NAMES:
        assert FAMILIES[name].first_checks and FAMILIES[name].avoid


def test_assert_line_gives_expression_kernel_and_location():
    d = classify(f"{NLL_ASSERT}\nRuntimeError: CUDA error: device-side assert triggered")
    assert d.details["assertion"] == "t >= 0 && t < n_classes"
    assert d.details["kernel"] == "nll_loss_forward_reduce_cuda_kernel_2d"
    assert d.details["file"].endswith("Loss.cu") and d.details["line"] == "240"
    assert "t >= 0 && t < n_classes" in d.summary and "restart" in d.summary
    assert d.asynchronous


def test_allocator_oom_details_and_fragmentation_hint():
    d = classify(OOM_2X)
    assert d.details["oom_kind"] == "allocator"
    assert d.details["requested"] == "1.95 GiB"
    assert d.details["total"] == "14.57 GiB" and d.details["free"] == "1.58 GiB"
    assert d.details["allocated"] == "10.21 GiB"
    assert d.details["reserved_unallocated_bytes"] == int(2.5 * 2**30)
    assert d.details["fragmentation_likely"] is True
    assert "expandable_segments:True" in d.first_checks[0]


def test_small_reserved_memory_gives_no_fragmentation_hint():
    d = classify(OOM_2X.replace("2.50 GiB is reserved", "20.00 MiB is reserved"))
    assert "fragmentation_likely" not in d.details
    assert not any("expandable_segments" in c for c in d.first_checks)


def test_runtime_oom_is_told_apart_from_the_allocator():
    d = classify("RuntimeError: CUDA error: out of memory")
    assert d.family == "oom" and d.details["oom_kind"] == "runtime"
    assert "not PyTorch's allocator" in d.first_checks[0]


def test_device_mismatch_names_devices_and_op():
    old = classify(_sample("found at least two devices"))
    assert (old.details["device_a"], old.details["device_b"]) == ("cuda:0", "cpu")
    assert old.details["op"] == "wrapper__index_select"
    new = classify(_sample("but got mat1 is on cpu"))
    assert new.details["argument"] == "mat1"
    assert (new.details["device_a"], new.details["device_b"]) == ("cpu", "cuda:0")
    assert new.details["op"] == "wrapper_CUDA_addmm"


def test_op_unavailable_details():
    d = classify("RuntimeError: \"addmm_sparse_cuda\" not implemented for 'Half'")
    assert d.details["op"] == "addmm_sparse_cuda" and d.details["dtype"] == "Half"
    d = classify(_sample("Could not run 'torchvision::nms'"))
    assert d.details["op"] == "torchvision::nms" and d.details["dispatch_key"] == "CUDA"


def test_no_kernel_image_compares_capability_with_arch_list():
    warning = (_sample("sm_120 is not compatible")
               + "\nRuntimeError: CUDA error: no kernel image is available")
    d = classify(warning)
    assert d.details["capability"] == "sm_120"
    assert d.details["arch_list"].startswith("sm_50")
    assert "sm_120" in d.first_checks[0] and "arch list" in d.first_checks[0]


def test_no_kernel_image_takes_capability_from_the_environment():
    from cudadiag.incident import EnvInfo

    env = EnvInfo(capability="sm_120", arch_list=["sm_80", "sm_90"], device_in_arch_list=False)
    d = classify("CUDA error: no kernel image is available for execution on the device", env=env)
    assert d.details["capability"] == "sm_120" and d.details["arch_list"] == "sm_80 sm_90"


def test_a_cpu_only_build_points_at_the_build_not_at_the_driver():
    diagnosis = classify("AssertionError: Torch not compiled with CUDA enabled")
    assert diagnosis.summary.startswith("This PyTorch is a build without CUDA")
    assert "Install a CUDA build" in diagnosis.first_checks[1]
    assert not any("nvidia-smi" in check for check in diagnosis.first_checks)
    assert not any("Reinstalling PyTorch" in avoid for avoid in diagnosis.avoid)
    assert diagnosis.avoid[0].startswith("The driver or the GPU is at fault")


def test_cpu_index_errors_give_the_value():
    assert classify("IndexError: Target 4 is out of bounds.").details["value"] == "4"
    d = classify("index 27 is out of bounds for dimension 0 with size 27")
    assert (d.details["value"], d.details["size"]) == ("27", "27")


def test_hints_of_each_era_are_recorded():
    d = classify(_sample("torch.AcceleratorError: CUDA error: device-side"))
    assert d.details["cuda_error"] == "cudaErrorAssert"
    wrapped = classify("RuntimeError: wrapped\nSearch for `cudaErrorIllegalAddress' in x")
    assert wrapped.details["cuda_error"] == "cudaErrorIllegalAddress"
    assert (wrapped.family, wrapped.sticky) == ("illegal_memory", True)
    assert d.details["async_hint"] is True and d.details["dsa_hint"] is True
    assert classify(_sample("CUDA_LOG_FILE=stderr")).details["log_file_hint"] is True
    hip = classify(_sample("HIP error: device-side assert"))
    assert hip.details["blocking_hint"] == "AMD_SERIALIZE_KERNEL=3"
    assert hip.details["backend"] == "rocm"


def _raise_accelerator_error(message: str, code: int) -> BaseException:
    error = torch.AcceleratorError(message)
    error.error_code = code
    return error


@pytest.mark.parametrize(("code", "family", "sticky"), [
    (710, "device_assert", True), (700, "illegal_memory", True), (716, "illegal_memory", True),
    (719, "illegal_memory", True), (715, "illegal_memory", True), (714, "illegal_memory", True),
    (717, "illegal_memory", True), (718, "illegal_memory", True), (702, "driver", True),
    (2, "oom", False), (209, "op_unavailable", False), (35, "driver", False),
])
def test_accelerator_error_code_decides(code: int, family: str, sticky: bool):
    d = classify(_raise_accelerator_error("wrapped by a library: something failed", code))
    assert (d.family, d.sticky) == (family, sticky)
    assert d.details["error_code"] == code


def test_first_cause_of_an_exception_chain_wins():
    try:
        try:
            raise RuntimeError("CUDA error: device-side assert triggered")
        except RuntimeError:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                               "`cublasSgemm(handle)`") from None
    except RuntimeError as suppressed:
        assert classify(suppressed).family == "library_status"
    try:
        try:
            raise RuntimeError("CUDA error: device-side assert triggered")
        except RuntimeError:  # raised while handling: the implicit context is the first cause
            raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")  # noqa: B904
    except RuntimeError as during_handling:
        assert classify(during_handling).family == "device_assert"
    try:
        try:
            raise RuntimeError("CUDA error: device-side assert triggered")
        except RuntimeError as first:
            raise ValueError("NCCL error in: x.cpp:1, unhandled cuda error") from first
    except ValueError as chained:
        d = classify(chained)
        assert d.family == "device_assert" and d.sticky


def test_during_handling_text_first_cause_wins():
    text = (
        "Traceback (most recent call last):\n  File \"a.py\", line 3\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
        "`cublasCreate(handle)`"
    )
    assert classify(text).family == "oom"


def test_sticky_error_anywhere_in_the_text_flags_sticky():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered")
    d = classify(text)
    assert d.family == "oom" and d.sticky


def test_context_lines_count_before_the_exception():
    d = classify(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED"), context=NLL_ASSERT)
    assert d.family == "device_assert" and d.details["assertion"] == "t >= 0 && t < n_classes"


def test_unknown_input_never_raises():
    for value in ("", "   ", "x" * 100_000, ValueError()):
        assert classify(value).family == "unknown"


def test_a_message_asking_for_cuda_log_file_gets_that_first_check():
    d = classify(_sample("CUDA_LOG_FILE=stderr"))
    assert any("CUDA_LOG_FILE=stderr" in check for check in d.first_checks)


def test_the_hip_name_of_search_for_decides_a_reworded_hip_error():
    d = classify("torch.AcceleratorError: HIP error: reworded\nSearch for `hipErrorNoBinaryForGpu' "
                 "in https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html for "
                 "more information.")
    assert (d.family, d.details["backend"]) == ("op_unavailable", "rocm")


def test_a_shorter_message_inside_the_deciding_one_is_no_second_opinion():
    d = classify("RuntimeError: CUDA error: operation not permitted when stream is capturing")
    assert d.family == "cuda_graph"
    assert d.alternatives == [] and "not confident" not in d.summary


def test_the_same_shorter_message_elsewhere_on_the_line_still_is_one():
    d = classify("RuntimeError: CUDA error: operation not permitted when stream is capturing; "
                 "then CUDA error: operation not permitted")
    assert d.family == "cuda_graph"
    assert [a.family for a in d.alternatives] == ["driver"]
    assert d.summary.endswith("not confident: the same message also fits driver")
