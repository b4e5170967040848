"""The callbacks a kernel with cudadiag loaded adds by itself: to every Hugging Face
`Trainer` when it is created, to every Lightning `Trainer` when `fit` is called. A library
imported before `%load_ext` is patched then; one imported later, when its trainer module is
imported (an import hook that runs nothing of the library's but its own import). Each
addition says so in one line; `%cudadiag attach off` stops adding them in a kernel,
`CUDADIAG_ATTACH=off` in the environment under `cudadiag run`.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from cudadiag.i18n import N_, _

ANNOUNCE = N_("cudadiag: recording the steps of this {library} (epoch, step, batch, dataset "
              "indices) for its incidents; {off} stops it")
OFF_IN_A_KERNEL = "`%cudadiag attach off`"
OFF_IN_A_SCRIPT = N_("CUDADIAG_ATTACH=off in the environment")
ATTACH_ENV = "CUDADIAG_ATTACH"
"""Set to `off` (or 0, no, false), `cudadiag run` adds no callback to a script's trainers."""
_state = {"on": True}
_off = {"hint": OFF_IN_A_KERNEL}
_originals: list[tuple[type, str, Any]] = []


def _add_to_hf_trainer(trainer: Any) -> None:
    from cudadiag.integrations.transformers import Callback

    if not any(isinstance(c, Callback) for c in trainer.callback_handler.callbacks):
        trainer.add_callback(Callback())
        print(_(ANNOUNCE).format(library="transformers.Trainer", off=_(_off["hint"])))


def _add_to_lightning_trainer(trainer: Any) -> None:
    from cudadiag.integrations.lightning import Callback

    if not any(isinstance(c, Callback) for c in trainer.callbacks):
        trainer.callbacks.append(Callback())
        print(_(ANNOUNCE).format(library="lightning.Trainer", off=_(_off["hint"])))


def _replay_hf_step(trainer: Any) -> tuple[bool, Any]:
    from cudadiag.batch.watcher import take_replay

    replay = take_replay()
    if replay is None:
        return False, None
    from cudadiag.integrations.transformers import replay_step

    return True, replay_step(trainer, *replay)


def _replay_lightning_step(trainer: Any, model: Any = None, *args: Any,
                           **kwargs: Any) -> tuple[bool, Any]:
    from cudadiag.batch.watcher import take_replay

    module = model if model is not None else kwargs.get("model")
    replay = take_replay() if module is not None else None
    if replay is None:
        return False, None
    from cudadiag.integrations.lightning import replay_step

    replay_step(module, *replay)
    return True, None


def _after_init(add: Callable[[Any], None], init: Any) -> Any:
    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if _state["on"]:
            add(self)
    return __init__


def _before_call(add: Callable[[Any], None], method: Any) -> Any:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _state["on"]:
            add(self)
        return method(self, *args, **kwargs)
    return call


Replay = Callable[..., "tuple[bool, Any]"]


def _replaying(replay: Replay, method: Any) -> Any:
    """`method` (train, fit) that runs one step on the batch `--batch` replays when one is
    pending (an isolated run), else runs as it was."""
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        replayed, result = replay(self, *args, **kwargs)
        return result if replayed else method(self, *args, **kwargs)
    return call


Patch = tuple[str, str, Callable[[Any, Any], Any], Any]
"""(the trainer class, the method wrapped, the wrapper, what the wrapper is given)."""
_PATCHES: dict[str, tuple[Patch, ...]] = {
    "transformers.trainer": (
        ("Trainer", "__init__", _after_init, _add_to_hf_trainer),
        ("Trainer", "train", _replaying, _replay_hf_step)),
    "lightning.pytorch.trainer.trainer": (
        ("Trainer", "fit", _replaying, _replay_lightning_step),
        ("Trainer", "fit", _before_call, _add_to_lightning_trainer)),
}
"""module -> its patches, innermost first."""


def start(off: str = OFF_IN_A_KERNEL) -> None:
    """Patch the trainers of the libraries imported already; patch the others when they are
    imported. Adding is on; `off` is how the announcement says to turn it off."""
    _state["on"] = True
    _off["hint"] = off
    # by name, not over sys.modules: a child forked from the warm interpreter would touch
    # (copy) the page of every module object it passed
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None:
            _patch(module)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def stop() -> None:
    """Undo start(): the trainers' methods restored, the import hook removed."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]
    while _originals:
        cls, attr, original = _originals.pop()
        setattr(cls, attr, original)


def set_adding(on: bool) -> None:
    """Add the callbacks to later trainers (True) or not (False)."""
    _state["on"] = on


def wanted_in_scripts(environ: Mapping[str, str]) -> bool:
    """Return False when `environ` turns the callbacks off for scripts (ATTACH_ENV)."""
    return environ.get(ATTACH_ENV, "").strip().lower() not in ("off", "0", "no", "false")


def adding() -> bool:
    """Return True while later trainers get the callbacks."""
    return _state["on"]


def _patch(module: ModuleType) -> None:
    patched: set[tuple[type, str]] = {(c, a) for c, a, _ in _originals}
    for class_name, attr, wrap, given in _PATCHES[module.__name__]:
        cls = getattr(module, class_name, None)
        if cls is None or (cls, attr) in patched:
            continue
        if not any(c is cls and a == attr for c, a, _ in _originals):
            _originals.append((cls, attr, vars(cls)[attr]))
        setattr(cls, attr, wrap(given, vars(cls)[attr]))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the trainer modules with the other finders, and patches them once executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """The module's own spec, its loader wrapped, for a trainer module; else None."""
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _patch(module)
