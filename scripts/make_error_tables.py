"""Write cudadiag's error-code tables from the vendors' headers and libraries on this disk.

    python scripts/make_error_tables.py           # rewrite the generated modules
    python scripts/make_error_tables.py --check   # exit 1 when a committed table is stale

Sources: every enum below is read from its header (number, name, doc comment); the message
text comes from the library's own `...GetErrorString` where the library is on disk (called
through ctypes: none of them needs a GPU), else from the doc comment. Stickiness is NVIDIA's
own words in the doc comment: "the process must be terminated and relaunched". The exception
classes are listed by importing torch and triton in each interpreter given (`--python`).
HIP and HSA headers are not on this disk: rocm_codes.py is rewritten only when all of them are
given (--hip-header ... --hip7-error-cpp-header, from the commits ROCM_ENUMS and HIP7_SOURCE name).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "cudadiag" / "error_codes"
NVIDIA_OUT = PACKAGE / "nvidia_codes.py"
EXCEPTIONS_OUT = PACKAGE / "python_exceptions.py"
ROCM_OUT = PACKAGE / "rocm_codes.py"
ROCM_OPTIONS = ("hip", "hsa", "hsa_ext_amd", "hip_error_cpp", "hip7", "hip7_error_cpp")
ROCM_ENUMS = (
    # (library, header option, enum, source): the headers come from the repositories named,
    # at the commits named (ROCm 6.2: ROCm/HIP's last tag before it moved to rocm-systems)
    ("hip", "hip", "hipError_t",
     "ROCm/HIP@c5e11fcac8249ce4f7e70157588ff9661a870b59 include/hip/hip_runtime_api.h "
     "(hipError_t, ROCm 6.2)"),
    ("hsa", "hsa", "hsa_status_t",
     "ROCm/ROCR-Runtime@c7785a6da1c10c25bc8d527c00b1fe79bfbd84c9 runtime/hsa-runtime/inc/hsa.h "
     "(hsa_status_t)"),
    ("hsa", "hsa_ext_amd", "member:HSA_STATUS_ERROR_INVALID_MEMORY_POOL",
     "ROCm/ROCR-Runtime@c7785a6da1c10c25bc8d527c00b1fe79bfbd84c9 "
     "runtime/hsa-runtime/inc/hsa_ext_amd.h (additions to hsa_status_t)"),
)
HIP7_SOURCE = ("ROCm/rocm-systems@003a5d106dc36c137c76d6c8bb51f7fa5564bdfc "
               "projects/hip/include/hip/hip_runtime_api.h (hipError_t, ROCm 7)")
"""Where HIP moved after ROCm 6.2: the codes it adds to hipError_t (911-916, 1054) are read from
it (`--hip7-header`), their text from `--hip7-error-cpp-header` (HIP7_STRINGS_SOURCE)."""
CUDA_INCLUDE = Path("/usr/local/cuda/include")
VENV = Path("/work/venv214")
STICKY_WORDS = "must be terminated and relaunched"


def _nvidia_root() -> Path:
    found = sorted(VENV.glob("lib/python3*/site-packages/nvidia"))
    return found[0] if found else VENV / "nvidia"


NV = _nvidia_root()


@dataclass(frozen=True)
class Enum:
    """Where one status enum lives and how its message text is read."""

    library: str
    header: Path
    type_name: str
    source: str
    """How the row's source is written in the table (a path that does not depend on this disk)."""
    text_function: tuple[Path, str] | None = None


ENUMS = (
    Enum("cuda_runtime", CUDA_INCLUDE / "driver_types.h", "cudaError",
         "CUDA {cuda} driver_types.h (enum cudaError); text: cudaGetErrorString",
         (NV / "cu13/lib/libcudart.so.13", "cudaGetErrorString")),
    Enum("cuda_driver", CUDA_INCLUDE / "cuda.h", "CUresult",
         "CUDA {cuda} cuda.h (enum CUresult); text: its doc comment"),
    Enum("nccl", NV / "nccl/include/nccl.h", "ncclResult_t",
         "nvidia-nccl nccl.h (ncclResult_t); text: ncclGetErrorString",
         (NV / "nccl/lib/libnccl.so.2", "ncclGetErrorString")),
    Enum("cublas", NV / "cu13/include/cublas_api.h", "cublasStatus_t",
         "CUDA {cuda} cublas_api.h (cublasStatus_t, also cuBLASLt's); text: "
         "cublasGetStatusString", (NV / "cu13/lib/libcublas.so.13", "cublasGetStatusString")),
    Enum("cusparse", NV / "cu13/include/cusparse.h", "cusparseStatus_t",
         "CUDA {cuda} cusparse.h (cusparseStatus_t); text: cusparseGetErrorString",
         (NV / "cu13/lib/libcusparse.so.12", "cusparseGetErrorString")),
    Enum("cusolver", NV / "cu13/include/cusolver_common.h", "cusolverStatus_t",
         "CUDA {cuda} cusolver_common.h (cusolverStatus_t)"),
    Enum("cufft", NV / "cu13/include/cufft.h", "cufftResult",
         "CUDA {cuda} cufft.h (cufftResult)"),
    Enum("curand", NV / "cu13/include/curand.h", "curandStatus",
         "CUDA {cuda} curand.h (curandStatus); text: its doc comment"),
    Enum("nvrtc", NV / "cu13/include/nvrtc.h", "nvrtcResult",
         "CUDA {cuda} nvrtc.h (nvrtcResult); text: nvrtcGetErrorString",
         (NV / "cu13/lib/libnvrtc.so.13", "nvrtcGetErrorString")),
    Enum("cudnn", NV / "cudnn/include/cudnn_graph.h", "cudnnStatus_t",
         "cuDNN {cudnn} cudnn_graph.h (cudnnStatus_t); text: cudnnGetErrorString",
         (NV / "cudnn/lib/libcudnn_graph.so.9", "cudnnGetErrorString")),
)

_TRAILING = ("/**<", "///<", "//!<", "//<")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_ENTRY = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)(?:\s+[A-Z_]+)?\s*=\s*(?P<value>[^,]+?)\s*$",
                    re.DOTALL)


def enum_body(header_text: str, type_name: str) -> tuple[str, str]:
    """The text between the braces of the enum named `type_name` (`enum X {` or
    `typedef enum [X] {...} X;`, or `member:NAME` for the anonymous enum that holds NAME),
    comments kept, and the same text with comments blanked."""
    opening = re.search(rf"\benum\s+(?:__device_builtin__\s+)?{type_name}\s*\{{", header_text)
    member = re.search(rf"^\s*{type_name[len('member:'):]}\s*=", header_text, re.MULTILINE
                       ) if type_name.startswith("member:") else None
    if member:
        start = header_text.rindex("{", 0, member.start()) + 1
        end = header_text.index("}", start)
    elif opening:
        start = opening.end()
        end = header_text.index("}", start)
    else:
        closing = re.search(rf"\}}\s*{type_name}\s*;", header_text)
        if closing is None:
            raise SystemExit(f"enum {type_name} not found")
        end = closing.start()
        start = header_text.rindex("{", 0, end) + 1
    body = header_text[start:end]
    body = re.sub(r"^\s*#[^\n]*", lambda m: " " * len(m.group(0)), body, flags=re.MULTILINE)
    blank = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), body)
    return body, blank


def _doc(comment: str) -> str:
    text = re.sub(r"^/\*\*?<?|\*/$|^///?<?", "", comment.strip())
    text = re.sub(r"\s*\n\s*\*?", " ", text)
    text = re.sub(r"@since [^.]*\.?|\\ref |::", "", text)
    return " ".join(text.split()).strip()


def enum_entries(header_text: str, type_name: str) -> list[tuple[str, int, str]]:
    """(name, value, doc comment) of each member of the enum, in header order; a member
    whose value is another member's name takes that member's value."""
    body, blank = enum_body(header_text, type_name)
    comments = [(m.start(), m.end(), m.group(0)) for m in _COMMENT.finditer(body)]
    values: dict[str, int] = {}
    entries: list[tuple[str, int, str]] = []
    pieces, spans, pos = blank.split(","), [], 0
    for piece in pieces:
        spans.append((pos, piece))
        pos += len(piece) + 1
    matches = [(start, m) for start, piece in spans if (m := _ENTRY.match(piece))]
    for index, (start, m) in enumerate(matches):
        raw = m.group("value").strip()
        value = values[raw] if raw in values else int(raw, 0)
        values[m.group("name")] = value
        name_at = start + m.start("name")
        next_name = (matches[index + 1][0] + matches[index + 1][1].start("name")
                     if index + 1 < len(matches) else len(body))
        previous_end = matches[index - 1][0] + matches[index - 1][1].end("value") if index else 0
        after = [c for s, _, c in comments if start + m.end("value") <= s < next_name
                 and c.startswith(_TRAILING)]
        before = [c for s, e, c in comments if previous_end <= s and e <= name_at
                  and not c.startswith(_TRAILING)]
        doc = " ".join(_doc(c) for c in after) if after else _doc(before[-1]) if before else ""
        entries.append((m.group("name"), value, doc))
    return entries


def _text_reader(spec: tuple[Path, str] | None):  # type: ignore[no-untyped-def]
    if spec is None or not spec[0].exists():
        return None
    function = getattr(ctypes.CDLL(str(spec[0])), spec[1])
    function.restype = ctypes.c_char_p
    function.argtypes = [ctypes.c_int]
    return lambda value: function(value).decode()


def _first_sentence(doc: str) -> str:
    m = re.match(r"(.+?\.)(?:\s|$)", doc)
    return (m.group(1) if m else doc).rstrip(".")


def _versions() -> dict[str, str]:
    cuda = re.search(r"#define CUDA_VERSION (\d+)", (CUDA_INCLUDE / "cuda.h").read_text())
    cudnn_h = (NV / "cudnn/include/cudnn_version.h").read_text()
    parts = [re.search(rf"#define CUDNN_{p} (\d+)", cudnn_h) for p in ("MAJOR", "MINOR",
                                                                         "PATCHLEVEL")]
    number = int(cuda.group(1)) if cuda else 0
    return {"cuda": f"{number // 1000}.{number % 1000 // 10}",
            "cudnn": ".".join(p.group(1) for p in parts if p)}


def nvidia_rows() -> list[tuple[str, int, str, str, bool, str]]:
    """(library, code, name, text, sticky, source) for every member of every enum."""
    versions = _versions()
    rows = []
    for enum in ENUMS:
        read_text = _text_reader(enum.text_function)
        source = enum.source.format(**versions)
        for name, value, doc in enum_entries(enum.header.read_text(errors="replace"),
                                             enum.type_name):
            text = read_text(value) if read_text else _first_sentence(doc)
            if text == name or not text:
                text = _first_sentence(doc)
            rows.append((enum.library, value, name, text, STICKY_WORDS in doc, source))
    return rows


_INTROSPECT = r"""
import importlib, inspect, json, sys
out = {}
for module_name in sys.argv[1:]:
    try:
        module = importlib.import_module(module_name)
    except Exception:
        continue
    version = getattr(sys.modules[module_name.split('.')[0]], '__version__', '?')
    for name, obj in vars(module).items():
        if inspect.isclass(obj) and issubclass(obj, BaseException) and \
                obj.__module__.split('.')[0] in ('torch', 'triton'):
            key = obj.__module__ + '.' + obj.__qualname__
            bases = [b.__module__ + '.' + b.__qualname__ for b in obj.__mro__[1:]
                     if b.__module__ != 'builtins' or b.__name__ not in
                     ('object', 'BaseException', 'Exception')]
            out[key] = {'bases': bases, 'version': module_name.split('.')[0] + ' ' +
                        str(version).split('+')[0]}
print(json.dumps(out))
"""
EXCEPTION_MODULES = (
    "torch", "torch.cuda", "torch.accelerator", "torch._dynamo.exc", "torch._inductor.exc",
    "torch.distributed", "torch.distributed.elastic.rendezvous.api",
    "torch.distributed.elastic.multiprocessing.errors",
    "torch.distributed.elastic.agent.server.api",
    "torch.distributed.elastic.timer.api", "torch._C._distributed_c10d",
    "triton.runtime.errors", "triton.compiler.errors", "triton.runtime.autotuner",
)


def exception_rows(pythons: list[str]) -> list[tuple[str, tuple[str, ...], str]]:
    """(qualified class name, qualified base names, versions seen in) for every exception
    class that torch and triton define in EXCEPTION_MODULES, over the interpreters given."""
    seen: dict[str, tuple[tuple[str, ...], set[str]]] = {}
    for python in pythons:
        result = subprocess.run([python, "-c", _INTROSPECT, *EXCEPTION_MODULES],
                                capture_output=True, text=True, check=True)
        for name, row in json.loads(result.stdout.strip().splitlines()[-1]).items():
            seen.setdefault(name, (tuple(row["bases"]), set()))[1].add(row["version"])
    return [(name, bases, ", ".join(sorted(versions)))
            for name, (bases, versions) in sorted(seen.items())]


HIP_STRINGS_SOURCE = ("text: ihipGetErrorString, ROCm/clr@f9f995c6d0aecec28debd3db0f41df0c15ec003d "
                      "hipamd/src/hip_error.cpp")


def hip_strings(source_text: str) -> dict[str, str]:
    """hipGetErrorString's text per name, from clr's hip_error.cpp (`ihipGetErrorString`: a
    run of `case hipErrorX:` lines shares the `return "..."` that follows them)."""
    body = source_text[source_text.index("ihipGetErrorString(hipError_t"):]
    strings: dict[str, str] = {}
    pending: list[str] = []
    for m in re.finditer(r'case (hip\w+):|return "([^"]*)";', body):
        if m.group(1):
            pending.append(m.group(1))
        else:
            strings.update({name: m.group(2) for name in pending if name not in strings})
            pending = []
            if "default:" in body[:m.start()][-200:]:
                break
    return strings


HIP7_STRINGS_SOURCE = ("text: ihipGetErrorString, ROCm/rocm-systems@"
                       "10442129b1e0e49eb3bfacbfc9c1c56c36b1a0b5 "
                       "projects/clr/hipamd/src/hip_error.cpp")


def rocm_rows(headers: dict[str, Path]) -> list[tuple[str, int, str, str, bool, str]]:
    """(library, code, name, text, sticky, source) of the HIP and HSA enums, read from the
    headers given (text: hipGetErrorString's for HIP, the doc comment for HSA; sticky: False,
    the table takes it from the CUDA twin), then the codes ROCm 7's hipError_t adds."""
    strings = hip_strings(headers["hip_error_cpp"].read_text())
    rows = []
    for library, option, type_name, source in ROCM_ENUMS:
        for name, value, doc in enum_entries(headers[option].read_text(), type_name):
            text = strings.get(name, "") if library == "hip" else ""
            full_source = f"{source}; {HIP_STRINGS_SOURCE}" if text else source
            rows.append((library, value, name, text or doc.rstrip("."), False, full_source))
    known = {name for library, _, name, *_ in rows if library == "hip"}
    strings7 = hip_strings(headers["hip7_error_cpp"].read_text())
    for name, value, doc in enum_entries(headers["hip7"].read_text(), "hipError_t"):
        if name not in known:
            text = strings7.get(name, "")
            source = f"{HIP7_SOURCE}; {HIP7_STRINGS_SOURCE}" if text else HIP7_SOURCE
            rows.append(("hip", value, name, text or doc.rstrip("."), False, source))
    return rows


def render_rocm(rows: list[tuple[str, int, str, str, bool, str]]) -> str:
    """The ROCm module's text."""
    return render_nvidia(rows).replace(
        '"""NVIDIA status codes: generated by scripts/make_error_tables.py from the headers\n'
        'and libraries of CUDA, cuDNN and NCCL; do not edit (rerun the script).',
        '"""HIP and HSA status codes: generated by scripts/make_error_tables.py --hip-header ...\n'
        'from the ROCm headers named in each row (not on this disk: run it with the headers\n'
        'fetched from those repositories); do not edit.').replace("NVIDIA_CODES", "ROCM_CODES")


def _literal(value: object, indent: int) -> str:
    """`repr(value)`, a long string split into adjacent literals that fit in 100 columns."""
    text = repr(value)
    if isinstance(value, tuple) and indent + len(text) > 99:
        inner = " " * (indent + 4)
        return "(\n" + "".join(f"{inner}{_literal(v, indent + 4)},\n" for v in value) + \
            " " * indent + ")"
    if not isinstance(value, str) or indent + len(text) <= 99:
        return text
    words, parts, current = re.split(r"(?<= )", value), [], ""
    for word in words:
        if current and indent + len(repr(current + word)) > 99:
            parts.append(current)
            current = ""
        current += word
    parts.append(current)
    return ("\n" + " " * indent).join(repr(p) for p in parts)


def _row(row: tuple[object, ...]) -> list[str]:
    return ["    ("] + [f"        {_literal(field, 8)}," for field in row] + ["    ),"]


def render_nvidia(rows: list[tuple[str, int, str, str, bool, str]]) -> str:
    """The generated module's text."""
    lines = ['"""NVIDIA status codes: generated by scripts/make_error_tables.py from the headers',
             "and libraries of CUDA, cuDNN and NCCL; do not edit (rerun the script).",
             "",
             "Each row: (library, code, name, text, sticky, source). `sticky` is True where the",
             "header's doc comment says the process \"must be terminated and relaunched\".",
             '"""', "", "from __future__ import annotations", "",
             "NVIDIA_CODES: tuple[tuple[str, int, str, str, bool, str], ...] = ("]
    lines += [line for row in rows for line in _row(row)]
    lines += [")", ""]
    return "\n".join(lines)


def render_exceptions(rows: list[tuple[str, tuple[str, ...], str]]) -> str:
    """The generated exceptions module's text."""
    lines = ['"""Exception classes of torch and triton: generated by scripts/make_error_tables.py',
             "by importing them; do not edit (rerun the script).", "",
             "Each row: (qualified class name, qualified base classes, versions it was seen in).",
             '"""', "", "from __future__ import annotations", "",
             "PYTHON_EXCEPTIONS: tuple[tuple[str, tuple[str, ...], str], ...] = ("]
    lines += [line for row in rows for line in _row(row)]
    lines += [")", ""]
    return "\n".join(lines)


def headers_present() -> bool:
    """True when every header and library this script reads is on this disk."""
    paths = [e.header for e in ENUMS] + [e.text_function[0] for e in ENUMS if e.text_function]
    return all(p.exists() for p in paths)


def default_pythons() -> list[str]:
    """This interpreter, and /work/venv214's when it exists (another torch and triton)."""
    other = VENV / "bin" / "python"
    return [sys.executable] + ([str(other)] if other.exists() else [])


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check compare) the generated tables; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--python", action="append", help="interpreter to list exceptions in")
    for option in ROCM_OPTIONS:
        parser.add_argument(f"--{option.replace('_', '-')}-header", type=Path,
                            help="ROCm header to read (rewrites rocm_codes.py; see ROCM_ENUMS)")
    args = parser.parse_args(argv)
    outputs = {NVIDIA_OUT: render_nvidia(nvidia_rows()),
               EXCEPTIONS_OUT: render_exceptions(exception_rows(args.python or default_pythons()))}
    rocm = {o: getattr(args, f"{o}_header") for o in ROCM_OPTIONS}
    if all(rocm.values()):
        outputs[ROCM_OUT] = render_rocm(rocm_rows(rocm))
    stale = [path for path, text in outputs.items()
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run scripts/make_error_tables.py)")
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
