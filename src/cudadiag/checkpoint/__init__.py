"""Checkpoints you can trust: written atomically, with a manifest that proves what they hold.

`save()` writes the file the way a crash cannot tear it (a temporary file in the same
directory, flushed, synced, renamed) and a manifest beside it (`NAME.manifest.json`): the
file's sha256, the training step, the time, the PyTorch version, whether every floating
tensor was finite, and what had already gone wrong in this kernel or process (its latest
incident, the error being handled, a simulated device already faulted). `verify()` and
`latest_valid()` read the manifests: a file is trusted when its hash matches, its tensors were
finite and it was written before the error (method point 11: files written during the failure
prove nothing).

Which incidents are "of this kernel": the kernel extension, when loaded, hands its capture to
`follow_incidents()` (anything with `current` and `poisoned_by` incidents); without it there
is no kernel incident, and only what the manifest itself recorded counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any, Protocol, cast

from cudadiag import probes
from cudadiag.durable import sync_folder, write_failure
from cudadiag.errors import CheckpointNotSaved, CudadiagError
from cudadiag.i18n import _, localize, msg
from cudadiag.incident import Incident

MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "cudadiag-checkpoint"
MANIFEST_VERSION = 1
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".tar", ".bin")
"""Files of a checkpoint directory that are taken for checkpoints even without a manifest
(and rejected for that reason)."""
NON_FINITE_NAMED = 8
"""Non-finite tensors named in a manifest; the count covers the rest."""
_HASH_CHUNK = 2**20
_INCIDENT_TIME_RESOLUTION = timedelta(seconds=1)
"""Incident times are kept to the second: a checkpoint within the second after one is
ordered by the incident id its manifest recorded."""


class CheckpointError(CudadiagError, ValueError):
    """No trusted checkpoint where one was asked for; the message says why."""


class IncidentSource(Protocol):
    """What the kernel capture offers: its latest incident and the sticky one, if any."""

    @property
    def current(self) -> Incident | None:
        """The kernel's incident that decides what later errors are."""

    @property
    def poisoned_by(self) -> Incident | None:
        """The sticky incident that made the CUDA context unusable, if any."""


_followed: IncidentSource | None = None
_saved_to: list[Path] = []
"""The directories `save()` wrote to in this process, the latest last."""


def last_saved_directory() -> Path | None:
    """Return the directory `save()` last wrote to in this process (a kernel), or None when
    it saved nothing."""
    return _saved_to[-1] if _saved_to else None


def follow_incidents(source: IncidentSource | None) -> None:
    """Take `source` (the kernel extension's capture) as the incidents of this kernel; None
    forgets it. Called by `%load_ext cudadiag` and `%unload_ext cudadiag`."""
    global _followed
    _followed = source


def followed_incidents() -> IncidentSource | None:
    """Return the incident source given to `follow_incidents()`, or None."""
    return _followed


@dataclass(frozen=True)
class Verdict:
    """Whether one checkpoint can be trusted, and why not."""

    path: Path
    trusted: bool
    reason: str
    """`ok`, or why the file is rejected (hash mismatch, non-finite tensor, written after
    the error, no manifest...), with the particulars: in English, kept with its message id
    (`localize(reason)` in the reader's language)."""
    step: int | None = None
    written_at: str | None = None
    manifest: dict[str, Any] | None = field(default=None, repr=False)

    def describe(self) -> str:
        """Return one line: the file, its step and time, and the verdict with its reason."""
        step = (_("step {step}").format(step=self.step) if self.step is not None
                else _("step ?"))
        when = self.written_at or _("time unknown")
        verdict = (_("trusted") if self.trusted else
                   _("rejected: {reason}").format(reason=localize(self.reason)))
        return f"{self.path.name}  {step}  {when}  {verdict}"


@dataclass(frozen=True)
class _ErrorRef:
    """The incident a checkpoint must predate."""

    id: str
    created_at: datetime
    family: str


def save(obj: Any, path: str | os.PathLike[str], *, step: int,
         extra: dict[str, Any] | None = None) -> Verdict:
    """Write `obj` with `torch.save` to `path` atomically, with its manifest beside it.

    Returns the new checkpoint's Verdict as `verify()` gives it now (one line on stderr
    says so when it cannot be trusted: saved after the error, non-finite tensors). Raises TypeError
    when `step` is not an int or `extra` is not JSON-serialisable, ValueError for a negative
    step, FileNotFoundError when the directory does not exist, CheckpointNotSaved (an
    OSError) when the file cannot be written (a full disk: nothing is left, an earlier file of
    that name is unchanged), and whatever else `torch.save` raises (on a CUDA context broken by
    an earlier error, copying device tensors fails).
    """
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(_("step must be an int (the training step), not {step!r}").format(
            step=step))
    if step < 0:
        raise ValueError(_("step must be 0 or more, not {step}").format(step=step))
    try:
        extra_json = json.loads(json.dumps(extra)) if extra is not None else None
    except (TypeError, ValueError) as exc:
        raise TypeError(_("extra must be JSON-serialisable (numbers, strings, lists, dicts): "
                          "{error}").format(error=exc)) from None

    from cudadiag.own_work import outside_user_modes

    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(_("{path} is not a directory: create it first").format(
            path=target.parent))
    with outside_user_modes():
        non_finite = non_finite_tensors(obj)
        manifest = _manifest_fields(step, extra_json, non_finite)
        with _atomic_file(target) as handle:
            _torch_save(obj, handle, target)
    manifest.update(file=target.name, sha256=_sha256(target), bytes=target.stat().st_size)
    with _atomic_file(manifest_path(target)) as handle:
        handle.write(json.dumps(manifest, indent=1).encode())
    folder = target.parent.resolve()
    if folder in _saved_to:
        _saved_to.remove(folder)
    _saved_to.append(folder)
    verdict = verify(target)
    if not verdict.trusted:
        print(_("cudadiag: saved {path}, but it cannot be trusted: {reason}").format(
            path=target, reason=localize(verdict.reason)), file=sys.stderr)
    return verdict


def verify(path: str | os.PathLike[str], *, before: Incident | str | None = None) -> Verdict:
    """Return whether the checkpoint at `path` can be trusted: its manifest exists, its
    hash matches, its floating tensors were finite, and it was written before the error
    (`before`: an incident or incident id; by default the first sticky incident of this
    kernel, if there is one). Never loads the file. Raises FileNotFoundError when `path`
    does not exist, IncidentNotFound when `before` names no incident of the log."""
    target = Path(path)
    if not target.is_file():
        raise FileNotFoundError(_("no checkpoint at {path}").format(path=target))
    return _verdict(target, _error_ref(before))


def review(directory: str | os.PathLike[str], *,
           before: Incident | str | None = None) -> list[Verdict]:
    """Return the verdict of every checkpoint of `directory`, newest first (by the time in
    its manifest; files without one last). Raises NotADirectoryError when `directory` is not
    one, IncidentNotFound when `before` names no incident of the log."""
    folder = Path(directory)
    if not folder.is_dir():
        raise NotADirectoryError(_("{path} is not a directory").format(path=folder))
    ref = _error_ref(before)
    verdicts = [_verdict(p, ref) for p in _candidates(folder)]
    return sorted(verdicts, key=lambda v: (v.written_at is not None, v.written_at or "",
                                           v.path.name), reverse=True)


def latest_valid(directory: str | os.PathLike[str], *,
                 before: Incident | str | None = None) -> Verdict | None:
    """Return the newest trusted checkpoint of `directory` (see `verify()` for what trusted
    means and what `before` is), or None. Each rejected file is listed on stderr with its
    reason. Raises NotADirectoryError and IncidentNotFound as `review()` does."""
    verdicts = review(directory, before=before)
    for verdict in verdicts:
        if not verdict.trusted:
            print(_("cudadiag: {path} rejected: {reason}").format(
                path=verdict.path, reason=localize(verdict.reason)), file=sys.stderr)
    return next((v for v in verdicts if v.trusted), None)


def resolve(spec: str) -> Verdict:
    """Return the trusted checkpoint `spec` names: a file, a directory (its newest trusted
    checkpoint), or `latest` (the newest trusted one of the directory this process last
    saved to). Raises CheckpointError when there is none, or the file is not trusted."""
    if spec == "latest":
        latest = last_saved_directory()
        if latest is None:
            raise CheckpointError(_("no checkpoint was saved with cudadiag.checkpoint.save in "
                                    "this process: give the checkpoint file or its directory"))
        spec = str(latest)
    target = Path(spec).expanduser()
    if target.is_dir():
        chosen = latest_valid(target)
        if chosen is None:
            raise CheckpointError(_("no trusted checkpoint in {path} (%cudadiag checkpoints "
                                    "{spec} says why each is rejected)").format(path=target,
                                                                               spec=spec))
        return chosen
    if not target.is_file():
        raise CheckpointError(_("no checkpoint file or directory at {path}").format(
            path=target))
    verdict = verify(target)
    if not verdict.trusted:
        raise CheckpointError(_("{path} cannot be trusted: {reason}").format(
            path=target, reason=localize(verdict.reason)))
    return verdict


def restore_code(path: Path, assignments: list[tuple[str, str]]) -> str:
    """Return Python that loads the checkpoint at `path` as `ckpt` and restores each
    (name, expression): into the object already bound to the name when it has
    `load_state_dict` and the value is a state dict, else by binding the name."""
    lines = [
        "def __cudadiag_restore(name, value):",
        "    target = globals().get(name)",
        "    if hasattr(target, 'load_state_dict') and isinstance(value, dict):",
        "        target.load_state_dict(value)",
        "    else:",
        "        globals()[name] = value",
        f"ckpt = __import__('torch').load({str(path)!r}, weights_only=False)",
        *(f"__cudadiag_restore({name!r}, {expression})" for name, expression in assignments),
        "del __cudadiag_restore",
    ]
    return "\n".join(lines) + "\n"


def manifest_path(path: str | os.PathLike[str]) -> Path:
    """Return where the manifest of the checkpoint at `path` lives."""
    target = Path(path)
    return target.with_name(target.name + MANIFEST_SUFFIX)


def non_finite_tensors(obj: Any) -> list[str]:
    """Return the names (`model.fc.weight`, `optimizer.state.0.exp_avg`, `[2]`) of the
    floating or complex tensors held by `obj` that hold a NaN or an infinity: every tensor
    `torch.save` would write (see `held_tensors`)."""
    import torch

    found = []
    for name, tensor in held_tensors(obj):
        if (tensor.is_floating_point() or tensor.is_complex()) and tensor.numel() and not bool(
                torch.isfinite(tensor.detach()).all()):
            found.append(name or "(the object)")
    return found


def held_tensors(obj: Any) -> Iterator[tuple[str, Any]]:
    """Yield (name, tensor) for every tensor `obj` holds, each object once: inside the
    containers pytree opens (dicts, lists, tuples, namedtuples...), sets, dataclasses, an
    `nn.Module`'s parameters, buffers and plain attributes (its submodules' too), an
    optimizer's, scheduler's or scaler's state (its `state_dict()`), and the attributes of
    other objects, as pickling them would reach."""
    yield from _tensors(obj, "", set())


def _tensors(obj: Any, prefix: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    import torch
    from torch.utils._pytree import tree_leaves_with_path

    for path, leaf in tree_leaves_with_path(obj):
        name = prefix + "".join(_key_name(key) for key in path)
        if isinstance(leaf, torch.Tensor):
            yield name.lstrip("."), leaf
        elif id(leaf) not in seen:
            seen.add(id(leaf))
            yield from _opened(leaf, name, seen)


def _key_name(key: Any) -> str:
    """`.key` for a mapping key or an attribute, `[i]` for a position (pytree's key path)."""
    from torch.utils._pytree import GetAttrKey, MappingKey, SequenceKey

    if isinstance(key, SequenceKey):
        return f"[{key.idx}]"
    if isinstance(key, MappingKey):
        return f".{key.key}"
    if isinstance(key, GetAttrKey):
        return f".{key.name}"
    return str(key)


def _opened(leaf: Any, name: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """The tensors inside a leaf pytree does not open."""
    import torch

    if isinstance(leaf, torch.nn.Module):
        for found, tensor in (*leaf.named_parameters(), *leaf.named_buffers()):
            yield f"{name}.{found}".lstrip("."), tensor
        for path, module in leaf.named_modules():
            attributes = {key: value for key, value in vars(module).items()
                          if not key.startswith("_")}
            yield from _tensors(attributes, f"{name}.{path}" if path else name, seen)
    elif isinstance(leaf, (set, frozenset)):
        yield from _tensors(list(leaf), name, seen)
    elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        yield from _tensors({f.name: getattr(leaf, f.name) for f in dataclasses.fields(leaf)},
                            name, seen)
    elif (state := _state_dict(leaf)) is not None:
        yield from _tensors(state, name, seen)
    elif _pickled_by_attributes(leaf):
        yield from _tensors(dict(vars(leaf)), name, seen)


def _state_dict(leaf: Any) -> Any:
    """The state of an optimizer, a scheduler, a gradient scaler (what they save), or None."""
    state_dict = getattr(leaf, "state_dict", None)
    if isinstance(leaf, type) or not callable(state_dict):
        return None
    try:
        return state_dict()
    except Exception:  # the object's own code: its attributes are still searched
        return None


def _pickled_by_attributes(leaf: Any) -> bool:
    """True for an instance of a Python class, whose attributes pickling saves."""
    return (hasattr(leaf, "__dict__") and type(leaf).__module__ != "builtins"
            and not isinstance(leaf, (type, types.ModuleType, types.FunctionType,
                                      types.MethodType)))


def _manifest_fields(step: int, extra: dict[str, Any] | None,
                     non_finite: list[str]) -> dict[str, Any]:
    import torch

    latest = _followed.current if _followed is not None else None
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "step": step,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "torch": torch.__version__,
        "finite": not non_finite,
        "non_finite": non_finite[:NON_FINITE_NAMED],
        "non_finite_count": len(non_finite),
        "incident": latest.id if latest is not None else None,
        "incident_at": latest.created_at if latest is not None else None,
        "during_error": _error_being_handled(),
        "simulated_device_faulted": _simulated_device_faulted(),
        "extra": extra,
    }


def _error_being_handled() -> dict[str, Any] | None:
    """The error of the `except` block `save()` was called from, when it is one cudadiag
    diagnoses (a Ctrl-C or a KeyError leaves the training state as it was)."""
    exc = sys.exc_info()[1]
    if exc is None:
        return None
    from cudadiag.classification import classify

    family = classify(exc).family
    if family == "unknown" and type(exc).__module__.split(".")[0] != "torch":
        return None
    return {"type": type(exc).__name__, "message": (str(exc).splitlines() or [""])[0],
            "family": family}


def _simulated_device_faulted() -> bool:
    return probes.simulator_poisoned()


class _WriteErrors:
    """A file that remembers the OSError of a failed write: torch.save reports a full disk as
    `unexpected pos` and loses the reason."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            written: int = self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise
        return written

    def flush(self) -> None:
        self.handle.flush()


def _torch_save(obj: Any, handle: Any, target: Path) -> None:
    import torch

    recording = _WriteErrors(handle)
    try:
        torch.save(obj, cast("IO[bytes]", recording))  # it only writes and flushes
    except Exception as exc:
        if recording.error is None:
            raise
        why = write_failure(target.name, target.parent.resolve(), recording.error)
        raise CheckpointNotSaved(_("{why}; nothing was written, an earlier {name} is "
                                   "unchanged").format(why=why, name=target.name)) from exc


@contextlib.contextmanager
def _atomic_file(target: Path) -> Iterator[Any]:
    """Yield a binary file in `target`'s directory; on success it is flushed, synced and
    renamed over `target` (and the directory synced); on failure it is removed."""
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    # os.open with 0o666 leaves the mode to the umask, as a plain open() would
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_folder(target.parent)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _candidates(folder: Path) -> list[Path]:
    """The checkpoints of `folder`: files with a manifest, files with a checkpoint suffix,
    and files a manifest names that are gone."""
    found: set[Path] = set()
    for entry in folder.iterdir():
        name = entry.name
        if name.startswith(".") and name.endswith(".tmp"):
            continue  # a save in progress, or one a crash interrupted
        if name.endswith(MANIFEST_SUFFIX):
            found.add(entry.with_name(name[: -len(MANIFEST_SUFFIX)]))
        elif entry.is_file() and entry.suffix in CHECKPOINT_SUFFIXES:
            found.add(entry)
    return sorted(found)


def _verdict(path: Path, ref: _ErrorRef | None) -> Verdict:
    manifest_file = manifest_path(path)
    if not manifest_file.is_file():
        return Verdict(path, False, msg("no manifest (not written by "
                                        "cudadiag.checkpoint.save, or its save was "
                                        "interrupted)"))
    try:
        manifest = json.loads(manifest_file.read_text())
        step, written_at, _sha = manifest["step"], manifest["written_at"], manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Verdict(path, False, msg("unreadable manifest {name}: {error}",
                                        name=manifest_file.name, error=str(exc)))
    problem = _problem(path, manifest, ref)
    return Verdict(path, problem is None, problem or "ok", step=step, written_at=written_at,
                   manifest=manifest)


def _problem(path: Path, manifest: dict[str, Any], ref: _ErrorRef | None) -> str | None:
    """Why the checkpoint at `path` cannot be trusted, or None."""
    if not path.is_file():
        return msg("file missing (its manifest is there)")
    actual, expected = _sha256(path), str(manifest["sha256"])
    if actual != expected:
        return msg("hash mismatch: the file changed after it was saved (sha256 {actual}…, "
                   "manifest {expected}…)", actual=actual[:12], expected=expected[:12])
    if not manifest.get("finite", False):
        names = ", ".join(manifest.get("non_finite") or []) or "?"
        count = manifest.get("non_finite_count", 0)
        if count > NON_FINITE_NAMED:
            return msg("non-finite tensor (NaN or Inf): {names} and {more} more", names=names,
                       more=count - NON_FINITE_NAMED)
        return msg("non-finite tensor (NaN or Inf): {names}", names=names)
    after = _written_after(manifest, ref)
    return msg("written after the error: {why}", why=after) if after else None


def _written_after(manifest: dict[str, Any], ref: _ErrorRef | None) -> str | None:
    """Why the checkpoint was written after the error, or None when it predates it."""
    handled = manifest.get("during_error")
    if handled:
        return msg("saved while handling {type} ({family}): {message}",
                   type=str(handled.get("type")), family=str(handled.get("family")),
                   message=str(handled.get("message")))
    if ref is not None:
        after = _after_incident(manifest, ref)
        if after:
            return after
    if manifest.get("simulated_device_faulted"):
        return msg("saved after the simulated device faulted")
    return None


def _after_incident(manifest: dict[str, Any], ref: _ErrorRef) -> str | None:
    what = msg("incident {id} ({family}) at {time}", id=ref.id, family=ref.family,
               time=ref.created_at.isoformat())
    if manifest.get("incident") == ref.id:
        return msg("saved when {what} had already happened", what=what)
    known = _parse_time(manifest.get("incident_at"))
    if known is not None and known >= ref.created_at:
        return msg("saved after incident {other}, which is not before {what}",
                   other=str(manifest.get("incident")), what=what)
    written = _parse_time(manifest.get("written_at"))
    if written is not None and written >= ref.created_at + _INCIDENT_TIME_RESOLUTION:
        return msg("saved at {time}, after {what}", time=written.isoformat(), what=what)
    return None


def _error_ref(before: Incident | str | None) -> _ErrorRef | None:
    if before is None:
        incident = _followed.poisoned_by if _followed is not None else None
        if incident is None:
            return None
    elif isinstance(before, str):
        from cudadiag.log.store import IncidentStore

        incident = IncidentStore().get(before)
    else:
        incident = before
    created = _parse_time(incident.created_at)
    if created is None:
        raise ValueError(_("incident {id} has no readable time ({time!r})").format(
            id=incident.id, time=incident.created_at))
    return _ErrorRef(incident.id, created, incident.diagnosis.family)


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
