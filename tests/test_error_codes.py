"""The error tables of cudadiag.error_codes: complete, each row with its family and source, the
committed ones equal to what the headers on this disk give, and classify reading them first
(an exception's error_code, a status name) before the message patterns."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from cudadiag import classify
from cudadiag.error_codes import table
from cudadiag.knowledge import FAMILY_NAMES

SCRIPT = Path(__file__).parent.parent / "scripts" / "make_error_tables.py"
LIBRARIES = ("cuda_runtime", "cuda_driver", "hip", "hsa", "nccl", "cublas", "cusparse",
             "cusolver", "cufft", "curand", "nvrtc", "cudnn")
TEXTLESS = {"cusolver", "cufft", "nvrtc"}
"""Their headers document no member and their libraries have no GetErrorString (NVRTC's
returns the name)."""
MINIMUM_ROWS = {"cuda_runtime": 120, "cuda_driver": 90, "hip": 70, "hsa": 35, "nccl": 9,
                "cublas": 10, "cusparse": 10, "cusolver": 20, "cufft": 15, "curand": 12,
                "nvrtc": 15, "cudnn": 50}
"""About the size of each enum in the headers the tables came from (CUDA 13.0, cuDNN 9, ROCm
6.2): a table far smaller lost rows."""


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_error_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_error_tables"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("library", LIBRARIES)
def test_every_code_of_each_enum_has_a_family_and_a_source(library):
    rows = [r for r in table.ERROR_CODES if r.library == library]
    assert len(rows) >= MINIMUM_ROWS[library]
    for row in rows:
        assert row.family in FAMILY_NAMES, row.name
        assert row.source and row.name, row.name
        assert row.text or library in TEXTLESS, row.name
        assert not row.sticky or row.sticky_source, row.name
    assert len({r.name for r in rows}) == len(rows)


def test_stickiness_is_the_vendors_the_process_must_be_terminated_and_relaunched():
    sticky = {r.name for r in table.ERROR_CODES if r.library == "cuda_runtime" and r.sticky}
    assert {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorAssert",
            "cudaErrorMisalignedAddress", "cudaErrorIllegalInstruction"} <= sticky
    assert not sticky & {"cudaErrorMemoryAllocation", "cudaErrorInvalidValue",
                         "cudaErrorStreamCaptureUnsupported"}
    hip = {r.name for r in table.ERROR_CODES if r.library == "hip" and r.sticky}
    assert {"hipErrorIllegalAddress", "hipErrorAssert", "hipErrorLaunchFailure"} <= hip
    assert table.code_named("HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION").sticky


def test_families_follow_what_each_code_means():
    families = {name: table.code_named(name).family for name in (
        "cudaErrorAssert", "cudaErrorIllegalAddress", "cudaErrorMemoryAllocation",
        "cudaErrorNoKernelImageForDevice", "cudaErrorStreamCaptureInvalidated",
        "cudaErrorInsufficientDriver", "hipErrorNoBinaryForGpu", "ncclSystemError",
        "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_EXECUTION_FAILED",
        "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", "HSA_STATUS_ERROR_MEMORY_FAULT")}
    assert families == {
        "cudaErrorAssert": "device_assert", "cudaErrorIllegalAddress": "illegal_memory",
        "cudaErrorMemoryAllocation": "oom", "cudaErrorNoKernelImageForDevice": "op_unavailable",
        "cudaErrorStreamCaptureInvalidated": "cuda_graph", "cudaErrorInsufficientDriver":
        "driver", "hipErrorNoBinaryForGpu": "op_unavailable", "ncclSystemError": "distributed",
        "CUBLAS_STATUS_ALLOC_FAILED": "oom", "CUBLAS_STATUS_EXECUTION_FAILED": "library_status",
        "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH": "op_unavailable",
        "HSA_STATUS_ERROR_MEMORY_FAULT": "illegal_memory"}


def test_texts_are_the_libraries_own_messages():
    assert table.runtime_code(710).text == "device-side assert triggered"
    assert table.code_named("hipErrorInvalidValue").text == "invalid argument"
    assert table.code_named("CUBLAS_STATUS_ALLOC_FAILED").text == "the resource allocation failed"


def test_every_exception_class_of_torch_and_triton_has_a_family():
    names = {e.name for e in table.EXCEPTION_CLASSES}
    assert {"torch.AcceleratorError", "torch.OutOfMemoryError",
            "torch._dynamo.exc.BackendCompilerFailed", "torch._inductor.exc.InductorError",
            "torch.distributed.DistBackendError", "triton.runtime.errors.OutOfResources",
            "triton.compiler.errors.CompilationError"} <= names
    assert all(e.family in FAMILY_NAMES and e.source for e in table.EXCEPTION_CLASSES)
    assert table.exception_class("torch.OutOfMemoryError").family == "oom"
    assert table.exception_class("torch._inductor.exc.InductorError").wrapper
    assert Counter(e.source.split(":")[0] for e in table.EXCEPTION_CLASSES)


def test_the_committed_tables_are_what_the_headers_on_this_disk_give():
    script = _script()
    if not script.headers_present():
        pytest.skip("the CUDA/cuDNN/NCCL headers and libraries are not on this disk")
    assert script.main(["--check"]) == 0


def test_an_enum_member_aliasing_another_takes_its_number_and_keeps_its_doc():
    script = _script()
    header = ("typedef enum {\n  A_OK = 0, /**< fine */\n  A_BAD = 0x10, ///< first line\n"
              "                ///< second line\n  A_OLD DEPRECATED = A_BAD,\n} a_t;")
    assert script.enum_entries(header, "a_t") == [
        ("A_OK", 0, "fine"), ("A_BAD", 16, "first line second line"), ("A_OLD", 16, "")]


def test_an_accelerator_error_code_decides_before_the_message():
    error = torch.AcceleratorError("CUDA error: something new")
    error.error_code = 900
    d = classify(error)
    assert d.family == "cuda_graph"
    assert d.details["cuda_error"] == "cudaErrorStreamCaptureUnsupported"


def test_a_status_name_of_any_library_decides_its_family():
    assert classify("cuMemAlloc returned CUDA_ERROR_OUT_OF_MEMORY").family == "oom"
    d = classify("RuntimeError: CUDA driver error: CUDA_ERROR_ILLEGAL_INSTRUCTION")
    assert d.family == "illegal_memory" and d.sticky


def test_an_unknown_error_says_its_type_its_code_its_line_and_how_to_report_it():
    error = torch.AcceleratorError(
        "HIP error: invalid argument\nSearch for `hipErrorInvalidValue' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html for more "
        "information.")
    error.error_code = 1
    d = classify(error)
    assert d.family == "unknown"
    assert "torch.AcceleratorError" in d.summary and "hipErrorInvalidValue 1" in d.summary
    assert d.evidence == "torch.AcceleratorError: HIP error: invalid argument"
    assert d.details["backend"] == "rocm"
    assert any(re.search(r"report.*issue tracker.*first error line", c) for c in d.first_checks)


def test_an_unknown_text_names_the_library_status_it_holds_and_the_line():
    d = classify("Traceback (most recent call last):\n  File \"x.py\", line 3\n"
                 "ValueError: copy failed with hipErrorPeerAccessNotEnabled")
    assert d.family == "unknown"
    assert d.evidence == "ValueError: copy failed with hipErrorPeerAccessNotEnabled"
    assert "(ValueError, hipErrorPeerAccessNotEnabled)" in d.summary
    assert d.details["status_library"] == "hip" and "ROCm/HIP" in d.details["status_source"]


def test_hip_table_holds_the_codes_rocm_7_added_with_the_header_they_came_from():
    added = {"hipErrorInvalidResourceType": 914, "hipErrorInvalidResourceConfiguration": 915,
             "hipErrorStreamDetached": 916, "hipErrorInvalidClusterSize": 1054}
    for name, number in added.items():
        row = table.code_named(name)
        assert row is not None and row.library == "hip" and row.code == number, name
        assert "ROCm/rocm-systems@" in row.source and "ROCm 7" in row.source, name
    cluster = table.code_named("hipErrorInvalidClusterSize")
    assert cluster.text == "a kernel launch error has occurred due to cluster misconfiguration"


@pytest.mark.parametrize("name", ["triton.compiler.errors.CompilationError",
                                  "triton.compiler.errors.CompileTimeAssertionFailure",
                                  "triton.compiler.errors.UnsupportedLanguageConstruct"])
def test_tritons_compilation_errors_are_a_kernel_this_triton_cannot_build(name):
    assert table.exception_class(name).family == "op_unavailable"
    assert not table.exception_class(name).wrapper


def test_a_compilation_error_is_read_in_the_form_triton_formats_it():
    d = classify("triton.compiler.errors.CompilationError: at 8:11:\n"
                 "def triton_(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
                 "    tmp1 = tmp0.to(tl.float32)\n           ^")
    assert d.family == "op_unavailable"
    assert d.details["exception_class"] == "triton.compiler.errors.CompilationError"
    assert d.details["compiled"] == "triton"
    assert classify("other.errors.CompilationError: the plan has no step").family == "unknown"


def test_a_message_naming_the_hip_error_reports_hips_name_and_number():
    d = classify("torch.AcceleratorError: HIP error: a kernel launch error has occurred due to "
                 "cluster misconfiguration\nSearch for `hipErrorInvalidClusterSize' in "
                 "https://rocm.docs.amd.com/ for more information.")
    assert d.details["cuda_error"] == "hipErrorInvalidClusterSize"
    assert d.details["error_code"] == table.code_named("hipErrorInvalidClusterSize").code == 1054
    assert "hipErrorInvalidClusterSize 1054" in d.summary and "912" not in d.summary
    d = classify("RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object")
    assert (d.family, d.details["cuda_error"]) == ("op_unavailable", "hipErrorNoBinaryForGpu")


def test_a_cuda_message_keeps_the_cuda_name_and_number():
    d = classify("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert (d.details["cuda_error"], d.details["error_code"]) == ("cudaErrorIllegalAddress", 700)
