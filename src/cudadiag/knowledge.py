"""The error-family table: what each family means, what to check first, what not to conclude.

This module is data. `classify.py` and `advice.py` read it; nothing else should hold
diagnosis knowledge.

- `Advice`: one line of advice with its sources (`method N`, a point of docs/method.md, or a
  key of `DOCS`, the primary documentation), its topics, the case facts that answer it
  (`CASE_FACTS`) and, for a conclusion to avoid, what a check must never propose; commands
  in it are worded per `SURFACES`.
- `FAMILIES`: one entry per family (the exact strings incidents carry), in the user's words.
- `CUDA_ERRORS`: the CUDA/HIP runtime error codes cudadiag knows, with their
  `cudaGetErrorString` text, family and stickiness (NVIDIA's "the process must be terminated
  and relaunched" list: 700, 702, 710, 714-719).
- `SIGNATURES`: message patterns, each deciding a family. The earliest match in a text wins;
  at the same position the earlier entry in this list wins.
- `DETAIL_PATTERNS`: values pulled from the text once the family is known.
- `PITFALLS`, `OPERATOR_ADVICE`, `VALUE_PATTERNS`, `GUARD_ADVICE`: the advice of a known
  mistake, of an operator's kind of index, of a shape of the offending values, of a guard.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cudadiag.error_codes import table as error_codes
from cudadiag.i18n import N_, Text, msg

if sys.version_info >= (3, 11):  # the pattern parser behind `re` (anchors come from it)
    from re import _constants as _sre_constants
    from re import _parser as _sre_parser
else:
    import sre_constants as _sre_constants
    import sre_parse as _sre_parser

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
    "cuda_graph",
    "unknown",
)


# --- Advice: every line with its sources -------------------------------------------------------
# A line of advice (a first check, a conclusion to avoid) is an `Advice`: its text, the points
# of docs/method.md or the documentation it comes from, the topics it covers (a case gets one
# line per topic: the most specific), and the facts of a case that make it needless. advice.py
# picks and fits the lines for one case; nothing else assembles them.

METHOD_POINTS = 13
"""docs/method.md's points, numbered 1..13: a source `method N` names one."""

DOCS: dict[str, str] = {
    # PyTorch
    "cuda-semantics": "https://pytorch.org/docs/stable/notes/cuda.html",
    "cuda-graphs": "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "torch-compile-modes": "https://pytorch.org/docs/stable/generated/torch.compile.html",
    "cuda-memory": "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    "faq-memory": "https://pytorch.org/docs/stable/notes/faq.html",
    "cross-entropy": "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    "bce": "https://pytorch.org/docs/stable/generated/torch.nn.BCELoss.html",
    "embedding": "https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html",
    "gather": "https://pytorch.org/docs/stable/generated/torch.gather.html",
    "index-select": "https://pytorch.org/docs/stable/generated/torch.index_select.html",
    "view": "https://pytorch.org/docs/stable/generated/torch.Tensor.view.html",
    "linear": "https://pytorch.org/docs/stable/generated/torch.nn.Linear.html",
    "register-buffer":
        "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer",
    "amp": "https://pytorch.org/docs/stable/amp.html",
    "from-numpy": "https://pytorch.org/docs/stable/generated/torch.from_numpy.html",
    "arch-list": "https://pytorch.org/docs/stable/generated/torch.cuda.get_arch_list.html",
    "cpp-extension": "https://pytorch.org/docs/stable/cpp_extension.html",
    "install": "https://pytorch.org/get-started/locally/",
    "hip": "https://pytorch.org/docs/stable/notes/hip.html",
    "distributed": "https://pytorch.org/docs/stable/distributed.html",
    "multiprocessing": "https://pytorch.org/docs/stable/notes/multiprocessing.html",
    "cudagraph-trees": "https://pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html",
    # Python
    "start-methods":
        "https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods",
    # NVIDIA
    "cuda-runtime-errors":
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    "cuda-error-log": "https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/"
                      "error-log-management.html",
    "cuda-env-vars":
        "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars",
    "cuda-compatibility": "https://docs.nvidia.com/deploy/cuda-compatibility/",
    "cuda-stream-capture": "https://docs.nvidia.com/cuda/cuda-c-programming-guide/"
                           "index.html#prohibited-and-unhandled-operations",
    "nvidia-smi": "https://docs.nvidia.com/deploy/nvidia-smi/index.html",
    "compute-sanitizer":
        "https://docs.nvidia.com/compute-sanitizer/ComputeSanitizer/index.html",
    "cublas-status": "https://docs.nvidia.com/cuda/cublas/#cublasstatus-t",
    "cudnn": "https://docs.nvidia.com/deeplearning/cudnn/",
    "nccl-env": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    # Hugging Face (the transformers extra)
    "hf-tokenizer": "https://huggingface.co/docs/transformers/main_classes/tokenizer",
    "hf-resize-embeddings": "https://huggingface.co/docs/transformers/main_classes/"
                            "model#transformers.PreTrainedModel.resize_token_embeddings",
    "hf-data-collator": "https://huggingface.co/docs/transformers/main_classes/data_collator",
}
"""The primary documentation an advice line may name as its source, by short name."""

CASE_FACTS: dict[str, str] = {
    "isolated": "the run had blocking launches, the op tracer and the prechecks (%cuda_isolate, "
                "cudadiag run): the operator that failed is named",
    "prechecked": "a precheck stopped the operator before its kernel ran: the line it raised at "
                  "is the operator's, and no assertion was printed",
    "no_assertion": "no device assertion line was printed (or read)",
    "kind_known": "the kind of index the failing operator takes is known: its own checks are "
                  "given",
    "no_negative_values": "the offending values are known and none is negative",
    "no_vocabulary": "the run traced the model and its input vocabulary (the first embedding "
                     "it looked up) has not as many rows as the loss has classes: the targets "
                     "are no token ids",
}
"""What a case may already answer: an advice line answered by one of its facts is left out."""

SURFACES: dict[str, dict[str, str]] = {
    "notebook": {
        "rerun": N_("re-run the cell isolated with blocking launches (%cuda_isolate)"),
        "restarting": N_("Restarting the kernel"),
        "env": N_("`!cudadiag env` in a cell"),
        "report": N_("`%cudadiag report` (a scrubbed Markdown report of the incident)"),
    },
    "script": {
        "rerun": N_("run the script with `cudadiag run -- python {script}` (blocking launches, "
                    "the op tracer and prechecks)"),
        "restarting": N_("Restarting the process"),
        "env": "`cudadiag env`",
        "report": N_("`cudadiag report` (a scrubbed Markdown report of the incident)"),
    },
    "log": {
        "rerun": N_("re-run the program with `cudadiag run -- python {script}` (blocking "
                    "launches, the op tracer and prechecks; %cuda_isolate in a notebook)"),
        "restarting": N_("Restarting the process (or the notebook's kernel)"),
        "env": "`cudadiag env`",
        "report": N_("`cudadiag report` (a scrubbed Markdown report of the incident)"),
    },
}
"""The words of commands and actions as the user can act on them where the advice is read: a
notebook (the kernel and its isolated runs), a script run with `cudadiag run`, a log given to
`cudadiag explain`. `{script}` is the script's name when known."""

MAX_FIRST_CHECKS = 5
"""A case's "check first" lines: the most specific first, at most this many."""


@dataclass(frozen=True)
class Advice:
    """One line of advice and where it comes from."""

    text: str
    """May hold `{rerun}` and `{restarting}` (SURFACES) and, in value patterns, the values'
    placeholders."""
    sources: tuple[str, ...]
    """Each `method N` (a point of docs/method.md) or a key of DOCS."""
    topics: tuple[str, ...] = ()
    """What the line covers: a later line of a topic already covered is left out."""
    answered_by: frozenset[str] = frozenset()
    """Facts of a case (CASE_FACTS) that make the line needless."""
    forbids: re.Pattern[str] | None = None
    """For a conclusion to avoid: the wording of what a check must never propose beside it."""


def _check(text: str, *sources: str, topics: tuple[str, ...] = (),
           answered_by: tuple[str, ...] = ()) -> Advice:
    return Advice(text, sources, topics, frozenset(answered_by))


def _avoid(text: str, *sources: str, forbids: str, answered_by: tuple[str, ...] = ()) -> Advice:
    return Advice(text, sources, answered_by=frozenset(answered_by),
                  forbids=re.compile(forbids, re.IGNORECASE))


# What the conclusions to avoid forbid, in the words a check would use to propose it.
WIDENING = (r"\bwid(?:en|er|ening)\b|\bmax(?:imum)?(?: (?:label|target|id|index|value))? ?\+ ?1\b"
            r"|\bsize the (?:output )?layer\b|\bneeds? \d+ (?:outputs|classes)\b|\bmore outputs\b"
            r"|\badd(?:ing)? (?:an? |one )?(?:output|class)(?:es)?\b|\bnum_classes ?\+ ?1"
            r"|\bincrease (?:num_classes|the number of classes|the output)")
SUBTRACTING_ONE = (r"\bshift(?:ing)?\b[^.]{0,30}\bby ?[−-] ?1\b|\bsubtract(?:ing)? (?:1|one)\b"
                   r"|\b(?:target|label)s? ?[−-] ?1\b|[−-]= ?1\b")
BROKEN_HARDWARE = (r"\b(?:replace|swap|return|RMA)\b[^.]*\b(?:GPU|card|device)\b"
                   r"|\b(?:reinstall|update|upgrade|downgrade)\w*\b[^.]*\bdriver\b"
                   r"|\b(?:faulty|broken)\b[^.]*\b(?:GPU|memory|driver)\b")

WIDENING_AVOID = _avoid(
    N_("Widening the output layer or the embedding until the error goes away."), "method 7",
    forbids=WIDENING)
SUBTRACTING_AVOID = _avoid(
    N_("Subtracting 1 from every label before knowing that every source numbers them 1..C."),
    "method 7", forbids=SUBTRACTING_ONE)
INDEX_RANGE = _check(
    N_("Check the indices and targets given to the operator that failed: class targets must lie "
       "in [0, C) or equal ignore_index; embedding indices in [0, num_embeddings)."),
    "method 5", "cross-entropy", "embedding", topics=("index_range",))
RERUN_ISOLATED = _check(N_("Name the operator that really failed: {rerun}."), "method 4",
                        answered_by=("isolated",))


@dataclass(frozen=True)
class Family:
    """What a family of errors means for the user."""

    name: str
    title: str
    first_checks: tuple[Advice, ...]
    avoid: tuple[Advice, ...]
    asynchronous: bool = False
    """True when the error is reported after the fact, so the traceback line is only where it
    was noticed (method point 3)."""
    isolated: str | None = None
    """What an isolated re-run of the cell does instead, when it cannot fail this way."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "device_assert",
            N_("Device-side assertion"),
            first_checks=(
                INDEX_RANGE,
                _check(N_("Read the assertion line printed before the error (file, kernel, "
                          "condition): it names the contract of the operator that was broken."),
                       "method 5", answered_by=("no_assertion", "kind_known")),
                RERUN_ISOLATED,
                _check(N_("Look at the batch in flight: the last incomplete batch, rare labels, "
                          "empty or padded targets."), "method 2", "method 10", topics=("batch",)),
            ),
            avoid=(
                _avoid(N_("The GPU or the driver is broken."), "method 5", forbids=BROKEN_HARDWARE),
                _avoid(N_("The line in the traceback (.item(), .cpu(), print) is the cause: it is "
                          "only where the asynchronous error was noticed."), "method 3",
                       "cuda-semantics", answered_by=("prechecked",),
                       forbids=r"\b(?:remove|delete|drop|avoid|comment out)\b[^.]*"
                               r"(?:\.item\(\)|\.cpu\(\)|\bprint\b)"),
                _avoid(N_("{restarting} fixes it: the restart clears the poisoned CUDA context, "
                          "not the bad target or index."), "method 6",
                       forbids=r"\brestart\w*\b[^.]*\b(?:fix|fixes|solves?|resolves?)\b"
                               r"(?! no\b)"),
                WIDENING_AVOID,
            ),
            asynchronous=True,
        ),
        Family(
            "illegal_memory",
            N_("Illegal memory access on the device"),
            first_checks=(
                _check(N_("Name the kernel that faulted: {rerun}."), "method 4",
                       answered_by=("isolated",)),
                _check(N_("Check sizes, indices and contiguity of the tensors given to custom "
                          "kernels and binary extensions (flash-attn, xformers, apex, your own "
                          "CUDA code)."), "method 8", "method 12"),
                _check(N_("Turn optional extensions off one at a time and compare with a "
                          "reference operator or the same operator on the CPU."), "method 9"),
                _check(N_("Run compute-sanitizer --tool memcheck with "
                          "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (the caching allocator hides "
                          "out-of-bounds accesses)."), "compute-sanitizer", "cuda-memory"),
            ),
            avoid=(
                _avoid(N_("The GPU memory is faulty."), "method 5", forbids=BROKEN_HARDWARE),
                _avoid(N_("It is an out-of-memory error."), "method 5",
                       forbids=r"\b(?:reduce|lower|halve)\b[^.]*\bbatch size\b"
                               r"|\bexpandable_segments\b"),
                _avoid(N_("The operator in the traceback is the cause."), "method 3",
                       answered_by=("prechecked",),
                       forbids=r"\bfix\b[^.]*\bthe (?:line|operator) (?:in|of) the traceback\b"),
                _avoid(N_("Changing batch, precision and library at once: change one thing at a "
                          "time."), "method 5", "method 9",
                       forbids=r"\bchange\b[^.]*\bbatch\b[^.]*\bprecision\b"),
            ),
            asynchronous=True,
        ),
        Family(
            "oom",
            N_("Out of memory"),
            first_checks=(
                _check(N_("Check the shapes of this step: batch size, sequence length, image "
                          "size; one outsized sample is enough."), "method 2", "method 5"),
                _check(N_("Check tensor lifetimes: losses summed without .item(), outputs kept in "
                          "lists, the traceback of a caught exception pinning tensors."),
                       "method 5", "faq-memory"),
                _check(N_("Check the process's memory: other processes on the GPU, memory "
                          "reserved but unallocated (fragmentation), torch.cuda.memory_summary()."),
                       "method 5", "cuda-memory"),
            ),
            avoid=(
                _avoid(N_("Every CUDA error means a lack of VRAM."), "method 5",
                       forbids=r"\black of (?:VRAM|memory)\b"),
                _avoid(N_("A bigger GPU is needed, before measuring what the step really needs."),
                       "method 5", forbids=r"\b(?:bigger|larger) GPU\b|\bmore VRAM\b"),
                _avoid(N_("Halving the batch size is the fix when one sample is outsized."),
                       "method 5", forbids=r"\bhalv\w*\b|\b(?:reduce|lower)\b[^.]*\bbatch size\b"),
            ),
        ),
        Family(
            "op_unavailable",
            N_("Operator or kernel unavailable"),
            first_checks=(
                _check(N_("Check versions: the PyTorch build (torch.version.cuda / "
                          "torch.version.hip), the device's compute capability against the "
                          "build's arch list."), "method 5", "method 13", "arch-list"),
                _check(N_("Check binary extensions (torchvision, xformers, flash-attn, ...) were "
                          "built for this PyTorch and this CUDA or ROCm."), "method 12",
                       "cpp-extension"),
                _check(N_("Check the backend of the inputs: the operator may exist only for the "
                          "CPU."), "method 5"),
                _check(N_("Check the dtype: the operator may have no kernel for Half, BFloat16 or "
                          "Int."), "method 5"),
            ),
            avoid=(
                _avoid(N_("Reinstalling everything at random."), "method 5",
                       forbids=r"\breinstall\w*\b[^.]*\b(?:everything|all packages|at random)\b"),
                _avoid(N_("Upgrading the driver without checking the build's CUDA version and "
                          "arch list."), "method 5", "cuda-compatibility",
                       forbids=r"\b(?:upgrade|update)\w*\b[^.]*\bdriver\b"),
                _avoid(N_("The GPU is broken."), "method 5", forbids=BROKEN_HARDWARE),
            ),
        ),
        Family(
            "device_mismatch",
            N_("Tensors on different devices"),
            first_checks=(
                _check(N_("Check where the model sits (next(model.parameters()).device) and where "
                          "each input of the operator was created."), "method 5"),
                _check(N_("Look for tensors created inside forward() without device=, and buffers "
                          "not registered with register_buffer (they do not move with .to())."),
                       "method 5", "register-buffer"),
                _check(N_("Check the device of what the data loader yields."), "method 5"),
            ),
            avoid=(
                _avoid(N_("Adding .to(device) copies everywhere without knowing where the stray "
                          "tensor came from."), "method 5",
                       forbids=r"\.to\(device\)[^.]*\beverywhere\b"
                               r"|\badd(?:ing)?\b[^.]*\bcop(?:y|ies)\b"),
                _avoid(N_("Moving everything to the CPU to make it run."), "method 5",
                       forbids=r"\bmov\w*\b[^.]*\beverything\b[^.]*\bCPU\b"),
            ),
        ),
        Family(
            "dtype_mismatch",
            N_("Mismatched dtypes"),
            first_checks=(
                _check(N_("Check the dtype of each input of the operator: class targets must be "
                          "torch.long; BCE and MSE targets floating point."), "cross-entropy",
                       "bce"),
                _check(N_("Check autocast regions and .half() / .bfloat16() applied to parts of "
                          "the model."), "amp"),
                _check(N_("Check the dtype produced by the data pipeline (numpy float64 becomes "
                          "torch.float64)."), "from-numpy"),
            ),
            avoid=(
                _avoid(N_("Casting everything to float32 everywhere."), "method 5", "method 9",
                       forbids=r"\bcast\w*\b[^.]*\beverything\b|\.float\(\)[^.]*\beverywhere\b"),
                _avoid(N_("Disabling mixed precision globally without finding the operator."),
                       "method 9",
                       forbids=r"\bdisabl\w*\b[^.]*\b(?:autocast|mixed precision|amp)\b"),
            ),
        ),
        Family(
            "shape_mismatch",
            N_("Mismatched shapes"),
            first_checks=(
                _check(N_("Compare the shapes in the message with what the layer or loss "
                          "expects."), "method 5", "linear"),
                _check(N_("Check the last incomplete batch and variable sequence lengths."),
                       "method 2", "method 10"),
                _check(N_("Check squeeze / unsqueeze / view / flatten before linear layers, and "
                          "the target shape against the output shape for the loss."), "method 5",
                       "view"),
            ),
            avoid=(
                _avoid(N_("Reshaping until it runs: view and reshape can silently mix samples."),
                       "view", forbids=r"\breshap\w*\b[^.]*\buntil\b"),
                _avoid(N_("The data is corrupt."), "method 5",
                       forbids=r"\b(?:re-?download|regenerate)\b[^.]*\bdata\b"),
            ),
        ),
        Family(
            "index_out_of_bounds",
            N_("Index or target out of range"),
            first_checks=(
                _check(N_("Compare the value in the message with the size of the dimension."),
                       "method 5", topics=("index_range",)),
                _check(N_("For class targets, a value equal to C has two readings: labels "
                          "numbered 1..C, or a class the model was not built for; over the whole "
                          "dataset, min and max, whether 0 occurs and the number of distinct "
                          "labels tell them apart."), "method 7", topics=("label_readings",),
                       answered_by=("kind_known",)),
                _check(N_("For embeddings: indices against num_embeddings (vocabulary size, "
                          "padding id)."), "embedding", topics=("vocabulary",),
                       answered_by=("kind_known",)),
                _check(N_("Check that the label mapping is a bijection with the class names: "
                          "cudadiag.check_label_mapping(label_to_index, class_names)."), "method 7",
                       topics=("label_mapping",), answered_by=("kind_known",)),
            ),
            avoid=(
                WIDENING_AVOID,
                _avoid(N_("The GPU's 'device-side assert triggered' for the same data is another "
                          "bug: it is this failure, reported without the values."), "method 3",
                       "method 9", forbids=r"\b(?:another|a different|a separate) bug\b"),
            ),
        ),
        Family(
            "library_status",
            N_("CUDA library status (cuBLAS, cuDNN, ...)"),
            first_checks=(
                _check(N_("An earlier asynchronous error often surfaces as a library status: "
                          "{rerun}."), "method 3", "method 4", answered_by=("isolated",)),
                _check(N_("CUBLAS_STATUS_NOT_INITIALIZED often means out of memory at handle "
                          "creation, or an out-of-range embedding index just before."),
                       "cublas-status", "method 3"),
                _check(N_("Check the layout and dtype of the inputs (contiguity; cuDNN "
                          "NOT_SUPPORTED)."), "method 8", "cudnn"),
                _check(N_("Check the library versions shipped with the PyTorch build."), "method 2",
                       "method 12"),
            ),
            avoid=(
                _avoid(N_("The library is broken."), "method 5",
                       forbids=r"\breinstall\w*\b[^.]*\b(?:cublas|cudnn|library)\b"),
                _avoid(N_("Reinstalling CUDA."), "method 5",
                       forbids=r"\breinstall\w*\b[^.]*\bCUDA\b"),
                _avoid(N_("Disabling cuDNN for good."), "method 9",
                       forbids=r"cudnn\.enabled ?= ?False|\bdisabl\w*\b[^.]*\bcuDNN\b"),
            ),
            asynchronous=True,
        ),
        Family(
            "distributed",
            N_("Distributed / collective failure"),
            first_checks=(
                _check(N_("Find the first rank that failed and its own first error: the other "
                          "ranks only time out waiting for it."), "method 1"),
                _check(N_("Re-run with NCCL_DEBUG=INFO."), "nccl-env"),
                _check(N_("Check that every rank runs the same collectives in the same order with "
                          "the same shapes."), "distributed"),
                _check(N_("Look for a CUDA error (out of memory, device assert) inside one rank "
                          "before the collective."), "method 1"),
            ),
            avoid=(
                _avoid(N_("The network is the cause."), "method 1",
                       forbids=r"\b(?:network|interconnect|infiniband)\b[^.]*"
                               r"\b(?:cause|broken|faulty)\b"),
                _avoid(N_("Raising the timeout fixes it."), "method 1",
                       forbids=r"\b(?:rais|increas)\w*\b[^.]*\btimeout\b"),
                _avoid(N_("The rank that printed last is the culprit."), "method 1",
                       forbids=r"\b(?:last|latest) (?:rank|message)\b[^.]*\b(?:culprit|cause)\b"),
            ),
        ),
        Family(
            "driver",
            N_("Driver or device initialisation"),
            first_checks=(
                _check(N_("Check that nvidia-smi (or rocm-smi) sees the GPU."), "nvidia-smi",
                       "method 13"),
                _check(N_("Check the driver version against torch.version.cuda."),
                       "cuda-compatibility"),
                _check(N_("Check CUDA_VISIBLE_DEVICES and the device index you ask for."),
                       "cuda-env-vars"),
                _check(N_("For launch timeouts: a display watchdog on a GPU that also drives a "
                          "screen."), "cuda-runtime-errors"),
            ),
            avoid=(
                _avoid(N_("Reinstalling PyTorch before checking the driver."), "method 5",
                       forbids=r"\breinstall\w*\b[^.]*\b(?:PyTorch|torch)\b"),
                _avoid(N_("The model code is wrong."), "method 5",
                       forbids=r"\b(?:rewrite|change|fix)\b[^.]*\bmodel code\b"),
            ),
        ),
        Family(
            "cuda_graph",
            N_("CUDA graph capture or replay"),
            first_checks=(
                _check(N_("Find what synchronises or allocates inside the captured region: "
                          ".item(), .cpu(), print of a tensor, torch.cuda.synchronize(), a "
                          "data-dependent shape (nonzero, masked indexing), a new tensor on "
                          "another device; none of them is allowed while a stream captures."),
                       "cuda-graphs", "cuda-stream-capture", topics=("capture",)),
                _check(N_("Warm the code up on a side stream before capturing (a few iterations "
                          "outside the graph: lazy initialisation of cuBLAS, cuDNN and the "
                          "allocator must happen before capture)."), "cuda-graphs"),
                _check(N_("With torch.compile(mode=\"reduce-overhead\"): clone an output you "
                          "keep past the next call, or call torch.compiler.cudagraph_mark_step_"
                          "begin() before each step; mode=\"default\" runs the same code without "
                          "graphs."), "cudagraph-trees"),
                _check(N_("Capture replays fixed addresses from the graph's private memory pool: "
                          "inputs must be static tensors refilled with .copy_(), not new tensors "
                          "made each step (torch.tensor(...) from Python data, host copies)."),
                       "cuda-graphs"),
                _check(N_("Re-run without graphs to see the code's own error, if any: {rerun}."),
                       "method 4", answered_by=("isolated",)),
            ),
            isolated=N_("the original failure was a CUDA graph capture's; the isolated re-run "
                        "ran with compilation disabled, so torch.compile's graphs "
                        "(mode=\"reduce-overhead\") were not captured (torch.cuda.graph() in "
                        "the cells still captures)"),
            avoid=(
                _avoid(N_("The GPU or the driver is broken."), "cuda-stream-capture",
                       forbids=BROKEN_HARDWARE),
                _avoid(N_("The captured operator's arguments are wrong: the capture failed "
                          "before the operator ran."), "cuda-stream-capture",
                       forbids=r"\b(?:fix|change|check)\b[^.]*\b(?:arguments?|indices)\b"
                               r"[^.]*\bcaptur"),
            ),
        ),
        Family(
            "unknown",
            N_("Unrecognised error"),
            first_checks=(
                _check(N_("Find the first error in the output, not the last."), "method 1"),
                _check(N_("Name the operator that failed: {rerun}."), "method 4",
                       answered_by=("isolated",)),
                _check(N_("Record versions and backend: {env}."), "method 2"),
                _check(N_("cudadiag does not know this message yet: report it so it can be added. "
                          "{report} holds what to paste in cudadiag's issue tracker: the whole "
                          "message from its first error line, the exception type, the error code "
                          "and the versions."), "method 1", "method 2"),
            ),
            avoid=(_avoid(N_("Concluding from the last message printed."), "method 1",
                          forbids=r"\bfrom the last (?:message|error|line)\b"),),
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
    wordings: tuple[str, ...] = ()
    """Other wordings of the same text across CUDA versions."""


@dataclass(frozen=True)
class MessageForm:
    """How a runtime error is worded in messages beyond `CUDA error: <text>`."""

    distinctive: bool = False
    wordings: tuple[str, ...] = ()
    hip_text: str | None = None


MESSAGE_FORMS: dict[str, MessageForm] = {
    # distinctive: the text alone names the error (1.x's `cuda runtime error (59) : ...`,
    # TensorRT's `Cuda Runtime (<text>)`, ONNX Runtime's and Warp's `CUDA failure 900: <text>`)
    **{name: MessageForm(distinctive=True) for name in (
        "cudaErrorAssert", "cudaErrorIllegalAddress", "cudaErrorLaunchTimeout",
        "cudaErrorIllegalInstruction", "cudaErrorMisalignedAddress",
        "cudaErrorInvalidAddressSpace", "cudaErrorLaunchFailure",
        "cudaErrorNoKernelImageForDevice", "cudaErrorInvalidDeviceFunction",
        "cudaErrorUnsupportedPtxVersion", "cudaErrorInsufficientDriver",
        "cudaErrorCompatNotSupportedOnDevice", "cudaErrorSystemNotReady",
        "cudaErrorStreamCaptureUnsupported", "cudaErrorStreamCaptureInvalidated",
        "cudaErrorStreamCaptureMerge", "cudaErrorStreamCaptureUnmatched",
        "cudaErrorStreamCaptureUnjoined", "cudaErrorStreamCaptureIsolation",
        "cudaErrorStreamCaptureImplicit", "cudaErrorStreamCaptureWrongThread")},
    "cudaErrorNoDevice": MessageForm(distinctive=True,
                                     hip_text="no ROCm-capable device is detected"),
    "cudaErrorDevicesUnavailable": MessageForm(
        distinctive=True, wordings=("all CUDA-capable devices are busy or unavailable",)),
    "cudaErrorInvalidPtx": MessageForm(hip_text="invalid kernel file"),
}
"""Per cudaError name; the texts themselves come from error_codes (cudaGetErrorString, and
clr's hipGetErrorString for `hip_text`)."""


def _cuda_error(row: error_codes.ErrorCode) -> CudaError:
    form = MESSAGE_FORMS.get(row.name, MessageForm())
    # CUDA 13 ends some texts with a period that earlier versions did not print
    return CudaError(row.code, row.name, row.text.rstrip("."), row.family, row.sticky,
                     form.distinctive, form.hip_text, form.wordings)


CUDA_ERRORS: tuple[CudaError, ...] = tuple(
    _cuda_error(row) for row in error_codes.ERROR_CODES
    if row.library == "cuda_runtime" and row.code != 0)
"""Every cudaError_t of the CUDA runtime but cudaSuccess (error_codes.table)."""

CUDA_ERRORS_BY_CODE = {e.code: e for e in CUDA_ERRORS}
CUDA_ERRORS_BY_NAME = {e.name: e for e in CUDA_ERRORS}
CUDA_ERRORS_BY_NAME.update({"hip" + e.name[len("cuda"):]: e for e in CUDA_ERRORS})
CUDA_ERRORS_BY_NAME.update({row.name: CUDA_ERRORS_BY_CODE[row.code]
                            for row in error_codes.ERROR_CODES
                            if row.library == "hip" and row.code in CUDA_ERRORS_BY_CODE
                            and row.name not in CUDA_ERRORS_BY_NAME
                            and CUDA_ERRORS_BY_CODE[row.code].family == row.family})
"""HIP names too: `hipErrorX` is `cudaErrorX`'s twin, and a HIP name of its own
(`hipErrorNoBinaryForGpu`) is the CUDA error with its number and family."""


INDUCTOR_BOUNDS = (r"-?\w+ <= \w+(?: < [\w +*()-]{0,80}\w)?"
                   r"|\w+ < [\w +*()-]{0,80}\w")
"""The condition of Inductor's bounds check as its message prints it: `{lower} <= {var} <
{upper}`, `{lower} <= {var}` or `{var} < {upper}` when only one bound needs checking (the
`cond_print` of Kernel.indirect_assert, torch/_inductor/codegen/common.py, and of
CppVecKernel.indirect_assert, codegen/cpp.py); a bound is a sympy expression (`10L`, `1 + ks0`)."""


@dataclass(frozen=True)
class Signature:
    """A message pattern that decides a family. Named groups become `details`. The pattern
    is compiled, and its anchors derived, on first use: a process that classifies nothing
    (a diagnostic run that does not fail) never pays for the table's regular expressions."""

    family: str
    source: str
    """The regular expression (matched ignoring case)."""
    sticky: bool = False
    fixed: dict[str, object] = field(default_factory=dict)
    """Details that the match implies (e.g. which kind of out-of-memory)."""
    catch_all: bool = False
    """A broad row that more specific rows refine (`CUBLAS_STATUS_*`, any `"op" not
    implemented`): when a specific row matches the same line, the broad one is no second
    opinion."""
    wrapper: bool = False
    """The message only carries another error (a collective's watchdog, a launcher, an
    uncaught C++ exception): a known error right after it decides; the wrapper's own family
    counts only when nothing follows."""

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The compiled pattern."""
        return re.compile(self.source, re.IGNORECASE)

    @functools.cached_property
    def anchors(self) -> tuple[str, ...]:
        """Lower-case literals of which every match holds at least one (pattern_anchors): a
        text without any of them is not searched, and a log scanner looks only at lines that
        hold one."""
        return pattern_anchors(self.source)

    def may_match(self, lowered: str) -> bool:
        """False when `lowered` (a lower-cased text) holds none of the anchors."""
        return any(anchor in lowered for anchor in self.anchors)


def _sig(family: str, pattern: str, *, sticky: bool = False, wrapper: bool = False,
         catch_all: bool = False, known: Mapping[str, object] | None = None,
         **fixed: object) -> Signature:
    """A signature; `known` and `fixed` are the details every match of it has."""
    return Signature(family, pattern, sticky, {**(known or {}), **fixed}, catch_all, wrapper)


def pattern_anchors(pattern: str) -> tuple[str, ...]:
    """Return lower-case literals of which every match of `pattern` holds one: the longest
    literal run among its mandatory parts, or one run per branch of an alternation when that
    is longer. Raises ValueError when the pattern has no literal of at least 4 characters."""
    runs = _literal_runs(list(_sre_parser.parse(pattern, 0).data))
    plain = [r for r in runs if isinstance(r, str)]
    best: tuple[str, ...] = (max(plain, key=len),) if plain else ()
    for branch in (r for r in runs if isinstance(r, tuple)):
        if min(map(len, branch)) > min(map(len, best), default=0):
            best = branch
    anchors = tuple(dict.fromkeys(a.lower() for a in best))
    if not anchors or min(map(len, anchors)) < 4:
        raise ValueError(f"pattern {pattern!r} has no literal of 4 characters or more")
    return anchors


def _literal_runs(items: list[tuple[object, object]]) -> list[str | tuple[str, ...]]:
    """Literal runs of a parsed pattern's mandatory parts; an alternation gives a tuple of the
    longest run of each branch."""
    out: list[str | tuple[str, ...]] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            out.append("".join(current))
            current.clear()

    for op, arg in items:
        if op is _sre_constants.LITERAL:
            current.append(chr(arg))  # type: ignore[arg-type]
            continue
        flush()
        if op is _sre_constants.SUBPATTERN:
            out.extend(_literal_runs(list(arg[-1])))  # type: ignore[index]
        elif op is _sre_constants.BRANCH:
            branches = [_literal_runs(list(b)) for b in arg[1]]  # type: ignore[index]
            out.append(tuple(max((r for r in b if isinstance(r, str)), key=len, default="")
                             for b in branches))
        elif op in (_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT) and arg[0] >= 1:  # type: ignore[index]
            out.extend(r for r in _literal_runs(list(arg[2])) if isinstance(r, str))  # type: ignore[index]
    flush()
    return out


def _runtime_error_signatures() -> list[Signature]:
    """`CUDA error: <text>` / `HIP error: <text>` for every runtime error code with a family
    (the others are named by an unknown diagnosis: `named_code`)."""
    signatures = []
    # the longest text first: `operation not permitted` must not take `... when stream is
    # capturing`, which starts at the same place
    for err in sorted((e for e in CUDA_ERRORS if e.family != "unknown"),
                      key=lambda e: -len(e.text)):
        texts = [err.text, *err.wordings] + ([err.hip_text] if err.hip_text else [])
        for text in texts:
            phrase = re.escape(text)
            prefix = (r"(?:(?P<api>CUDA|HIP)(?: driver)? error: |cuda runtime error \(\d+\) : "
                      r"|THCudaCheck FAIL file=\S+ line=\d+ error=\d+ : "
                      r"|Triton Error \[(?:CUDA|HIP)\]: )")
            nccl = rf"Cuda failure (?:{err.code} )?'{phrase}'"
            plain = f"|{phrase}" if err.distinctive else ""
            code = rf"|\bCUDA error(?: code)? ?= ?{err.code}\b"
            pattern = f"(?:{prefix}{phrase}|{nccl}{plain}{code})"
            fixed: dict[str, object] = {"error_code": err.code, "cuda_error": err.name}
            if err.family == "oom":
                fixed["oom_kind"] = "runtime"
            signatures.append(_sig(err.family, pattern, sticky=err.sticky, known=fixed))
    return signatures


def _error_name_signatures() -> list[Signature]:
    """`cudaErrorAssert`, `hipErrorIllegalAddress`, ... named in a message (extensions and
    runtimes outside PyTorch print the name rather than the text)."""
    signatures = []
    for name, err in CUDA_ERRORS_BY_NAME.items():
        if err.family == "unknown":
            continue
        fixed: dict[str, object] = {"error_code": err.code, "cuda_error": err.name}
        signatures.append(_sig(err.family, rf"\b{name}\b", sticky=err.sticky, known=fixed))
    return signatures


def _status_name_signatures() -> list[Signature]:
    """The status names of the other libraries (`CUDA_ERROR_OUT_OF_MEMORY`, `ncclSystemError`,
    `CUSOLVER_STATUS_INVALID_VALUE`, `HSA_STATUS_ERROR_MEMORY_FAULT`...), each with its
    table family; listed after the message rows, which say more about the same name."""
    return [_sig(row.family, rf"\b{row.name}\b", sticky=row.sticky, status=row.name)
            for row in error_codes.ERROR_CODES
            if row.library not in ("cuda_runtime", "hip") and row.family != "unknown"]


_COMPILER_NAMESPACES = ("torch._inductor.", "torch._dynamo.", "triton.")
_MESSAGE_STARTS = {
    # CompilationError._format_message (triton/compiler/errors.py): "at {lineno}:{col}:" and
    # the kernel's source; its subclasses format theirs the same way
    "triton.compiler.errors.CompilationError": r"at \d+:\d+:",
    "triton.compiler.errors.CompileTimeAssertionFailure": r"at \d+:\d+:",
    "triton.compiler.errors.UnsupportedLanguageConstruct": r"at \d+:\d+:",
}
"""How the message of a class whose short name other libraries use too always starts."""


def _compiler_class_signatures() -> list[Signature]:
    """`CppCompileError: ...`, `triton.runtime.errors.OutOfResources: ...`: an exception class
    of the compiler's namespaces with a family of its own (error_codes' class table, the
    wrappers excepted: what they carry decides), named where a message starts."""
    return [_sig(row.family, rf"(?<![\w]){re.escape(row.name.rsplit('.', 1)[-1])}: "
                             rf"{_MESSAGE_STARTS.get(row.name, '')}",
                 compiled="inductor" if row.name.startswith("torch.") else "triton",
                 exception_class=row.name)
            for row in error_codes.EXCEPTION_CLASSES
            if row.name.startswith(_COMPILER_NAMESPACES) and not row.wrapper
            and row.family != "unknown"]


def named_code(text: str) -> tuple[error_codes.ErrorCode, int] | None:
    """The first status code that `text` names (by name, or a runtime error by its `CUDA error:`
    text), whatever its family, and where: what an unrecognised error can still say it saw."""
    best: tuple[error_codes.ErrorCode, int] | None = None
    for pattern, row in _code_mentions():
        m = pattern.search(text)
        if m and (best is None or m.start() < best[1]):
            best = (row, m.start())
    return best


@functools.cache
def _code_mentions() -> tuple[tuple[re.Pattern[str], error_codes.ErrorCode], ...]:
    """How a text names each status code, compiled on first use."""
    return tuple(
        [(re.compile(rf"\b{re.escape(row.name)}\b"), row) for row in error_codes.ERROR_CODES
         if not row.name.endswith(("Success", "SUCCESS"))]
        + [(re.compile(rf"(?:CUDA|HIP) error: {re.escape(row.text)}(?=$|[\n.])"), row)
           for row in error_codes.ERROR_CODES
           if row.library in ("cuda_runtime", "hip") and row.code != 0])


_ASSERT_LINE = (
    # CUDA/HIP kernels (`Loss.cu:240: nll_loss_forward...: block: ...`), Windows build paths
    # (`C:\\cb\\...\\Indexing.cu:1146: block: ...`, no kernel name), headers
    # (`DynamicCast.h:78`), Inductor/Triton generated kernels (`/tmp/torchinductor_x/k4/c.py:30:
    # unknown: ...`, `unknown:0: unknown: ...`), THC's long template signatures
    r"(?P<file>(?:[A-Za-z]:)?[^\s:]{1,300}):(?P<line>\d+): (?:(?P<kernel>[^\n]{0,600}?): )?"
    r"block: \[(?P<block>[\d, ]+)\], thread: \[(?P<thread>[\d, ]+)\] "
    r"Assertion `(?P<assertion>[^\n]+?)` failed"
)
_SIZE = r"[\d.]{1,12} ?[KMGTP]?i?B"
_CUDA_TYPE = r"(?:torch\.cuda\.|CUDA)\w+Tensor"
_CPU_TYPE = r"(?:torch\.(?!cuda\.)|CPU)\w+Tensor"
_CUDA_AND_CPU_TYPES = ((_CUDA_TYPE, _CPU_TYPE), (_CPU_TYPE, _CUDA_TYPE))
_TYPE_PREFIX = r"(?:torch\.(?:cuda\.)?|CUDA|CPU)"
"""Legacy tensor type strings: `torch.cuda.FloatTensor`, `torch.FloatTensor`, and 0.4's
`CUDAFloatTensor` / `CPUFloatTensor`."""
_XID_FAMILIES = (
    # NVIDIA Xid events (docs.nvidia.com/deploy/xid-errors): the faults a process sees as an
    # illegal access, and the driver or hardware events it sees as a lost device
    (13, "illegal_memory", True), (31, "illegal_memory", True),
    # 43: "a user application hits a software induced fault and must terminate"
    (43, "illegal_memory", True), (45, "driver", False), (48, "driver", False),
    (61, "driver", False), (62, "driver", False), (63, "driver", False), (64, "driver", False),
    (74, "driver", False),
    (79, "driver", False), (92, "driver", False), (94, "driver", False), (95, "driver", False),
    (119, "driver", False), (120, "driver", False),
)
_LEGACY_TYPE_PAIRS = (
    # (what comes before the first type, what comes between the two types)
    (r"Input type \(", r" and (?:weight|bias) type \("),
    (r"Expected object of type ", r" but found type "),
    (r"to have the same type as tensor for argument #\d+ '\w+'; but type ", r" does not equal "),
)
"""Messages of the 1.x era that name both tensors by their legacy type strings."""

SIGNATURES: tuple[Signature, ...] = (
    # --- device assertions: the kernel's printf line comes before the exception
    _sig("device_assert", _ASSERT_LINE, sticky=True),
    # ... cut before its condition
    _sig("device_assert", r"block: \[[\d, ]+\], thread: \[[\d, ]+\] Assertion", sticky=True),
    # a device assertion's condition alone (backtick-backtick; C's assert() quotes `x')
    _sig("device_assert", r"Assertion `(?P<assertion>[^`\n']{1,400})` failed", sticky=True),
    _sig("device_assert",
         r"(?P<file>[^\s:]{1,256}):(?P<line>\d+): (?P<kernel>[^\n]{0,256}?): "
         r"Device-side assertion `(?P<assertion>[^\n]+?)' failed", sticky=True, api="HIP"),
    _sig("device_assert",
         r"HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception\. "
         r"code: 0x1016", sticky=True, api="HIP"),
    _sig("illegal_memory",
         r"Memory access fault by GPU node-(?P<gpu_node>\d+)[^\n]*", sticky=True, api="HIP"),
    _sig("illegal_memory", r"HSA_STATUS_ERROR_(?:EXCEPTION|MEMORY_APERTURE_VIOLATION|"
                           r"MEMORY_FAULT)", sticky=True, api="HIP"),
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
    _sig("distributed", r"DistBackendError|DistNetworkError|DistStoreError", wrapper=True),
    _sig("distributed", r"Process group watchdog thread terminated with exception",
         wrapper=True),
    _sig("distributed", r"NCCL WARN (?P<reason>[^\n]+)", wrapper=True),
    _sig("distributed", r"\bNCCL Error \d+: (?P<reason>[^\n]+)"),
    _sig("distributed", r"Exception \(either an error or timeout\) detected by watchdog"),
    _sig("distributed", r"Timeout at NCCL work: \d+"),
    # Flight Recorder (ProcessGroupNCCL's heartbeat monitor): a rank's collective timed out
    _sig("distributed", r"Received a dump signal due to a collective timeout from"),
    # the store, the rendezvous and gloo
    _sig("distributed", r"The server socket has failed to (?:bind|listen)"),
    _sig("distributed", r"The client socket has (?:timed out|failed to connect)"),
    _sig("distributed", r"\bNCCL error: (?P<reason>[^\n(]+)"),
    _sig("distributed", r"Rendezvous\w*Error"),
    _sig("distributed", r"The connection to the C10d store has failed"),
    _sig("distributed", r"RuntimeError: Socket Timeout"),
    _sig("distributed", r"Timed out waiting \d+ms for (?:send|recv) operation to complete"),
    _sig("distributed", r"gloo[^\n]{0,200}Connection (?:closed|reset) by peer"),
    # torchrun's report of a child that died: the child's own error, if shown, decides
    _sig("unknown", r"ChildFailedError", wrapper=True),
    # a process started with the spawn start method (torch.multiprocessing.spawn's only one)
    # imports `__main__` afresh and cannot find a function a notebook defined there
    _sig("unknown", r"Can't get attribute '(?P<function>[^']+)' on <module '__main__'",
         pitfall="notebook_function_in_child"),
    _sig("unknown", r"terminate called after throwing an instance of '(?P<exception>[^']+)'",
         wrapper=True),
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
    _sig("oom", r"DefaultCPUAllocator: not enough memory: you tried to allocate "
                r"(?P<requested_bytes>\d+) bytes", oom_kind="cpu"),
    _sig("oom", r"No executable batch size found", oom_kind="allocator"),
    # --- operator / kernel unavailable
    _sig("dtype_mismatch",
         r"\"(?P<op>\w*nll_loss\w*)\" not implemented for '(?P<dtype>\w+)'"),
    _sig("op_unavailable", r"\"(?P<op>[\w:.]+)\" not implemented for '(?P<dtype>\w+)'",
         catch_all=True),
    _sig("op_unavailable",
         r"Could not run '(?P<op>[^']+)' with arguments from the '(?P<dispatch_key>[^']+)' "
         r"backend"),
    _sig("op_unavailable", r"operator (?P<op>\w+::\w+) does not exist"),
    _sig("op_unavailable",
         r"The operator '(?P<op>[^']+)' is not current(?:ly)? implemented for the MPS device",
         dispatch_key="MPS"),
    _sig("op_unavailable", r"No such operator (?P<op>\w+::\w+)"),
    _sig("op_unavailable", r"Not compiled with (?:GPU|CUDA) support"),
    _sig("op_unavailable", r"MPS framework doesn't support (?P<dtype>float64)", dispatch_key="MPS"),
    _sig("op_unavailable",
         r"with CUDA capability (?P<capability>sm_\d+\w*) is not compatible with the current "
         r"PyTorch installation"),
    _sig("op_unavailable", r"Unable to find code object for all current devices", api="HIP"),
    _sig("op_unavailable", r"(?P<status>CUBLAS_STATUS_ARCH_MISMATCH|CUDNN_STATUS_ARCH_MISMATCH)"),
    _sig("op_unavailable", r"undefined symbol: (?P<symbol>\S+)", pitfall="extension_binary"),
    _sig("op_unavailable",
         r"(?P<library>lib[\w.\-]{1,200}\.so[.\d]*): cannot open shared object file"),
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
    # legacy tensor type strings: one on the GPU, the other not, is a device mismatch
    *(_sig("device_mismatch", rf"{lead}(?P<device_a>{a})\)?{mid}(?P<device_b>{b})")
      for lead, mid in _LEGACY_TYPE_PAIRS for a, b in _CUDA_AND_CPU_TYPES),
    _sig("device_mismatch",
         r"Expected object of backend (?P<device_a>\w+) but got backend (?P<device_b>\w+)"),
    _sig("device_mismatch",
         r"indices should be either on cpu or on the same device as the indexed tensor"),
    _sig("device_mismatch",
         r"Tensor for argument #\d+ '(?P<argument>\w+)' is on (?P<device_a>\w+), but expected "
         r"it to be on (?P<device_b>\w+)"),
    _sig("device_mismatch", r"is on (?P<device_a>\w+), but expected them to be on "
                            r"(?P<device_b>\w+)"),
    _sig("device_mismatch", r"Placeholder storage has not been allocated on MPS device"),
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
         r"(?P<found>[^!\n]+?) ?!= ?(?P<expected>[^\n]+)"),
    _sig("dtype_mismatch", r"expected dtype (?P<expected>\w+) but got dtype (?P<found>\w+)"),
    _sig("device_mismatch", r"expected backend (?P<device_a>\w+) and dtype \w+ but got backend "
                            r"(?!(?P=device_a)\b)(?P<device_b>\w+)"),
    _sig("dtype_mismatch", r"expected backend \w+ and dtype (?P<expected>\w+) but got backend "
                           r"\w+ and dtype (?!(?P=expected)\b)(?P<found>\w+)"),
    _sig("dtype_mismatch", r"\b\w{1,30} and \w{1,30} must have the same dtype"),
    # ... and two different tensor types, wherever they are, a dtype mismatch
    *(_sig("dtype_mismatch", rf"{lead}(?P<found>{_TYPE_PREFIX}(?P<found_type>\w+Tensor))\)?"
                             rf"{mid}(?P<expected>{_TYPE_PREFIX}(?!(?P=found_type)\b)\w+Tensor)")
      for lead, mid in _LEGACY_TYPE_PAIRS),
    _sig("dtype_mismatch",
         r"Input type \((?P<found>[^)\n]{1,60})\) and (?:weight|bias) type "
         r"\((?P<expected>[^)\n]{1,60})\) should be the same", catch_all=True),
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
         r"mat1 and mat2 shapes cannot be multiplied(?: \((?P<shape_a>\d+x\d+) and "
         r"(?P<shape_b>\d+x\d+)\))?"),
    _sig("shape_mismatch",
         r"The size ?of tensor ?a \((?P<size_a>\d+)\) must match the ?size of tensor ?b "
         r"\((?P<size_b>\d+)\)(?: ?at non-singleton dimension (?P<dim>\d+))?"),
    _sig("shape_mismatch", r"size mismatch \(got input: (?P<shape_a>\[[^\]]*\]), target: "
                           r"(?P<shape_b>\[[^\]]*\])"),
    _sig("shape_mismatch",
         r"Expected input batch_size \((?P<size_a>\d+)\) to match target batch_size "
         r"\((?P<size_b>\d+)\)"),
    _sig("shape_mismatch", r"shape '(?P<shape>\[[^\]]*\])' is invalid for input of size"
                           r"(?: (?P<numel>\d+))?"),
    _sig("shape_mismatch", r"size mismatch for (?P<parameter>[\w.]+): copying a param "
                           r"(?:with shape|of) "),
    _sig("shape_mismatch", r"size mismatch, m1: \[[^\]]*\], m2: \[[^\]]*\]"),
    _sig("shape_mismatch", r"Sizes of tensors must match except in dimension \d+"),
    _sig("shape_mismatch", r"Given groups=\d+, weight of size \[?[\d, ]*\]?, expected input"
                           r"\[[^\]]*\] to have \d+ channels"),
    _sig("shape_mismatch", r"Using a target size \(torch\.Size\(\[[^\]]*\]\)\) that is "
                           r"different to the input size"),
    _sig("shape_mismatch", r"Target size \(torch\.Size\(\[[^\]]*\]\)\) must be the same as "
                           r"input size"),
    _sig("shape_mismatch", r"0D or 1D target tensor expected, multi-target not supported"),
    _sig("shape_mismatch", r"only batches of spatial targets supported"),
    _sig("shape_mismatch", r"Expected target size (?P<shape>\[[^\]]*\]), got"),
    _sig("shape_mismatch", r"Dimension out of range \(expected to be in range of"),
    # --- begin: compiled code and CUDA graphs (issue 24 items 2, 3) ----------------------------
    # Inductor's C++ kernels check their indices on the CPU with TORCH_CHECK
    # (torch/_inductor/codegen/cpp.py, `index out of bounds: {cond_print}`: INDUCTOR_BOUNDS)
    _sig("index_out_of_bounds",
         r"kernel, (?P<generated_file>[^\s,]{1,400}\.cpp):(?P<line>\d+), index out of bounds: "
         rf"(?P<bounds>{INDUCTOR_BOUNDS})", compiled="inductor_cpp"),
    # ... and without the kernel's place: TORCH_CHECK's c10::Error says only the message
    _sig("index_out_of_bounds", rf"(?<![`\"])\bindex out of bounds: (?P<bounds>{INDUCTOR_BOUNDS})",
         compiled="inductor_cpp"),
    # Inductor's Triton kernels assert the same condition on the device (tl.device_assert);
    # the assertion line itself is read by the device_assert signatures above
    _sig("device_assert", r"Assertion `index out of bounds: (?P<bounds>[^`\n]{1,200})` failed",
         sticky=True, compiled="triton"),
    # the compiler's wrappers carry the error of the generated code, or of the compiler
    _sig("unknown", r"torch\._inductor\.exc\.InductorError|\bInductorError: ",
         wrapper=True, compiled="inductor"),
    _sig("unknown", r"torch\._dynamo\.exc\.BackendCompilerFailed|backend='inductor' raised:",
         wrapper=True, compiled="inductor"),
    # Triton's resource limits (triton/runtime/errors.py: "out of resource: {name}, Required:
    # {required}, Hardware limit: {limit}") and the device targets ptxas does not know
    _sig("op_unavailable", r"OutOfResources: out of resource: (?P<resource>[\w ]+), Required: "
                           r"(?P<required>\d+), Hardware limit: (?P<limit>\d+)",
         compiled="triton"),
    # ptxas's own line when it does not know the target (as XLA's CompileGpuAsmUsingPtxAs,
    # xla/stream_executor/cuda/cuda_asm_compiler.cc, recognises it: "ptxas fatal   : Value '"
    # and "is not defined for option 'gpu-name'"), whoever ran it; Triton runs `ptxas-blackwell`
    # for sm_100 and later (triton/backends/nvidia/compiler.py get_ptxas)
    _sig("op_unavailable", r"ptxas(?:-blackwell)?(?: fatal)? *: Value '(?P<capability>sm_\w+)' "
                           r"is not defined for option 'gpu-name'", compiled="triton"),
    # Triton's ptxas run as Python reports its failure when no PTXASError wraps it (make_cubin:
    # `subprocess.run([ptxas, ..., f'--gpu-name={arch}', ...], check=True)`)
    _sig("op_unavailable", r"[/\\]ptxas(?:-blackwell)?(?:\.exe)?', [^\]\n]{0,400}"
                           r"'--gpu-name=(?P<capability>sm_\w+)'[^\]\n]{0,400}\]' returned "
                           r"non-zero exit status", compiled="triton"),
    # devices below Triton's minimum (torch/_inductor/exc.py GPUTooOldForTriton, earlier
    # torch/_inductor/scheduler.py), a Triton that is missing (exc.py TritonMissing) or does
    # not know the CUDA toolkit it found (triton/backends/nvidia/compiler.py ptx_get_version)
    _sig("op_unavailable", r"Found (?P<device_name>[^\n]{1,80}?) which is too old to be supported "
                           r"by the triton GPU compiler(?:[^\n]*?your device is of CUDA "
                           r"capability (?P<capability>\d+\.\d+))?", compiled="triton"),
    _sig("op_unavailable", r"Cannot find a working triton installation", compiled="triton"),
    _sig("op_unavailable", r"Triton only support CUDA 10\.0 or higher(?:, but got CUDA version: "
                           r"(?P<toolkit>[\d.]+))?", compiled="triton"),
    # the compiler's own exception classes (error_codes' table of torch._inductor, torch._dynamo
    # and triton classes), named where their message starts
    *_compiler_class_signatures(),
    # CUDA graphs: the runtime's stream-capture errors (cudaErrorStreamCapture*, 900-907 in
    # driver_types.h) as libraries reword them, and PyTorch's own refusals during capture
    *(_sig("cuda_graph", pattern) for pattern in (
        r"operation not permitted when stream is capturing",
        r"operation (?:failed|would make the legacy stream depend on a capturing blocking "
        r"stream) due to a previous error during capture",
        r"\b(?:stream )?capture (?:sequence )?was invalidated",
        r"\bcudaErrorStreamCapture\w+|\bcudaErrorCapturedEvent\b",
        # driver_types.h enum cudaStreamCaptureStatus: the state PyTorch's checks print
        r"\bcudaStreamCaptureStatusInvalidated\b",
        r"(?:during|in) (?:a )?CUDA graph capture",
        r"CUDA graphs? (?:capture|replay) (?:failed|is not supported)",
    )),
    # --- end: compiled code -------------------------------------------------------------------
    # --- index out of bounds (CPU twins of device asserts)
    _sig("index_out_of_bounds", r"Target (?P<value>-?\d+) (?:is )?out of bounds"),
    _sig("index_out_of_bounds", r"index out of range in self"),
    _sig("index_out_of_bounds", r"Tried to access index (?P<value>-?\d+) out of table with "
                                r"(?P<size>\d+)"),
    _sig("index_out_of_bounds", r"index out of range at \S*/TH\w*/"),
    _sig("index_out_of_bounds", r"invalid argument \d+: out of range at \S*/TH\w*/"),
    _sig("index_out_of_bounds", r"(?<!list )(?<!tuple )(?<!string )\bindex out of range\b",
         catch_all=True),
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
         r"(?P<status>CUBLAS_STATUS_\w+)(?: when calling `(?P<call>[^`(]+))?", catch_all=True),
    _sig("library_status", r"(?P<status>CUDNN_STATUS_\w+)", catch_all=True),
    _sig("library_status", r"cuDNN Frontend error: (?P<reason>[^\n]+)"),
    _sig("library_status", r"\b(?P<library>cublas|cudnn|cusparse|cufft|curand|cusolver) "
                           r"runtime error : (?P<reason>[^\n]+?)(?: at \S+:\d+)?(?=\n|$)"),
    _sig("library_status", r"Error in CuDNN\. Status Code: +(?P<status_code>\d+)"),
    _sig("library_status", r"cuBLAS API failed(?: with status (?P<status_code>\d+))?"),
    _sig("library_status", r"On entry to (?P<call>\w+) parameter number \d+ had an illegal value"),
    _sig("library_status", r"MIOpen(?:\(HIP\): | )Error(?: \[(?P<call>\w+)\])?", api="HIP"),
    _sig("library_status", r"!!!! kernel execution error\. \(m: \d+, n: \d+, k: \d+, error: "
                           r"(?P<status_code>\d+)\)"),
    _sig("library_status", r"Unable to find a valid cuDNN algorithm to run convolution"),
    _sig("library_status", r"GET was unable to find an engine to execute this computation"),
    _sig("library_status", r"(?P<status>CUSOLVER_STATUS_\w+|CUSPARSE_STATUS_\w+|CUFFT_\w+)",
         catch_all=True),
    _sig("library_status",
         r"(?P<status>HIPBLAS_STATUS_\w+|rocblas_status_\w+|miopenStatus\w+|HIPFFT_\w+)",
         api="HIP", catch_all=True),
    # --- the kernel's log (dmesg) and nvidia-smi, pasted beside PyTorch's messages
    *(_sig(family, rf"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>{xid})\b", sticky=sticky)
      for xid, family, sticky in _XID_FAMILIES),
    _sig("illegal_memory", r"amdgpu[^\n]{0,120}(?:page fault|protection fault|VM fault)",
         sticky=True, api="HIP"),
    _sig("illegal_memory", r"GCVM_L2_PROTECTION_FAULT_STATUS", sticky=True, api="HIP"),
    _sig("driver", r"Unable to determine the device handle for GPU[\w:.]*: (?P<reason>[^\n]+)"),
    _sig("driver", r"Failed to initialize NVML: (?P<reason>[^\n]+)"),
    # --- driver and initialisation
    _sig("driver", r"Found no NVIDIA driver on your system"),
    _sig("driver", r"NVIDIA driver on your system is too old(?: \(found version "
                   r"(?P<driver_version>\d+)\))?"),
    _sig("driver", r"Torch not compiled with CUDA enabled", pitfall="cpu_only_build"),
    _sig("driver", r"No (?:CUDA|HIP) GPUs are available"),
    _sig("driver", r"(?:nvmlInit|NVML)[^\n]{0,80}INTERNAL ASSERT FAILED"),
    _sig("driver", r"INTERNAL ASSERT FAILED at \"[^\"\n]*c10/cuda/driver_api\.cpp\""),
    _sig("driver", r"\bNVMLError_(?P<nvml_error>\w+)"),
    _sig("driver", r"CUDA unknown error - this may be due to an incorrectly set up environment"),
    _sig("driver", r"Attempting to deserialize object on a CUDA device but "
                   r"torch\.cuda\.is_available\(\) is False"),
    _sig("driver", r"Cannot re-initialize CUDA in forked subprocess"),
    _sig("driver", r"CUDA call failed lazily at initialization"),
    _sig("driver", r"Attempting to deserialize object on CUDA device \d+ but "
                   r"torch\.cuda\.device_count\(\) is \d+"),
    _sig("driver", r"CUDA initialization: (?P<reason>[^\n]+)"),
    _sig("driver", r"NVIDIA-SMI has failed"),
    # --- CUDA graphs: PyTorch's own messages (the runtime's 900-908 come from the table)
    _sig("cuda_graph", r"accessing tensor output of CUDAGraphs that has been overwritten by a "
                       r"subsequent run"),
    _sig("cuda_graph", r"Attempting CUDA graph capture of step\(\) for an instance of "
                       r"(?P<optimizer>\w+)"),
    _sig("cuda_graph", r"Cannot call CUDAGeneratorImpl::\w+ during CUDA graph capture"),
    _sig("cuda_graph", r"CUDA graphs must be captured on a non-default stream"),
    # --- ROCm libraries without kernels for the GPU (rocBLAS's Tensile library)
    _sig("op_unavailable", r"rocBLAS error: Cannot read\s+"
                           r"(?P<library>[^\n]*?TensileLibrary\w*\.dat)"
                           r"(?:[^\n]*? for GPU arch : (?P<gpu_arch>gfx\w+))?", api="HIP"),
    _sig("op_unavailable", r"rocBLAS error: Could not initialize Tensile host", api="HIP"),
    # --- extension binaries built for another torch, CUDA or Python
    _sig("op_unavailable", r"xFormers can't load C\+\+/CUDA extensions\. xFormers was built "
                           r"for:\s+PyTorch (?P<built_for>[^\n(]+?) \(you have "
                           r"(?P<installed>[^)\n]+)\)", pitfall="extension_binary"),
    _sig("op_unavailable", r"xFormers can't load C\+\+/CUDA extensions",
         pitfall="extension_binary"),
    _sig("op_unavailable", r"The detected CUDA version \((?P<toolkit>[\d.]+)\) mismatches the "
                           r"version that was used to compile\s+PyTorch "
                           r"\((?P<torch_cuda>[\d.]+)\)", pitfall="extension_binary"),
    _sig("op_unavailable", r"Cuda extensions are being compiled with a version of Cuda that "
                           r"does not match", pitfall="extension_binary"),
    _sig("op_unavailable", r"Couldn't load custom C\+\+ ops", pitfall="extension_binary"),
    _sig("op_unavailable", r"The installed version of bitsandbytes was compiled without GPU "
                           r"support", pitfall="extension_binary"),
    _sig("op_unavailable", r"DLL load failed while importing (?P<module>\w+)"),
    *_runtime_error_signatures(),
    *_error_name_signatures(),
    *_status_name_signatures(),
    # --- last resort: wordings users type or tools outside PyTorch print
    _sig("oom", r"\bout of (?:the )?(?:GPU |device )?memory\b", oom_kind="unknown",
         catch_all=True),
)
STICKY_SIGNATURES = tuple(s for s in SIGNATURES if s.sticky)
WRAP_MIN_WIDTH = 60
"""Lines at least this long, several of the same length, are taken as hard-wrapped."""
WRAPPED_WINDOW = 6000
"""How far after a wrapper (in characters) the error it carries may start."""

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

ERROR_LINE = re.compile(r"^[ \t]*(?P<exception_type>[A-Za-z_][\w.]*(?:Error|Exception|Failure"
                        r"|Interrupt|Exit))(?::[ \t]*(?P<message>[^\n]*))?$", re.MULTILINE)
"""A line that states an error (Python's last traceback line, `ImportError: ...`): what an
unrecognised error shows as its evidence."""

# Hints that say something about how the message was produced, not which family it is.
HINT_PATTERNS: dict[str, re.Pattern[str]] = {
    "async_hint": re.compile(r"might be asynchronously reported at some other API call"),
    "blocking_hint": re.compile(r"For debugging consider passing "
                                r"(?P<blocking_hint>\w+=\d)"),
    "dsa_hint": re.compile(r"Compile with `TORCH_USE_(?:CUDA|HIP)_DSA`"),
    "log_file_hint": re.compile(r"run with CUDA_LOG_FILE=stderr"),
    "cuda_error_name": re.compile(r"Search for `(?P<cuda_error_name>(?:cuda|hip)Error\w+)'"),
}
UNSHOWN_DETAILS = frozenset(HINT_PATTERNS) - {"cuda_error_name"}
"""Details that only say how PyTorch worded the message: kept in the record, not listed
with the first error (its advice already follows from them; the error's name is shown)."""

# Fragmentation is likely when the allocator holds, reserved but unused, at least this share
# of what was asked for: the memory exists but not as one block.
FRAGMENTATION_RATIO = 1.0
FRAGMENTATION_CHECK = _check(
    N_("Memory reserved by PyTorch but unallocated ({reserved_unallocated}) is at least what was "
       "requested ({requested}): fragmentation is likely; try "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."), "cuda-memory")
RUNTIME_OOM_CHECK = _check(
    N_("This is CUDA's own out-of-memory (context creation, cuBLAS/cuDNN workspaces, NCCL, an "
       "extension), not PyTorch's allocator: check other processes on the GPU and memory held "
       "outside PyTorch."), "cuda-runtime-errors", "cuda-memory")
LOG_FILE_CHECK = _check(
    N_("Run it again with CUDA_LOG_FILE=stderr (CUDA 12.9 or newer, as the message asks): the "
       "driver then writes why the call failed, in words, next to the error code."),
    "cuda-error-log")
"""For the hint PyTorch adds to a CUDA error since pytorch/pytorch#181011 (HINT_PATTERNS
`log_file_hint`)."""
ARCH_CHECK = _check(
    N_("The device's capability {capability} is not in the build's arch list ({arch_list}): "
       "install a PyTorch build that supports it."), "arch-list", "install", "method 5")


@dataclass(frozen=True)
class Pitfall:
    """A known mistake that a message gives away, whatever its family: a signature names it
    (`pitfall=` in its fixed details); the diagnosis then says so and its checks come first."""

    name: str
    title: str
    checks: tuple[Advice, ...]
    isolated: str
    """What an isolated re-run of the cell shows instead (it cannot fall into the pitfall)."""
    avoid: tuple[Advice, ...] = ()
    """What not to conclude, instead of the family's (when the family's would mislead)."""
    family_checks: bool = True
    """Whether the family's own first checks follow the pitfall's."""


PITFALLS: dict[str, Pitfall] = {
    p.name: p
    for p in (
        Pitfall(
            "notebook_function_in_child",
            N_("A process started with the 'spawn' start method cannot load a function defined "
               "in the notebook"),
            checks=(
                _check(N_("torch.multiprocessing.spawn starts each process with the 'spawn' start "
                          "method: it imports __main__ afresh and looks the function up there, and "
                          "a notebook's __main__ is no file, so the function is not found. The "
                          "training code never ran: this says nothing about it."),
                       "multiprocessing", "start-methods"),
                _check(N_("Re-run the cell with %cuda_isolate: cudadiag runs every rank as its own "
                          "process forked from a fresh interpreter that holds the notebook's "
                          "function (blocking launches, the tracer and the prechecks in each rank) "
                          "and names the rank that failed first."), "method 4",
                       answered_by=("isolated",)),
                _check(N_("Or move the function (and what it uses) to a .py file beside the "
                          "notebook and import it from there: `from ddp_worker import worker`."),
                       "start-methods"),
            ),
            isolated=N_("the original failure was the spawn start method's (its processes could "
                        "not load the notebook's function); here each rank was forked with it, so "
                        "this is what the ranks themselves do"),
        ),
        Pitfall(
            "extension_binary",
            N_("An extension binary built for another torch, CUDA or Python"),
            checks=(
                _check(N_("A compiled extension (flash-attn, xformers, bitsandbytes, apex, a "
                          "custom op) links against the torch, CUDA and Python it was built with: "
                          "compare them with this environment's, `python -c \"import torch, sys; "
                          "print(torch.__version__, torch.version.cuda, sys.version)\"` ({env} "
                          "shows them too)."), "cpp-extension", "install"),
                _check(N_("Install the extension's build for exactly this torch (its wheel names "
                          "torch, CUDA, the C++ ABI and Python), or build it from source against "
                          "the installed torch (`pip install --no-build-isolation ...`); an "
                          "upgrade of torch needs the extension rebuilt."), "cpp-extension"),
                _check(N_("Building it: the nvcc on PATH must be the CUDA version torch was built "
                          "with (torch.version.cuda)."), "cpp-extension", "cuda-compatibility"),
            ),
            isolated=N_("the original failure was the extension's binary (built for another "
                        "torch, CUDA or Python); the isolated run loads the same one"),
            avoid=(
                _avoid(N_("The model code is wrong: the extension never ran."), "cpp-extension",
                       forbids=r"\b(?:rewrite|change|fix)\b[^.]*\bmodel code\b"),
                _avoid(N_("The GPU or the driver is broken."), "cpp-extension",
                       forbids=BROKEN_HARDWARE),
            ),
        ),
        Pitfall(
            "cpu_only_build",
            N_("This PyTorch is a build without CUDA"),
            checks=(
                _check(N_("The torch the program imported has no CUDA support: check it with "
                          "`python -c \"import torch; print(torch.__file__, torch.__version__, "
                          "torch.version.cuda)\"` run by the same interpreter (a `+cpu` version, "
                          "or torch.version.cuda None; {env} shows it too)."), "hip",
                       "method 2"),
                _check(N_("Install a CUDA build in this environment (the pip command for your "
                          "CUDA version from pytorch.org's install selector); a notebook kernel "
                          "may run another environment than your terminal: `import sys; "
                          "sys.executable`."), "install"),
                _check(N_("No GPU at hand? Keep the tensors on the CPU: `device = 'cuda' if "
                          "torch.cuda.is_available() else 'cpu'`."), "cuda-semantics"),
            ),
            isolated=N_("the original failure was the build's (no CUDA in it); the isolated "
                        "run uses the same build"),
            avoid=(
                _avoid(N_("The driver or the GPU is at fault: this build never looks for them."),
                       "install", forbids=BROKEN_HARDWARE),
                _avoid(N_("The model code is wrong."), "method 5",
                       forbids=r"\b(?:rewrite|change|fix)\b[^.]*\bmodel code\b"),
            ),
            family_checks=False,
        ),
    )
}


# --- Advice that fits the operator and the values -------------------------------------------
# Read by advice.py. `OPERATOR_ADVICE`: first checks (and conclusions to avoid) by the kind of
# index an operator takes; `OPERATOR_HINTS`: which kinds a piece of text names (a kernel, an
# assertion, a message, the function of the library frame that raised); `VALUE_PATTERNS`:
# shapes of the offending values, stated in words. Placeholders: {low}, {high}, {last}
# (= high - 1), {wider} (= high + 1), {ordinal} (`28th` for high 27), {min}, {max},
# {values}, {ignore_index}, {seen} (`; these targets span 0..3` when the tensor's range is
# known).


@dataclass(frozen=True)
class OperatorAdvice:
    """The first checks for the operators that take one kind of index."""

    kind: str
    ops: tuple[str, ...]
    """aten operator names (without `aten::` and overload); () for a kind no operator names
    alone (token_target: a class-target operator whose classes are the model's vocabulary)."""
    checks: tuple[Advice, ...]
    avoid: tuple[Advice, ...] = ()


@dataclass(frozen=True)
class IndexValues:
    """What is known of an index argument that broke its operator's contract."""

    low: int
    high: int
    """Valid values v satisfy low <= v < high."""
    offending: tuple[int, ...]
    min: int | None = None
    max: int | None = None
    """Of the whole index tensor, when known (the tracer's value range, the batch)."""
    ignore_index: int | None = None

    @property
    def largest(self) -> int:
        """The largest value seen: the tensor's max when known, else the largest offending."""
        return self.max if self.max is not None else max(self.offending)


@dataclass(frozen=True)
class ValuePattern:
    """A shape of the offending values that says what went wrong."""

    name: str
    kinds: tuple[str, ...]
    matches: Callable[[IndexValues], bool]
    advice: Advice
    group: str
    """At most one pattern of a group applies: the first that matches."""


TOKEN_VOCABULARY = _check(
    N_("The tokenizer (or the dictionary) and the model must share one vocabulary: len(tokenizer) "
       "against the model's vocab_size, counted once every token is in — a tokenizer from another "
       "checkpoint gives ids the model does not have."), "hf-tokenizer", "embedding",
    topics=("vocabulary",))
SPECIAL_TOKENS = _check(
    N_("Special tokens added to the tokenizer (pad, eos, new tokens) need "
       "model.resize_token_embeddings(len(tokenizer)) afterwards."), "hf-resize-embeddings",
    "hf-tokenizer", topics=("special_tokens",))
IGNORE_INDEX = _check(
    N_("Padding and unlabeled targets must equal the loss's ignore_index (default −100), not −1 "
       "or 0."), "cross-entropy", topics=("ignore_index",), answered_by=("no_negative_values",))
NEGATIVE_INDICES = _check(
    N_("Negative indices: advanced indexing (t[idx]) counts them from the end, gather, scatter "
       "and index_select do not; a −1 used as padding or 'not found' is out of range."),
    "gather", "index-select", topics=("negative",), answered_by=("no_negative_values",))

OPERATOR_ADVICE: tuple[OperatorAdvice, ...] = (
    OperatorAdvice(
        "class_target",
        ops=("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
             "nll_loss2d_backward", "nll_loss", "nll_loss_nd", "nll_loss2d",
             "cross_entropy_loss"),
        checks=(
            _check(N_("Class targets must lie in [0, C) or equal ignore_index, C = the output "
                      "width (logits.shape[1]). A target equal to C has two readings: labels "
                      "numbered 1..C, or a class the model was not built for; over the whole "
                      "dataset, not one batch, min and max, whether 0 occurs and the number of "
                      "distinct labels against the class names tell them apart."),
                   "cross-entropy", "method 7", topics=("index_range", "label_readings")),
            _check(N_("Fix the mapping where the labels are made, not the model: check it is a "
                      "bijection with the class names (cudadiag.check_label_mapping("
                      "label_to_index, class_names)), and keep the failing batch as a case that "
                      "lives with the project (cudadiag.keep_case(batch, 'bad_label', "
                      "reason=...))."), "method 7", topics=("label_mapping", "keep_case")),
            IGNORE_INDEX,
            _check(N_("In a language model the targets are token ids and C is the vocabulary: "
                      "compare the largest id with the vocabulary the model was built with (a "
                      "token added after it, such as <eos>, has the id C)."), "cross-entropy",
                   "embedding", topics=("vocabulary",), answered_by=("no_vocabulary",)),
        ),
        avoid=(SUBTRACTING_AVOID,),
    ),
    OperatorAdvice(
        "token_target",
        ops=(),
        checks=(
            _check(N_("These targets are token ids: the loss's classes are the model's "
                      "vocabulary (an embedding of as many rows takes the same ids). Compare the "
                      "largest id in the data with the vocabulary the model was built with."),
                   "cross-entropy", "embedding", "method 5", topics=("index_range",)),
            TOKEN_VOCABULARY,
            SPECIAL_TOKENS,
            IGNORE_INDEX,
        ),
    ),
    OperatorAdvice(
        "embedding",
        ops=("embedding", "embedding_dense_backward", "embedding_backward", "embedding_bag",
             "_embedding_bag", "_embedding_bag_forward_only", "embedding_renorm_"),
        checks=(
            _check(N_("Token ids must lie in [0, num_embeddings): compare ids.max() with the "
                      "embedding's num_embeddings (model.get_input_embeddings().num_embeddings)."),
                   "embedding", topics=("index_range",)),
            TOKEN_VOCABULARY,
            SPECIAL_TOKENS,
            _check(N_("padding_idx must be a valid id (< num_embeddings), and the padding value "
                      "in the batches must equal it."), "embedding", topics=("padding",)),
            NEGATIVE_INDICES,
        ),
    ),
    OperatorAdvice(
        "index",
        ops=("index_select", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_",
             "scatter_reduce", "scatter_reduce_", "index", "index_put", "index_put_",
             "_index_put_impl_", "take", "take_along_dim", "index_add", "index_add_",
             "index_copy", "index_copy_", "index_fill", "index_fill_"),
        checks=(
            _check(N_("Each index must be smaller than the size of the dimension it indexes: "
                      "compare index.max() with tensor.shape[dim] for the dim the operator uses."),
                   "gather", "index-select", topics=("index_range",)),
            _check(N_("An index equal to the size is a value the table was not sized for. Taken "
                      "from a mapping (characters, categories, ids numbered as they are found), "
                      "it is a new category in the data, not an off-by-one: compare what the "
                      "mapping holds (len(stoi)) with the table's rows. Computed from another "
                      "tensor (argmax, lengths, offsets), it must refer to this tensor's shape, "
                      "after any slicing or filtering."), "method 7", "method 5",
                   topics=("index_readings",)),
            NEGATIVE_INDICES,
        ),
    ),
)

OPERATOR_HINTS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), kinds)
    for pattern, kinds in (
        (r"nll_loss|cross_entropy|n_classes|cur_target|ClassNLLCriterion|"
         r"Target -?\d+ is out of bounds", ("class_target",)),
        (r"\bembedding|Embedding", ("embedding",)),
        # CUDA's embedding forward is an index_select: its kernel names both
        (r"indexSelect|srcSelectDimSize|index out of range in self", ("embedding", "index")),
        (r"scatter|gather|idx_dim|IndexKernel|index out of bounds|index_select|index_put|"
         r"out of bounds for dimension", ("index",)),
    )
)


def _pattern(name: str, kinds: tuple[str, ...], matches: Callable[[IndexValues], bool],
             text: str, *sources: str, group: str, topics: tuple[str, ...]) -> ValuePattern:
    return ValuePattern(name, kinds, matches, _check(text, *sources, topics=topics), group)


@dataclass(frozen=True)
class ModelFactAdvice:
    """A check worded with the model's own configuration (the `ModelFacts` a library's
    trainer gave cudadiag.integrations), for the operators that take one kind of index.
    Placeholders: those of VALUE_PATTERNS, {fact} (the fact's value), {num_labels_from}
    (`config.num_labels`, `hparams.num_classes`: where the label count was read), {where}
    (` (dataset index 45)` when the batch's indices are known) and {tokenizer} (`,
    len(tokenizer) = 70` when a tokenizer was given)."""

    name: str
    kinds: tuple[str, ...]
    fact: str
    """The ModelFacts attribute the row needs known."""
    matches: Callable[[IndexValues, int], bool]
    """The offending values against the fact's value."""
    advice: Advice


BATCH_KEYS: dict[str, tuple[str, ...]] = {
    "class_target": ("labels", "label", "label_ids", "targets", "target"),
    "token_target": ("labels", "label_ids"),
    "embedding": ("input_ids", "decoder_input_ids"),
}
"""The batch keys the Hugging Face models read each kind of index from (a Trainer's
`args.label_names` come first for targets)."""

MODEL_FACT_ADVICE: tuple[ModelFactAdvice, ...] = (
    ModelFactAdvice(
        "labels_reach_num_labels", ("class_target",), "num_labels",
        lambda v, n: v.high == n and v.largest >= n,
        _check(N_("The model has {num_labels_from} = {fact}, so its classes are 0..{last}; labels "
                  "reach {max}{where}. Look at that sample's label and at how the dataset's "
                  "labels were turned into ids (one label2id over every split): fix the mapping "
                  "where the data is prepared; {num_labels_from} counts the class names, it does "
                  "not follow the largest label."), "method 7", topics=("model_labels",))),
    ModelFactAdvice(
        "labels_padded_with_pad_token", ("class_target", "token_target"), "pad_token_id",
        lambda v, pad: pad in v.offending and v.ignore_index != pad,
        _check(N_("Labels {values}{where} equal the tokenizer's pad_token_id = {fact}: labels "
                  "padded like input ids. Hugging Face's data collators "
                  "(DataCollatorForTokenClassification, DataCollatorForSeq2Seq) pad labels with "
                  "−100 (label_pad_token_id), the loss's ignore_index; pad them that way."),
               "hf-data-collator", "cross-entropy", topics=("ignore_index",))),
    ModelFactAdvice(
        "labels_padded_not_ignored", ("class_target", "token_target"), "num_labels",
        lambda v, _: any(x < 0 for x in v.offending) and v.ignore_index not in v.offending,
        _check(N_("Labels {values}{where}: Hugging Face's data collators "
                  "(DataCollatorForTokenClassification, DataCollatorForSeq2Seq) pad labels with "
                  "−100 (label_pad_token_id), the loss's ignore_index; a custom collator or "
                  "dataset that pads with another value gives targets the loss rejects."),
               "hf-data-collator", "cross-entropy", topics=("ignore_index",))),
    ModelFactAdvice(
        "ids_reach_vocab_size", ("embedding", "token_target"), "vocab_size",
        lambda v, n: v.high == n and v.largest >= n,
        _check(N_("The model has config.vocab_size = {fact}{tokenizer}; ids reach {max}{where}: "
                  "a tokenizer of another checkpoint, or tokens added to the tokenizer without "
                  "model.resize_token_embeddings(len(tokenizer)) afterwards."),
               "hf-tokenizer", "hf-resize-embeddings", topics=("vocabulary",))),
)


VALUE_PATTERNS: tuple[ValuePattern, ...] = (
    _pattern(
        "labels_without_zero", ("class_target",),
        lambda v: v.min is not None and v.min >= 1 and v.largest == v.high,
        N_("target {high} for {high} output columns (valid [{low}, {high}); these targets span "
           "{min}..{max}, no 0): labels numbered 1..{high}, or a class the model was not built "
           "for. Over the whole dataset: 0 never a label and {high} distinct values 1..{high} "
           "reads as a 1..{high} encoding; {wider} distinct values, 0 among them, as an unexpected "
           "{ordinal} class"), "method 7", "cross-entropy", group="range",
        topics=("index_range", "label_readings")),
    _pattern(
        "label_equals_classes", ("class_target",),
        lambda v: v.largest == v.high,
        N_("target {high} for {high} output columns (valid [{low}, {high}){seen}): a class the "
           "model was not built for, or labels numbered 1..{high}. Over the whole dataset: {wider} "
           "distinct values, 0 among them, reads as an unexpected {ordinal} class; 0 never a label "
           "and {high} distinct values 1..{high} as a 1..{high} encoding"), "method 7",
        "cross-entropy", group="range", topics=("index_range", "label_readings")),
    _pattern(
        "targets_far_beyond", ("class_target",),
        lambda v: v.largest > v.high,
        N_("targets reach {max} for {high} output columns (valid [{low}, {high})): too far for a "
           "1..{high} encoding — a marker for positions to skip (then pass ignore_index={max}) or "
           "ids of another numbering, to map onto [0, {high}) where the labels are made"),
        "method 7", "cross-entropy", group="range", topics=("index_range", "label_readings")),
    _pattern(
        "padding_not_ignored", ("class_target", "token_target"),
        lambda v: -1 in v.offending and v.ignore_index != -1,
        N_("−1 among the targets, and the loss skips only ignore_index={ignore_index}: if −1 marks "
           "padding or unlabeled positions, pad with {ignore_index} or pass ignore_index=-1; if it "
           "is what a lookup returned for a label it did not find (dict.get(label, -1)), the "
           "mapping misses a label"),
        "cross-entropy", "method 7", group="negative", topics=("index_range", "ignore_index")),
    _pattern(
        "target_id_is_vocabulary_size", ("token_target",),
        lambda v: v.largest == v.high,
        N_("a target token id equals the vocabulary size ({high}): the loss's {high} classes are "
           "the model's vocabulary (its embedding has {high} rows), so this is a token the model "
           "was not built with, not one class more — a token given its id after the model was "
           "sized (<eos>, pad, a special token): count the vocabulary once every token is in, "
           "before the model is built, or give that token an id the model has"), "embedding",
        "hf-tokenizer", "method 5", group="range", topics=("index_range",)),
    _pattern(
        "target_ids_beyond_vocabulary", ("token_target",),
        lambda v: v.largest > v.high,
        N_("target token ids reach {max} for a vocabulary of {high}: the targets were made by "
           "another tokenizer or dictionary than the model's"), "hf-tokenizer", "method 5",
        group="range", topics=("index_range", "vocabulary")),
    _pattern(
        "id_is_vocabulary_size", ("embedding",),
        lambda v: v.largest == v.high,
        N_("a token id equals the vocabulary size ({high}): a token given its id after the "
           "embedding was sized (pad, eos, a special token) — count the vocabulary once every "
           "token is in, before the model is built, or resize the embedding to len(tokenizer)"),
        "embedding", "hf-resize-embeddings", group="range", topics=("index_range",)),
    _pattern(
        "ids_beyond_vocabulary", ("embedding",),
        lambda v: v.largest > v.high,
        N_("token ids reach {max} for an embedding of {high}: the tokenizer and the model do not "
           "share a vocabulary (another checkpoint, another tokenizer)"), "embedding",
        "hf-tokenizer", group="range", topics=("index_range", "vocabulary")),
    _pattern(
        "index_is_dimension_size", ("index",),
        lambda v: v.largest == v.high,
        N_("an index equals the size of the dimension it indexes ({high}; valid [{low}, {high})). "
           "Taken from a mapping (characters, categories, ids numbered as they are found), it is "
           "a {ordinal} value where the table holds {high} — a new category in the data, not an "
           "off-by-one: count what the mapping holds (len(stoi), the distinct values) against the "
           "table's {high} rows and find the new one. Computed (a length, an offset), it may be "
           "off by one"), "method 7", "method 5", group="range",
        topics=("index_range", "index_readings")),
    _pattern(
        "indices_beyond", ("index",),
        lambda v: v.largest > v.high,
        N_("indices reach {max} for a dimension of {high} (valid [{low}, {high})): they were made "
           "for another tensor — another table, the size before a slice or a filter, a global id "
           "used as a local one"), "method 5", group="range",
        topics=("index_range", "index_readings")),
    _pattern(
        "negative_indices", ("embedding", "index"),
        lambda v: v.low == 0 and any(x < 0 for x in v.offending),
        N_("negative indices {values}: this operator does not wrap them like Python; a −1 is "
           "often a padding or 'not found' marker — mask those positions first"), "gather",
        "index-select", group="negative", topics=("negative",)),
)


def operator_advice(kind: str) -> OperatorAdvice | None:
    """Return the first checks for operators taking index kind `kind`, or None."""
    return next((a for a in OPERATOR_ADVICE if a.kind == kind), None)


# What guards.py says after a broken contract: what to check, in the words of docs/method.md.
GUARD_ADVICE: dict[str, Advice] = {
    "class_targets": _check(
        N_("Check the label encoding: a 1..{classes} encoding instead of 0..{last}, or an "
           "unexpected extra class (over the whole dataset: min, max, whether 0 occurs, how many "
           "distinct values); fix the mapping where the labels are made "
           "(cudadiag.check_label_mapping), and do not widen the output layer or subtract 1 "
           "everywhere to make this pass"),
        "method 7"),
    "all_ignored": _check(N_("Check the padding or the masking of this batch"), "cross-entropy"),
    "index_range": _check(N_("Check the vocabulary size, the padding id and where the indices "
                             "were built"), "embedding", "method 5"),
    "same_device": _check(N_("Move the stray ones where they are created rather than adding "
                             "copies at the call"), "method 5"),
}


@dataclass(frozen=True)
class ProcessEnd:
    """How a process ended without a Python exception of its own: an exit code (negative: the
    signal that killed it, as Python and torchrun write it; 128+N as a shell writes it)."""

    codes: tuple[int, ...]
    words: str
    """What it means, in the user's words (`killed by signal 9 — ...`)."""
    checks: tuple[str, ...] = ()
    """What to check first when a process of a job ended so."""


PROCESS_ENDS: tuple[ProcessEnd, ...] = (
    # the kernel's OOM killer sends SIGKILL (man 5 proc: oom_score; dmesg: "Out of memory:
    # Killed process"); so do a scheduler over its memory limit and `kill -9`
    ProcessEnd((-9, 137), N_("killed by signal 9 (SIGKILL) — often the host's out-of-memory "
                             "killer; check `dmesg`"),
               (N_("Look for the host's out-of-memory killer on that node: `dmesg -T | grep -i "
                   "-e 'out of memory' -e 'killed process'`; under a scheduler, the job's memory "
                   "limit (SLURM: `sacct -j JOB -o JobID,MaxRSS,ReqMem,State`)."),
                N_("Measure one rank's host memory: data loader workers and their prefetching, "
                   "datasets or checkpoints loaded into RAM by every rank (torch.load with "
                   "mmap=True, map_location)."),
                N_("This is host (CPU) memory, not the GPU's: a CUDA out-of-memory raises an "
                   "exception instead."))),
    # abort(): a C++ exception no one caught (`terminate called after throwing`), an assert
    # in a library, NCCL's async error handling tearing the process down
    ProcessEnd((-6, 134), N_("aborted (signal 6, SIGABRT) — an uncaught C++ exception or a "
                             "library's assert; the lines just before it say which"),
               (N_("Read that rank's last lines before it ended: `terminate called after "
                   "throwing`, `what():`, a library's assertion, NCCL's watchdog."),)),
    ProcessEnd((-11, 139), N_("crashed with a segmentation fault (signal 11, SIGSEGV) — native "
                              "code (an extension, a driver, a data loader worker) read bad "
                              "memory"),
               (N_("Re-run that rank with `python -X faulthandler` for the native stack."),
                N_("Check compiled extensions were built for this torch and CUDA, and try the "
                   "data loader with num_workers=0."))),
    ProcessEnd((-7, 135), N_("crashed with a bus error (signal 7, SIGBUS) — often a full "
                             "/dev/shm (a container's shared memory)"),
               (N_("Check the shared memory: `df -h /dev/shm` (docker: --shm-size or "
                   "--ipc=host); data loader workers pass batches through it."),)),
    ProcessEnd((-15, 143), N_("stopped by signal 15 (SIGTERM) — the launcher stopping it after "
                              "another process failed, or the scheduler"),
               (N_("Look for the process that failed before it, or the scheduler's reason "
                   "(time limit, preemption)."),)),
    ProcessEnd((1,), N_("exited with status 1 without a traceback in this log — its error was "
                        "printed elsewhere (its own log, stderr not captured)"),
               (N_("Find that rank's own output: torchrun keeps each rank's stdout and stderr "
                   "with `--tee 3` or `--log-dir DIR`, and writes its traceback to the error "
                   "file when main is decorated with torch.distributed.elastic's @record."),)),
)
PROCESS_ENDS_BY_CODE = {code: end for end in PROCESS_ENDS for code in end.codes}


def process_end_words(code: int) -> Text:
    """What an exit code means (PROCESS_ENDS), else `exited with status N` or `killed by
    signal N`: a sentence to keep (its English, which remembers its message)."""
    end = PROCESS_ENDS_BY_CODE.get(code)
    if end is not None:
        return Text(end.words)
    if code < 0:
        return msg("killed by signal {signal}", signal=-code)
    return msg("exited with status {status}", status=code)


# Lines a log scanner (`cudadiag explain`) looks at: those holding a signature's anchor, an
# exception line, or torchrun's failure summary.
EXTRA_LOG_ANCHORS = ("error:", "exception:", "error ", "(first observed failure)")


def _minimal_anchors(anchors: set[str]) -> tuple[bytes, ...]:
    """Drop the anchors that hold a shorter one: finding the shorter finds them too."""
    kept = [a for a in anchors if not any(o != a and o in a for o in anchors)]
    return tuple(sorted(a.encode() for a in kept))


@functools.cache
def log_anchors() -> tuple[bytes, ...]:
    """The anchors a log line must hold one of to be read (derived on first use)."""
    return _minimal_anchors({a for s in SIGNATURES for a in s.anchors} | set(EXTRA_LOG_ANCHORS))

# What a log line reporting an error holds (at least one, lower case): `cudadiag explain`
# looks only at lines holding one of these, then at the signatures' anchors. A test checks
# that the evidence line of every real message in tests/data holds one.
LOG_KEYS = (
    b"error", b"assert", b"fail", b"exception", b"memory", b"nccl", b"cuda", b"expected",
    b"driver", b"unable", b"must match", b"fault", b"mismatch", b"invalid", b"out of range",
    b"xid", b"cannot be", b"illegal", b"timed out", b"should be the same",
)

# Pasted text is read after two rewrites, so one English pattern serves every copy:
# full-width and typographic punctuation become ASCII, and translated or machine-translated
# wordings of PyTorch's messages (forums, translated blog posts) become PyTorch's own words.
PUNCTUATION = str.maketrans({
    "：": ":", "（": "(", "）": ")", "，": ",", "“": '"', "”": '"', "‘": "'", "’": "'",
    "！": "!", "［": "[", "］": "]", "；": ";", "　": " ", "＂": '"', "＇": "'", "｀": "`",
})
TRANSLATED_PHRASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), english) for pattern, english in (
        # zh
        (r"(?:预期|期望)所有(?:的)?张量(?:都)?(?:位于|在)同一(?:个)?设备上",
         "Expected all tensors to be on the same device"),
        (r"张量\s*a\s*的大小\s*\((\d+)\)\s*必须与张量\s*b\s*的大小\s*\((\d+)\)\s*在非单例维度\s*(\d+)"
         r"\s*上匹配",
         r"The size of tensor a (\1) must match the size of tensor b (\2) at non-singleton "
         r"dimension \3"),
        (r"mat1\s*和\s*mat2\s*(?:的)?形状无法相乘", "mat1 and mat2 shapes cannot be multiplied"),
        (r'"(\w+)"\s*类型没有实现\s*"([\w:.]+)"\s*(?:操作)?', "\"\\2\" not implemented for '\\1'"),
        (r"设备(?:端|侧)断言(?:被|已)?触发", "device-side assert triggered"),
        (r"遇到(?:了)?非法(?:的)?内存访问", "an illegal memory access was encountered"),
        (r"CUDA\s*(?:显存|内存)不足", "CUDA out of memory"),
        # ja
        (r"デバイス側の?アサーションが(?:トリガーされました|発生しました)",
         "device-side assert triggered"),
        (r"CUDA\s*(?:の)?メモリ不足", "CUDA out of memory"),
    )
)
