"""Each 2026 class diagnosed through the three ways a user meets it: the kernel (a real IPython
shell), `cudadiag run -- python script.py` and `cudadiag explain` of a pasted log. The errors
are the real exception types with real messages (tests/data/messages-2026-unseen.jsonl's
threads); compiled code is a real torch.compile on the CPU."""

from __future__ import annotations

import json
import sys

import pytest

from cudadiag import incidents
from scenarios import run
from test_cli import cudadiag

pytestmark = pytest.mark.slow

HIP_TEXT = ("HIP error: invalid device function\nSearch for `hipErrorInvalidDeviceFunction' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html for more "
            "information.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3")
CASES = {
    # class: (a cell/script that raises it, the log line a user pastes, family)
    "compiled": ("import torch\n@torch.compile\ndef pick(x, i):\n    return x[i] * 2\n"
                 "pick(torch.randn(10), torch.tensor([12]))",
                 "RuntimeError: kernel, /tmp/torchinductor_u/2r/c2rq.main.cpp:34, index out of "
                 "bounds: 0 <= tmp13 < 10L", "index_out_of_bounds"),
    "cuda_graph": ("raise RuntimeError('CUDA error: operation not permitted when stream is "
                   "capturing')",
                   "RuntimeError: CUDA error: operation not permitted when stream is capturing",
                   "cuda_graph"),
    "extension_binary": ("raise ImportError('/opt/venv/lib/python3.11/site-packages/flash_attn_2_"
                         "cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
                         "_ZN3c104cuda9SetDeviceEi')",
                         "ImportError: /opt/venv/lib/python3.11/site-packages/flash_attn_2_cuda."
                         "cpython-311-x86_64-linux-gnu.so: undefined symbol: "
                         "_ZN3c104cuda9SetDeviceEi", "op_unavailable"),
    "rocm_accelerator": (f"import torch\nerror = torch.AcceleratorError({HIP_TEXT!r})\n"
                         "error.error_code = 98\nraise error",
                         f"torch.AcceleratorError: {HIP_TEXT}", "op_unavailable"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kernel_files_an_incident_of_the_class(name, shell):
    cell, _, family = CASES[name]
    run(shell, cell)
    (incident,) = incidents()
    assert incident.diagnosis.family == family
    if name == "rocm_accelerator":
        assert incident.diagnosis.details["backend"] == "rocm"


@pytest.mark.parametrize("name", sorted(CASES))
def test_cudadiag_run_of_a_script_diagnoses_the_class(name, tmp_path):
    cell, _, family = CASES[name]
    (tmp_path / "script.py").write_text(cell + "\n")
    result = cudadiag("run", "--", sys.executable, "script.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "cudadiag [" in result.stderr
    assert incidents()[-1].diagnosis.family == family


@pytest.mark.parametrize("name", sorted(CASES))
def test_cudadiag_explain_of_a_pasted_log_diagnoses_the_class(name, tmp_path):
    _, line, family = CASES[name]
    (tmp_path / "log.txt").write_text("Traceback (most recent call last):\n  File \"train.py\", "
                                      f"line 9, in <module>\n    step()\n{line}\n")
    result = cudadiag("explain", "--json", "log.txt", cwd=tmp_path)
    assert result.returncode == 0
    assert json.loads(result.stdout)["family"] == family
