"""`cudadiag explain` of a cascade: the errors printed after the first one are its probable
consequences, named by family and line in the text and in `--json`; the first error's advice
is the failing operator's when its lines name it (issue 21, item 4)."""

from __future__ import annotations

import json

from advice_review import assert_fitted, contradictions
from cudadiag import cli
from cudadiag.explain import explain_text

ASSERTS = "".join(
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: "
    f"block: [0,0,0], thread: [{t},0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    for t in (2, 3, 5))
HINTS = ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
         "stacktrace below might be incorrect.\n"
         "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
         "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
CASCADE = (
    "epoch 1 step 40 loss 0.693\n"
    + ASSERTS
    + "Traceback (most recent call last):\n"
    '  File "train.py", line 40, in <module>\n'
    "    print(loss.item())\n"
    "RuntimeError: CUDA error: device-side assert triggered\n"
    + HINTS
    + "\nDuring handling of the above exception, another exception occurred:\n\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 44, in <module>\n'
    '    torch.save(model.state_dict(), "last.pt")\n'
    "RuntimeError: CUDA error: device-side assert triggered\n"                       # line 18
    "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
    "group__CUDART__TYPES.html for more information.\n"
    + HINTS
    + "[W501 12:00:03 CUDAGuardImpl.h:119] Warning: CUDA warning: an illegal memory access "
    "was encountered (function destroyEvent)\n"                                      # line 23
    "terminate called after throwing an instance of 'c10::Error'\n"                 # line 24
    "  what():  CUDA error: device-side assert triggered\n"
    "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/"
    "CUDAException.cpp:43 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 "
    "(0x7f2a in /usr/lib/libc10.so)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
    "total capacity of 15.77 GiB of which 3.12 MiB is free.\n"                       # line 28
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( "
    "handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`\n"          # line 29
)
LATER = [(18, "device_assert"), (23, "illegal_memory"), (24, "device_assert"), (28, "oom"),
         (29, "library_status")]
TARGET_CHECK = "Class targets must lie in [0, C)"


def test_each_later_error_of_the_cascade_is_a_probable_consequence_with_its_line():
    explanation = explain_text(CASCADE)
    assert explanation.first is not None and explanation.first.line == 2
    assert explanation.diagnosis.family == "device_assert"
    assert [(c.line, c.family) for c in explanation.consequences] == LATER
    # the other threads' assertion lines, the traceback, the hints and the C++ stack are the
    # reports of errors already listed, not errors of their own
    assert explanation.consequences[2].evidence.startswith("terminate called after throwing")


def test_the_consequences_are_listed_in_the_text_and_the_json(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(CASCADE)
    assert cli.main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "later errors (probable consequences of the first error):" in out
    for line, family in LATER:
        assert f"  line {line}: {family} — " in out
    assert "line 29: library_status — RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED" \
           in out
    assert cli.main(["explain", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(c["line"], c["family"]) for c in data["consequences"]] == LATER
    assert all(c["rank"] is None and c["evidence"] for c in data["consequences"])


def test_an_nll_loss_assertion_line_gives_the_class_target_checks_in_text_and_json(tmp_path,
                                                                                   capsys):
    log = tmp_path / "job.log"
    log.write_text(CASCADE)
    assert cli.main(["explain", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    checks = data["first_checks"]
    assert checks[0].startswith(TARGET_CHECK)
    assert "labels numbered 1..C, or a class the model was not built for" in checks[0]
    assert any("cudadiag.check_label_mapping(" in c for c in checks)
    assert_fitted(checks)
    assert contradictions(checks, data["avoid"]) == []
    # a log's reader is at a shell: the command to re-run is the CLI's
    assert any("`cudadiag run -- python your_script.py`" in c for c in checks)
    assert cli.main(["explain", str(log)]) == 0
    assert f"check first:\n  - {TARGET_CHECK}" in capsys.readouterr().out


def test_an_embedding_kernel_in_the_log_gives_the_token_id_checks():
    log = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1292: indexSelectLargeIndex: "
           "block: [222,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
           "RuntimeError: CUDA error: device-side assert triggered\n")
    checks = explain_text(log).diagnosis.first_checks
    assert checks[0].startswith("Token ids must lie in [0, num_embeddings)")


def test_a_single_error_has_no_consequences():
    log = ASSERTS + "RuntimeError: CUDA error: device-side assert triggered\n" + HINTS
    assert explain_text(log).consequences == []
