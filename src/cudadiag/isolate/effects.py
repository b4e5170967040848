"""What known calls do beyond their return value, as tables: side effects on the machine
(files, processes, network), process-wide state (seeds, flags, the simulated device), and
which calls change their arguments or receiver in place.

Names are qualified the way a cell's imports resolve them (`np.save` after `import numpy as
np` is `numpy.save`; `sim.start` after `sim = simulated_cuda()` is
`cudadiag.testing.simulated_cuda().start`). Patterns are shell-style (`subprocess.*`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fnmatch import fnmatchcase

from cudadiag.i18n import N_


@dataclass(frozen=True)
class CallRule:
    """A call that acts on the machine, and when it does."""

    reason: str
    mode_arg: int | None = None
    """The call writes only when its mode (this positional argument, or `mode=`) writes."""
    needs_destination: bool = False
    """The call writes only when given a destination (`df.to_csv()` alone returns text)."""


WRITES = N_("writes a file")
DELETES = N_("deletes files")
MOVES = N_("moves or renames files")
MAKES_DIRECTORY = N_("creates a directory")
STARTS_PROCESS = N_("starts a process")
NETWORK = N_("reaches the network")
DOWNLOADS = N_("downloads files")

SIDE_EFFECT_CALLS: dict[str, CallRule] = {
    **{name: CallRule(WRITES, mode_arg=1)
       for name in ("open", "io.open", "gzip.open", "bz2.open", "lzma.open", "codecs.open")},
    **{f"os.{name}": CallRule(DELETES) for name in ("remove", "unlink", "rmdir", "removedirs")},
    **{f"os.{name}": CallRule(MOVES) for name in ("rename", "renames", "replace")},
    **{f"os.{name}": CallRule(MAKES_DIRECTORY) for name in ("mkdir", "makedirs")},
    **{f"os.{name}": CallRule(STARTS_PROCESS)
       for name in ("system", "popen", "spawn*", "exec*", "posix_spawn*", "startfile")},
    "os.kill*": CallRule(N_("signals a process")),
    "os.truncate": CallRule(WRITES),
    "os.symlink": CallRule(N_("creates a link")),
    "os.link": CallRule(N_("creates a link")),
    "os.chmod": CallRule(N_("changes file permissions")),
    "os.chown": CallRule(N_("changes file ownership")),
    "pathlib.Path*.rename": CallRule(MOVES),
    "pathlib.Path*.replace": CallRule(MOVES),
    "shutil.copy*": CallRule(N_("copies files")),
    "shutil.move": CallRule(MOVES),
    "shutil.rmtree": CallRule(DELETES),
    "shutil.make_archive": CallRule(WRITES),
    "shutil.unpack_archive": CallRule(WRITES),
    "shutil.chown": CallRule(N_("changes file ownership")),
    "subprocess.*": CallRule(STARTS_PROCESS),
    **{f"{module}.*": CallRule(NETWORK)
       for module in ("requests", "httpx", "aiohttp", "urllib.request", "http.client", "ftplib",
                      "smtplib")},
    **{f"{module}.*": CallRule(N_("logs to an experiment tracker"))
       for module in ("wandb", "mlflow")},
    "logging.FileHandler": CallRule(WRITES),
    "logging.basicConfig": CallRule(WRITES, needs_destination=True),
    "socket.socket": CallRule(NETWORK),
    "socket.create_connection": CallRule(NETWORK),
    "torch.hub.*": CallRule(DOWNLOADS),
    "wget.download": CallRule(DOWNLOADS),
    "gdown.download": CallRule(DOWNLOADS),
    **{name: CallRule(WRITES)
       for name in ("torch.save", "torch.jit.save", "torch.onnx.export", "numpy.save",
                    "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "pickle.dump",
                    "cloudpickle.dump", "dill.dump", "joblib.dump", "json.dump", "marshal.dump",
                    "matplotlib.pyplot.savefig", "torch.utils.tensorboard.SummaryWriter")},
}
"""Calls by qualified name."""

SIDE_EFFECT_METHODS: dict[str, CallRule] = {
    "write_text": CallRule(WRITES),
    "write_bytes": CallRule(WRITES),
    "touch": CallRule(N_("creates a file")),
    "unlink": CallRule(DELETES),
    "rmdir": CallRule(DELETES),
    "mkdir": CallRule(MAKES_DIRECTORY),
    "symlink_to": CallRule(N_("creates a link")),
    "hardlink_to": CallRule(N_("creates a link")),
    "open": CallRule(WRITES, mode_arg=0),
    "savefig": CallRule(WRITES),
    "save_pretrained": CallRule(WRITES),
    "push_to_hub": CallRule(NETWORK),
    "tofile": CallRule(WRITES),
    "save": CallRule(WRITES, needs_destination=True),
    **{f"to_{kind}": CallRule(WRITES, needs_destination=True)
       for kind in ("csv", "json", "parquet", "pickle", "excel", "hdf", "feather", "stata", "sql",
                    "html", "latex", "markdown", "orc", "xml", "netcdf", "zarr")},
}
"""Methods by name, whatever the receiver (its type is unknown to the AST)."""

DESTINATION_KEYWORDS = frozenset({"path", "path_or_buf", "buf", "excel_writer", "fname", "file",
                                  "filename", "con", "fp"})

PROCESS_STATE_CALLS: dict[str, str] = {
    **{name: N_("seeds a random generator")
       for name in ("torch.manual_seed", "torch.random.manual_seed", "torch.seed",
                    "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "random.seed",
                    "numpy.random.seed", "transformers.set_seed", "accelerate.utils.set_seed",
                    "lightning.seed_everything", "lightning.pytorch.seed_everything",
                    "pytorch_lightning.seed_everything")},
    **{name: N_("sets a random generator's state")
       for name in ("torch.set_rng_state", "torch.random.set_rng_state",
                    "torch.cuda.set_rng_state", "torch.cuda.set_rng_state_all",
                    "random.setstate", "numpy.random.set_state")},
    **{name: N_("sets a torch default")
       for name in ("torch.set_default_dtype", "torch.set_default_device",
                    "torch.set_default_tensor_type", "torch.set_grad_enabled",
                    "torch.autograd.set_grad_enabled", "torch.use_deterministic_algorithms",
                    "torch.set_deterministic_debug_mode", "torch.set_float32_matmul_precision",
                    "torch.set_num_threads", "torch.set_num_interop_threads",
                    "torch.autograd.set_detect_anomaly", "torch.set_anomaly_enabled")},
    "torch.backends.*": N_("sets a torch.backends flag"),
    "torch.cuda.set_device": N_("selects the current CUDA device"),
    "torch.cuda.set_per_process_memory_fraction": N_("limits CUDA memory"),
    "cudadiag.testing.simulated_cuda().start": N_("starts the simulated device"),
    "cudadiag.testing.simulated_cuda().stop": N_("stops the simulated device"),
    "os.chdir": N_("changes the working directory"),
    **{name: N_("changes the environment")
       for name in ("os.putenv", "os.unsetenv", "os.environ.update", "os.environ.setdefault",
                    "os.environ.pop", "os.environ.clear")},
    **{f"sys.path.{name}": N_("changes the import path")
       for name in ("append", "insert", "extend", "remove", "pop", "clear")},
    "sys.setrecursionlimit": N_("sets the recursion limit"),
}
"""Calls that set state every later cell sees, whatever names they read."""

PROCESS_STATE_TARGETS: dict[str, str] = {
    "torch.backends.*": N_("sets a torch.backends flag"),
    "os.environ": N_("changes the environment"),
    "sys.path": N_("changes the import path"),
}
"""Assignment, augmented assignment and `del` targets (subscripts stripped) that set state
every later cell sees."""

ARGUMENT_CHANGING_FUNCTIONS: dict[str, int] = {
    "random.shuffle": 0,
    "numpy.random.shuffle": 0,
    "numpy.copyto": 0,
    "numpy.fill_diagonal": 0,
    "numpy.put": 0,
    "numpy.place": 0,
    "numpy.putmask": 0,
    "heapq.heap*": 0,
    "bisect.insort*": 0,
    "torch.nn.init.*": 0,
    "torch.nn.utils.prune.*": 0,
    "torch.nn.utils.weight_norm": 0,
    "torch.nn.utils.spectral_norm": 0,
    "torch.nn.utils.parametrize.register_parametrization": 0,
    "torch.nn.utils.vector_to_parameters": 1,
}
"""Module functions that change one argument in place (by position), besides every module
function whose name ends with `_` (`torch.nn.init.normal_(w)`, `clip_grad_norm_(params)`),
which changes its first."""

ARGUMENT_CHANGING_METHODS: dict[str, int] = {"shuffle": 0}
"""Methods that change an argument in place (`rng.shuffle(words)`)."""

READ_ONLY_METHODS = frozenset({
    # tensors and arrays: results are new objects or views; the receiver is unchanged
    "item", "tolist", "numpy", "size", "dim", "numel", "nelement", "element_size", "stride",
    "is_contiguous", "sum", "mean", "std", "var", "max", "min", "argmax", "argmin", "amax",
    "amin", "all", "any", "prod", "cumsum", "norm", "abs", "exp", "log", "sqrt", "pow",
    "softmax", "log_softmax", "tanh", "sigmoid", "relu", "view", "view_as", "reshape",
    "flatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "contiguous", "clone",
    "detach", "matmul", "mm", "bmm", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf",
    "nonzero", "unique", "topk", "gather", "index_select", "masked_select", "expand",
    "expand_as", "repeat", "chunk", "unbind", "type_as", "long", "int", "bool", "astype",
    # modules: iterators over their tensors (what they reach is an alias, not a change)
    "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules", "state_dict",
    # containers, strings and paths
    "keys", "values", "items", "get", "count", "index", "copy", "startswith", "endswith",
    "split", "strip", "lstrip", "rstrip", "lower", "upper", "splitlines", "join", "format",
    "encode", "decode", "isdigit", "isalpha", "exists", "is_file", "is_dir", "read_text",
    "read_bytes", "head", "tail", "describe",
})
"""Methods that leave their receiver unchanged. Every other method may change it: in-place
tensor methods (`requires_grad_()`, any name ending with `_`), `.to()` / `.cuda()` / `.cpu()`
/ `.half()` / `.train()` / `.eval()` on modules, `zero_grad()`, an optimizer's `step()`,
`load_state_dict()`, container mutators (`append`, `extend`, `update`, `insert`, `pop`,
`clear`, `setdefault`, `add`, `remove`, `sort`), a file's `read()`, and user methods."""

PURE_BUILTINS = frozenset({"print", "len", "sorted", "sum", "min", "max", "list", "tuple",
                           "set", "frozenset", "dict", "str", "repr", "int", "float", "bool",
                           "isinstance", "issubclass", "type", "id", "hash", "abs", "round",
                           "any", "all", "enumerate", "zip", "range", "reversed", "map",
                           "filter", "format", "divmod", "pow", "chr", "ord", "hasattr",
                           "getattr", "callable", "vars", "dir"})
"""Builtins that change none of their arguments."""

VALUE_FREE_BUILTINS = frozenset({"len", "str", "int", "float", "bool", "repr", "hash", "id",
                                 "type", "isinstance", "issubclass", "range", "round", "abs",
                                 "format", "callable", "hasattr", "ord", "chr"})
"""Builtins whose result holds none of their arguments (no alias between them)."""


def side_effect(call: ast.Call, qualified: str | None) -> str | None:
    """Return why `call` acts on the machine (e.g. "writes a file"), or None.

    `qualified` is the called name as the cell's imports resolve it (None when unknown).
    """
    if _keyword_is_true(call, "download"):
        return f"{DOWNLOADS} (download=True)"
    rule = next((rule for pattern, rule in SIDE_EFFECT_CALLS.items()
                 if qualified and fnmatchcase(qualified, pattern)), None)
    if rule is None and isinstance(call.func, ast.Attribute):
        rule = SIDE_EFFECT_METHODS.get(call.func.attr)
    if rule is None:
        return None
    if rule.mode_arg is not None:
        return _mode_effect(call, rule)
    if rule.needs_destination and not call.args and not any(
            k.arg in DESTINATION_KEYWORDS for k in call.keywords):
        return None
    return rule.reason


def process_state_call(qualified: str | None) -> str | None:
    """Return what the call named `qualified` sets for the whole process, or None."""
    return _lookup(PROCESS_STATE_CALLS, qualified)


def process_state_target(qualified: str | None) -> str | None:
    """Return what assigning to (or deleting) `qualified` sets for the whole process."""
    return _lookup(PROCESS_STATE_TARGETS, qualified)


def changed_argument(qualified: str | None) -> int | None:
    """Return the position of the argument a module function changes in place, or None."""
    if qualified is None:
        return None
    if qualified.rsplit(".", 1)[-1].endswith("_") and not qualified.endswith("__"):
        return 0
    return next((position for pattern, position in ARGUMENT_CHANGING_FUNCTIONS.items()
                 if fnmatchcase(qualified, pattern)), None)


def _lookup(table: dict[str, str], qualified: str | None) -> str | None:
    if qualified is None:
        return None
    return next((what for pattern, what in table.items() if fnmatchcase(qualified, pattern)),
                None)


def _mode_effect(call: ast.Call, rule: CallRule) -> str | None:
    assert rule.mode_arg is not None
    mode: ast.expr | None = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None and len(call.args) > rule.mode_arg:
        mode = call.args[rule.mode_arg]
    if mode is None:
        return None  # the default mode reads
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return rule.reason if set(mode.value) & set("wax+") else None
    return N_("may write a file (its mode is decided at run time)")


def _keyword_is_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)
