"""The Incident: everything cudadiag learns about one failure, as a typed dataclass tree.

Producers (the kernel hook, the isolated worker, the CLI runner) build one through
cudadiag.diagnose; consumers (the store, the renderers, the exporter) read its attributes.
`to_dict()` / `from_dict()` give a JSON round trip; `SCHEMA` is the version of that layout,
and `from_dict` upgrades the records older versions wrote. Only `Diagnosis.details` stays a
mapping: its keys are the group names of knowledge.py's patterns.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import traceback as tb_module
import types
import typing
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from cudadiag.errors import IncidentSchemaError
from cudadiag.i18n import texts

SCHEMA = 2
"""2: the batch and the repro are typed records (the repro's file is `path`, not
`notebook`); 1: the first release, whose records `from_dict` still reads."""


@dataclass
class Frame:
    """One traceback frame, mapped to a notebook cell when it came from one."""

    file: str
    line: int
    function: str
    source: str | None = None
    cell: int | None = None
    """Execution count of the cell (`In[N]`) the frame belongs to, when it is a cell."""
    user: bool = True
    """False for frames inside PyTorch, IPython, the standard library and cudadiag."""

    def location(self) -> str:
        """Return `In[N], line L` for cells, `file:line` otherwise."""
        if self.cell is not None:
            return f"In[{self.cell}], line {self.line}"
        return f"{self.file}:{self.line}"


@dataclass
class LaterError:
    """An error that came after the incident's first error in the same process."""

    type: str
    message: str
    family: str
    at: str
    cell: int | None = None
    probable_consequence: bool = True
    rank: int | None = None
    """In a multi-process run, the rank that raised it (another process than the first)."""


@dataclass
class ErrorInfo:
    """The first error: what Python raised and where it saw it."""

    type: str
    message: str
    """First line of the message."""
    text: str
    """Full text of the message (and any device output captured with it)."""
    traceback: list[Frame] = field(default_factory=list)
    reported_at: Frame | None = None
    later: list[LaterError] = field(default_factory=list)

    @classmethod
    def from_exception(
        cls,
        exc: BaseException,
        locate_cell: Callable[[str], int | None] = lambda filename: None,
        cell_source: Callable[[int], str | None] = lambda cell: None,
        raised: BaseException | None = None,
    ) -> ErrorInfo:
        """Build the error node of an incident from an exception and its traceback.

        `locate_cell(filename)` returns the execution count of the cell a code object was
        compiled from (None for files); `cell_source(n)` returns that cell's source.
        `raised` is the exception the program raised, when `exc` is a cause or context of
        it (`raise ... from exc`, an error raised while handling `exc`): the traceback then
        runs from the program's frames, through the frame that caught `exc`, to where `exc`
        arose (chained_traceback()).
        """
        frames: list[Frame] = []
        entries = chained_traceback(exc, raised) if raised is not None else \
            list(tb_module.walk_tb(exc.__traceback__))
        for summary in tb_module.StackSummary.extract(iter(entries)):
            frame = _frame_from_summary(summary, locate_cell, cell_source)
            cells = [f.cell for f in frames if f.cell is not None]
            if frame.file in CELL_MAGIC_BODIES and cells:
                frame = _in_cell_magic(frame, cells[-1], cell_source)
            frames.append(frame)
        user_frames = [f for f in frames if f.user]
        text = str(exc)
        return cls(
            type=qualified_type_name(exc),
            message=text.strip().splitlines()[0] if text.strip() else "",
            text=text,
            traceback=frames,
            reported_at=user_frames[-1] if user_frames else (frames[-1] if frames else None),
        )


@dataclass
class Alternative:
    """Another family that matched the first error about as strongly as the chosen one."""

    family: str
    evidence: str


@dataclass
class Diagnosis:
    """What the error means: family, whether the process is finished, what to check."""

    family: str
    sticky: bool
    first_checks: list[str]
    avoid: list[str]
    details: dict[str, Any]
    summary: str
    asynchronous: bool = False
    """The error is reported after the fact: the traceback line is an observation point."""
    evidence: str = ""
    """The line of text that decided the family."""
    alternatives: list[Alternative] = field(default_factory=list)
    """Families that fit the first error about as well: the diagnosis is not confident."""
    rank: int | None = None
    """In a multi-process log, the rank whose error came first."""


@dataclass
class TensorArg:
    """One argument of an operator call."""

    name: str
    kind: str
    """`tensor`, `scalar`, `list` or `other`."""
    shape: list[int] | None = None
    dtype: str | None = None
    device: str | None = None
    stride: list[int] | None = None
    contiguous: bool | None = None
    value: str | None = None
    """Scalars as text; integer tensors on the CPU as `min..max`."""


@dataclass
class OpCall:
    """One operator call recorded by the tracer before the one that raised."""

    name: str
    tensors: list[int] = field(default_factory=list)
    """Its tensor arguments, as positions in OpInfo.recent_tensors."""
    scalars: list[str] = field(default_factory=list)
    """`name=value` of its other arguments (integers, dims, flags), kept for the calls
    nearest the failure."""


@dataclass
class BatchPosition:
    """Where in the batch the offending index of a failing operator sits: the position the
    operator names (in its own, often flattened, argument) as an element of the batch's
    tensor."""

    tensor: str
    """The batch tensor's path: `batch['labels']`."""
    index: list[int]
    """The element of that tensor: `[2, 10]` (row 2, token 10)."""
    dataset_index: int | None = None
    """The dataset index of the row, when the batch's indices are known."""

    def describe(self) -> str:
        """Return `batch['labels'][2, 10] (row 2: dataset index 45)`."""
        where = f"{self.tensor}[{', '.join(map(str, self.index))}]"
        if self.dataset_index is None:
            return where
        return texts.msg("{element} (row {row}: dataset index {index})", element=where,
                         row=self.index[0], index=self.dataset_index)


@dataclass
class OpInfo:
    """The operator that raised, and the last ones before it."""

    name: str
    args: list[TensorArg] = field(default_factory=list)
    recent: list[OpCall] = field(default_factory=list)
    precheck: str | None = None
    """The precise contract violation found before the kernel ran, when one was found."""
    recent_tensors: list[str] = field(default_factory=list)
    """Each distinct tensor argument of the recent calls once: `float32[8, 16]@cuda:0`."""
    vocabularies: list[int] = field(default_factory=list)
    """The row counts of the embedding tables the run looked up before the failure, in the
    order first looked up. The first is the model's input vocabulary (a model looks its
    tokens up before positions or token types): a loss with as many classes takes token
    ids."""
    in_batch: BatchPosition | None = None
    """The precheck's offending position as an element of the batch (a token
    classification's flattened target position 74 is `labels[2, 10]`), when the batch in
    flight holds the operator's index tensor."""


@dataclass
class StepInfo:
    """Where in the training loop the error happened."""

    iteration: int | None = None
    last_completed: int | None = None
    batch_index: int | None = None
    last_incomplete: bool | None = None
    """The batch is smaller than the first one of its loader."""
    is_last: bool | None = None
    """The last step of a loader whose length is known."""
    loader: str | None = None
    framework: str | None = None
    """The library whose loop ran the step (`transformers.Trainer`, `lightning.Trainer`)."""
    epoch: int | None = None
    global_step: int | None = None
    """Optimizer steps completed (the library's own count)."""
    micro_step: int | None = None
    """The batch's place in its gradient accumulation, from 0."""
    accumulation: int | None = None
    """Batches per optimizer step."""


@dataclass
class ModelFacts:
    """What a library's model and trainer say of the data they expect, read from their
    configuration without running user code."""

    model: str
    """The model's class name."""
    num_labels: int | None = None
    vocab_size: int | None = None
    pad_token_id: int | None = None
    problem_type: str | None = None
    tokenizer_length: int | None = None
    """len(tokenizer) of the Trainer's tokenizer or processing class."""
    label_names: list[str] | None = None
    """The Trainer's `args.label_names`, when set."""
    num_labels_from: str = "config.num_labels"
    """Where num_labels was read (`hparams.num_classes` for a LightningModule's)."""


@dataclass
class LoopInfo:
    """One `for` or `while` loop around the failing line, with its variables at the raise."""

    kind: str
    """`for` or `while`."""
    line: int
    header: str
    """The loop's first source line as written (indentation kept)."""
    values: dict[str, str] = field(default_factory=dict)
    """Targets of a `for`, counters of a `while` -> their value as text (tensors and other
    objects described by type and shape, never by their data)."""


@dataclass
class FrameContext:
    """One user frame of the failure: the loops around its failing line and its scalars."""

    file: str
    line: int
    function: str
    cell: int | None = None
    statement: str = ""
    """The failing statement's source lines as written (indentation kept)."""
    statement_line: int = 0
    """The line the statement starts on (`line` may be a later line of it)."""
    loops: list[LoopInfo] = field(default_factory=list)
    """Outermost first."""
    scalars: dict[str, str] = field(default_factory=dict)
    """The frame's other ints, floats, bools and short strings, as text."""
    scalars_omitted: int = 0
    """Scalars left out to keep the record short."""

    def location(self) -> str:
        """Return `In[N], line L` for cells, `file:line` otherwise."""
        return Frame(self.file, self.line, self.function, cell=self.cell).location()


@dataclass
class LoopContext:
    """Where in its loops the failure happened, read from the user frames at the raise."""

    frames: list[FrameContext] = field(default_factory=list)
    """Outermost first; the last one raised."""
    frames_omitted: int = 0
    """Outer frames left out (deep recursion)."""


@dataclass
class TensorSummary:
    """One tensor of a batch: metadata always, values only on the CPU and within budget."""

    path: str
    """Where it sits in the batch, written as Python would reach it: `batch["input_ids"]`."""
    shape: list[int]
    dtype: str
    device: str
    stride: list[int]
    contiguous: bool
    numel: int
    min: float | None = None
    max: float | None = None
    negatives: int | None = None
    distinct: int | None = None
    nan: int | None = None
    inf: int | None = None
    values_skipped: str | None = None
    """Why values were not read (on a GPU, above the size budget)."""
    counts: list[list[int]] | None = None
    """[value, count] pairs of an integer tensor with few distinct values (the picture of
    targets against their valid range)."""
    max_at: list[int] | None = None
    """The dataset indices of the rows holding the max (a batch whose indices are known)."""
    min_at: list[int] | None = None
    """...and of those holding the min."""

    @property
    def is_integer(self) -> bool:
        """True for integer dtypes (indices, targets), whose min and max are values."""
        return self.dtype.startswith(("int", "uint"))


@dataclass
class BatchSummary:
    """A batch's structure and its tensors (what `cudadiag.summarize()` returns)."""

    structure: str
    tensors: list[TensorSummary] = field(default_factory=list)
    others: dict[str, str] = field(default_factory=dict)
    """Non-tensor leaves by path: their type (and the value for short scalars)."""
    batch_size: int | None = None
    lengths: list[int] | None = None
    """Sequence lengths from an attention mask, when the batch has one (first rows)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the summary as JSON-ready dicts."""
        return dataclasses.asdict(self)

    def tensor(self, path: str) -> TensorSummary:
        """Return the summary of the tensor at `path`; raises KeyError when there is none."""
        for t in self.tensors:
            if t.path == path:
                return t
        raise KeyError(f"no tensor at {path}; paths: {[t.path for t in self.tensors]}")


@dataclass
class BatchInfo(BatchSummary):
    """The batch in flight when the error happened, as watch() saw it."""

    step: int | None = None
    indices: list[int] | None = None
    """Dataset indices of the batch, when the loader is a DataLoader."""
    kept_copy: bool = False
    """watch() kept a CPU copy of it (`--batch` can replay it)."""
    note: str | None = None
    """Why no copy was kept (too large, on a GPU)."""
    replayed: str | None = None
    """Set when the run replayed this one batch (`--batch`)."""


@dataclass(frozen=True)
class Signature:
    """What makes two failures the same failure: family, exception type, failing operator
    and, when a precheck found it, the offending value and the range it had to be in (a
    program that fails on another value reproduces another bug)."""

    family: str
    error_type: str
    op: str | None = None
    value: int | str | None = None
    valid_range: tuple[int, int] | None = None

    @classmethod
    def of(cls, incident: Incident) -> Signature:
        """The signature of an incident."""
        details = incident.diagnosis.details
        valid_range = details.get("valid_range")
        return cls(incident.diagnosis.family, incident.error.type,
                   incident.op.name if incident.op else None, details.get("value"),
                   (valid_range[0], valid_range[1]) if valid_range is not None else None)

    def matches(self, incident: Incident | None) -> bool:
        """True when `incident` fails the same way (the op, value and range are compared
        only when known here)."""
        if incident is None:
            return False
        other = Signature.of(incident)
        return (other.family == self.family and other.error_type == self.error_type
                and all(mine is None or mine == theirs for mine, theirs in (
                    (self.op, other.op), (self.value, other.value),
                    (self.valid_range, other.valid_range))))

    def to_dict(self) -> dict[str, Any]:
        """The signature as JSON-ready data."""
        return {"family": self.family, "error_type": self.error_type, "op": self.op,
                "value": self.value,
                "valid_range": list(self.valid_range) if self.valid_range else None}


@dataclass
class Observed:
    """What running a repro showed: the error it raised (its family by classify), or a
    note on why it showed none."""

    ename: str | None = None
    family: str | None = None
    evalue: str | None = None
    """The first line of the error's message."""
    note: str | None = None


@dataclass
class ReproInfo:
    """The minimized repro of an incident, once exported."""

    path: str
    """The repro notebook (.ipynb) or script (.py) as written."""
    cells: dict[str, str] = field(default_factory=dict)
    """The minimized cells by number (as text), what the repro runs."""
    reproduces: bool | None = None
    """None: not verified."""
    observed: Observed = field(default_factory=Observed)
    signature: Signature | None = None
    trials: int = 0
    stopped: str | None = None
    """Why the minimizer stopped early (`max trials`, `timeout`, `interrupted`), if it did."""
    files_read: list[str] = field(default_factory=list)
    bundled: bool = False
    """The data files were copied beside the repro."""


@dataclass
class CompatCheck:
    """One compatibility check of `cudadiag env --check`: what was compared, the verdict."""

    name: str
    """What was checked, e.g. `capability 8.6 (NVIDIA A10)`, `driver`, `torchvision`."""
    status: str
    """`pass`, `warn` (runs, with a limit), `fail` or `skip` (cannot be told here)."""
    reason: str
    fix: str = ""
    """What to install or change when it fails."""
    source: str = ""
    """Where the rule comes from."""


@dataclass
class EnvInfo:
    """The environment that produced an incident. Unknown fields say `unavailable: <why>`."""

    python: str = ""
    platform: str = ""
    torch: str = ""
    cuda: str | None = None
    hip: str | None = None
    cudnn: str | None = None
    backend: str = "cpu"
    device_name: str | None = None
    capability: str | None = None
    arch_list: list[str] = field(default_factory=list)
    device_in_arch_list: bool | None = None
    gpu_count: str | None = None
    code_revision: str | None = None
    code_dirty: bool | None = None
    extensions: dict[str, str] = field(default_factory=dict)
    cuda_initialized: bool = False
    compat: list[CompatCheck] = field(default_factory=list)
    """The compatibility checks, run for errors whose cause can be a mismatched build."""


@dataclass
class RankRecord:
    """What one rank of a multi-process run (`cudadiag run --nproc-per-node N`) did."""

    rank: int
    local_rank: int
    node: str
    """The host the rank ran on."""
    pid: int | None = None
    node_rank: int | None = None
    """In a job across nodes: the node whose agent started the rank (its `--node-rank`)."""
    outcome: str = "unknown"
    """`raised` (a Python exception), `finished` (exit status 0 or sys.exit), `stopped` (killed
    while still running, e.g. by torchrun after another rank failed), `died` (ended without an
    exception: a signal, os._exit), `unknown` (no trace of it: never started)."""
    at: str | None = None
    """When it raised, finished or was stopped (UTC, ISO 8601 with milliseconds)."""
    exit_status: int | None = None
    signal: str | None = None
    error_type: str | None = None
    message: str | None = None
    family: str | None = None
    where: str | None = None
    """The call it failed or was stopped in (`all_reduce`, `train.py:12 in main`)."""
    consequence: bool = False
    """A collective's failure, or a rank stopped because another one failed."""


@dataclass
class RunInfo:
    """How the incident was obtained."""

    mode: str
    """`kernel`, `isolated` or `cli`."""
    blocking: bool = False
    env_vars: dict[str, str] = field(default_factory=dict)
    exit_status: int | None = None
    signal: str | None = None
    wall_s: float | None = None
    cells: list[int] = field(default_factory=list)
    simulated: bool = False
    ingested_late: bool = False
    """Captured by loading the extension after the failure (from sys.last_value)."""
    batch_replay: int | None = None
    """The step whose recorded batch was the only one replayed (`--batch`)."""
    sources: dict[str, str] = field(default_factory=dict)
    """The cells that ran, by execution count (as text): what a repro starts from."""
    command: list[str] = field(default_factory=list)
    """For `cudadiag run`: the script (or `-m module`) and its arguments."""
    cwd: str | None = None
    """The working directory the program ran in (relative paths it opened start there)."""
    files_read: list[str] = field(default_factory=list)
    """Data files the program opened for reading (absolute paths, in the order first read);
    modules, the Python installation and cudadiag's own files are left out."""
    local_modules: dict[str, str] = field(default_factory=dict)
    """Modules the program imported from its own folders, not installed (`mingpt.model` ->
    its absolute path), in the order imported."""
    environ: dict[str, str | None] = field(default_factory=dict)
    """Environment variables the program's code reads by name, as it started with them
    (None: unset; a secret-named one's value is masked as `[REDACTED:NAME]`)."""
    shipped: list[str] = field(default_factory=list)
    """Names whose values were sent from the kernel instead of replaying their cells."""
    launcher: list[str] = field(default_factory=list)
    """For a multi-process run: torchrun's options (`--nproc-per-node 2 --standalone`)."""
    ranks: list[RankRecord] = field(default_factory=list)
    """For a multi-process run: every rank's outcome, in rank order."""


@dataclass
class Incident:
    """Everything cudadiag knows about one failure."""

    error: ErrorInfo
    diagnosis: Diagnosis
    run: RunInfo
    env: EnvInfo | None = None
    op: OpInfo | None = None
    step: StepInfo | None = None
    batch: BatchInfo | None = None
    model: ModelFacts | None = None
    """The model's facts, when a library's trainer ran the step (cudadiag.integrations)."""
    loop: LoopContext | None = None
    """The loops enclosing the failing line and their variables, without watch()."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")
    )
    repro: ReproInfo | None = None
    """The minimized repro, once exported: cells, path, verdict and signature."""
    schema: int = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """Return the incident as JSON-ready nested dicts and lists; `texts` holds the
        message id and arguments of each sentence it keeps (i18n/texts.py), so a reader in
        another language can write it again."""
        data = dataclasses.asdict(self)
        kept = texts.table(self)
        if kept:
            data["texts"] = kept
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        """Rebuild an incident from `to_dict()` output, or from a record an older cudadiag
        wrote (upgraded on the way). Keys this version does not know are ignored.

        Raises IncidentSchemaError when the record was written by a newer cudadiag or is not
        an incident at all.
        """
        if not isinstance(data, dict) or "error" not in data or "diagnosis" not in data:
            raise IncidentSchemaError("not an incident record (no 'error' and 'diagnosis' keys)")
        schema = data.get("schema", 1)
        if not isinstance(schema, int) or schema < 1:
            raise IncidentSchemaError(f"incident {data.get('id', '?')}: no such schema: "
                                      f"{schema!r}")
        if schema > SCHEMA:
            raise IncidentSchemaError(
                f"incident {data.get('id', '?')} was written by a newer cudadiag (schema "
                f"{schema}); this version reads schema {SCHEMA} and older. Upgrade cudadiag "
                f"(pip install -U cudadiag) to read it."
            )
        for upgrade in _UPGRADES[schema - 1:]:
            data = upgrade(data)
        if isinstance(data.get("texts"), dict):
            texts.remember(data["texts"])
        try:
            # a dataclass with eq is unhashable to mypy; the class object itself hashes
            incident: Incident = _reader(cast(Hashable, cls))(data)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise IncidentSchemaError(
                f"incident {data.get('id', '?')}: a malformed record ({exc})") from None
        return incident


def _schema_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 named the repro's file `notebook` (a script too), and the first release
    kept every argument of each recent operator call (now: each distinct tensor once)."""
    repro = data.get("repro")
    if isinstance(repro, dict) and "notebook" in repro:
        data = {**data, "repro": {**{k: v for k, v in repro.items() if k != "notebook"},
                                  "path": repro["notebook"]}}
    op = data.get("op")
    if isinstance(op, dict) and any("args" in call for call in op.get("recent") or []):
        data = {**data, "op": _compact_recent_calls(op)}
    return {**data, "schema": 2}


def _compact_recent_calls(op: dict[str, Any]) -> dict[str, Any]:
    """An OpInfo record whose recent calls list their arguments, as the tracer keeps them
    now: tensors as positions in `recent_tensors`, other arguments as `name=value`."""
    tensors: dict[str, int] = {}
    recent = []
    for call in op["recent"]:
        positions, scalars = [], []
        for arg in call.get("args") or []:
            if arg.get("kind") == "tensor":
                text = (f"{(arg.get('dtype') or '?').replace('torch.', '')}{arg.get('shape')}"
                        f"@{arg.get('device')}")
                positions.append(tensors.setdefault(text, len(tensors)))
            else:
                scalars.append(f"{arg.get('name')}={arg.get('value')}")
        recent.append({"name": call.get("name"), "tensors": positions, "scalars": scalars})
    return {**op, "recent": recent, "recent_tensors": list(tensors)}


_UPGRADES: list[Callable[[dict[str, Any]], dict[str, Any]]] = [_schema_1_to_2]
"""_UPGRADES[n - 1] turns a schema-n record into a schema-(n + 1) one."""


def qualified_type_name(exc: BaseException) -> str:
    """Return `torch.AcceleratorError`-style names: module-qualified except for builtins."""
    t = type(exc)
    module = t.__module__
    if module in ("builtins", "__main__"):
        return t.__qualname__
    if module.startswith("torch") and hasattr(sys.modules.get("torch"), t.__name__):
        return f"torch.{t.__name__}"
    return f"{module}.{t.__qualname__}"


def chained_traceback(exc: BaseException, raised: BaseException
                      ) -> list[tuple[types.FrameType, int]]:
    """Return the (frame, line) entries from the outermost frame of `raised` to where `exc`,
    a cause or context of it, arose: each exception of the chain between them joins the
    path at the frame that caught it (its own traceback starts there), or after the path
    when it was raised elsewhere (a stored exception raised later). `raised` itself when
    `exc` is not in its chain."""
    chain = exception_chain(raised)
    path = list(tb_module.walk_tb(raised.__traceback__))
    if exc not in chain:
        return path
    for cause in reversed(chain[chain.index(exc):-1]):
        own = list(tb_module.walk_tb(cause.__traceback__))
        caught_in = next((n for n, (frame, _) in enumerate(path)
                          if own and frame is own[0][0]), len(path))
        path = path[:caught_in] + own
    return path


def exception_chain(exc: BaseException) -> list[BaseException]:
    """Return the chain of causes and contexts of `exc`, the first cause first."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return list(reversed(chain))


_LIBRARY_MARKERS = (
    os.sep + "site-packages" + os.sep,
    os.sep + "dist-packages" + os.sep,
    os.path.dirname(os.__file__) + os.sep,
    os.path.dirname(__file__) + os.sep,
)


_GENERATED_MARKER = "torchinductor_"
"""In the path of every module torch.compile generated (Inductor's cache folder): not the
user's code, though it lies outside the installed packages."""


def is_user_file(filename: str) -> bool:
    """Return True for a file of the user's code: not Python's, an installed package's,
    cudadiag's own or torch.compile's generated modules. Raises nothing."""
    if filename.startswith("<frozen") or _GENERATED_MARKER in filename:
        return False
    return not any(marker in filename for marker in _LIBRARY_MARKERS)


CELL_MAGIC_BODIES = ("<timed exec>",)
"""The file names IPython compiles a cell magic's body under (`%%time`): the cell's lines
after its first."""


def _in_cell_magic(frame: Frame, cell: int, cell_source: Callable[[int], str | None]) -> Frame:
    """`frame`, of a cell magic's body, as the line of cell `cell` that holds it."""
    line = frame.line + 1
    lines = (cell_source(cell) or "").splitlines()
    source = lines[line - 1].strip() if 0 < line <= len(lines) else frame.source
    return dataclasses.replace(frame, line=line, cell=cell, source=source or None, user=True)


def _frame_from_summary(
    summary: tb_module.FrameSummary,
    locate_cell: Callable[[str], int | None],
    cell_source: Callable[[int], str | None],
) -> Frame:
    cell = locate_cell(summary.filename)
    source = summary.line
    if cell is not None and not source:
        lines = (cell_source(cell) or "").splitlines()
        lineno = summary.lineno or 0
        source = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else None
    return Frame(
        file=summary.filename,
        line=summary.lineno or 0,
        function=summary.name,
        source=source or None,
        cell=cell,
        user=cell is not None or is_user_file(summary.filename),
    )


Reader = Callable[[Any], Any]


@functools.cache
def _reader(tp: Any) -> Reader:
    """The function that builds a value of type `tp` (a dataclass, a list, tuple or dict of
    them, an optional one, or a plain JSON type) from JSON data. Built once per type, so
    reading a record costs no more than walking its JSON."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _optional(_reader(inner[0]) if len(inner) == 1 else _as_is)
    if origin is list:
        (item,) = typing.get_args(tp)
        return _list_of(_reader(item))
    if origin is tuple:
        return tuple
    if origin is dict:
        return _dict_of(_reader(typing.get_args(tp)[1]))
    if dataclasses.is_dataclass(tp):
        return _dataclass_reader(tp)
    return _as_is


def _as_is(data: Any) -> Any:
    return data


def _optional(read: Reader) -> Reader:
    return lambda data: None if data is None else read(data)


def _list_of(read: Reader) -> Reader:
    if read is _as_is:
        return list
    return lambda data: [read(item) for item in data]


def _dict_of(read: Reader) -> Reader:
    if read is _as_is:
        return dict
    return lambda data: {key: read(value) for key, value in data.items()}


def _dataclass_reader(cls: Any) -> Reader:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _reader(hints[f.name]) for f in dataclasses.fields(cls) if f.init}

    def read(data: dict[str, Any]) -> Any:
        return cls(**{key: fields[key](value) for key, value in data.items()
                      if key in fields})

    return read
