"""A Lightning `Callback` that records what watch() records for a plain loop: the step and
the batch `training_step` runs, the epoch, global step and place in the gradient
accumulation, the batch's dataset indices, and the model's facts.

Lightning fetches the next batch before it runs the current one, so the batch of a step is
the oldest one its DataLoader handed out and not yet run (fetched.py), taken when
`on_train_batch_start` announces the step: the CPU batch as the loader gave it.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback as LightningCallback
from torch.utils.data import DataLoader

from cudadiag.batch.fetched import FetchedBatches, follow
from cudadiag.batch.watcher import DEFAULT_MAX_BYTES, WatchRecord, open_record
from cudadiag.integrations.models import model_facts

FRAMEWORK = "lightning.Trainer"


class Callback(LightningCallback):
    """Records every step of `Trainer.fit()` for cudadiag's incidents and for
    `%cuda_isolate --batch`: pass `callbacks=[Callback()]` to the Trainer (a kernel with
    cudadiag loaded adds one to every fit). `keep` and `max_bytes` are watch()'s."""

    def __init__(self, keep: int = 2, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.keep, self.max_bytes = keep, max_bytes
        self.record: WatchRecord | None = None
        self.fetched = FetchedBatches()

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Follow the loader given to fit(): Lightning iterates it once before
        `on_train_start` (a loader a LightningModule or DataModule makes is followed from
        its second epoch on)."""
        source = getattr(getattr(trainer, "fit_loop", None), "_data_source", None)
        given = getattr(source, "instance", None)
        if isinstance(given, DataLoader):
            follow(given, self.fetched)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Start a record for this fit: its training loader followed."""
        loaders = _loaders(trainer.train_dataloader)
        record = self.record = open_record(
            f"{FRAMEWORK}.fit", FRAMEWORK, length=_length(trainer), keep=self.keep,
            max_bytes=self.max_bytes)
        record.accumulation = int(trainer.accumulate_grad_batches)
        record.model = model_facts(pl_module)
        if len(loaders) == 1:  # batches of several loaders are combined: not one batch each
            follow(loaders[0], self.fetched)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        """Record the step about to run: the oldest batch fetched, else the one given."""
        record = self.record
        if record is None:
            return
        record.epoch = int(trainer.current_epoch)
        record.global_step = int(trainer.global_step)
        record.micro_step = batch_idx % max(record.accumulation or 1, 1)
        entry = self.fetched.next_run()
        record.record(*(entry if entry is not None else (batch, None)))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """The fit ended without an error: its steps no longer attach to incidents."""
        if self.record is not None:
            self.record.exhausted = True


def replay_step(module: Any, step: int, batch: Any) -> Any:
    """Run the LightningModule's own `training_step` on `batch` (moved to the module's
    device) as step `step`, in place of `fit()`: the isolated run's `--batch`. Returns what
    training_step returns; raises what it raises."""
    record = open_record(f"{FRAMEWORK}.fit", FRAMEWORK, keep=1)
    record.model = model_facts(module)
    record.step, record.replayed_step = step - 1, step
    record.record(batch, None)
    module.train()
    return module.training_step(module.transfer_batch_to_device(batch, module.device, 0), step)


def _loaders(loaders: Any) -> list[DataLoader[Any]]:
    """The DataLoaders of `trainer.train_dataloader`: one, or those in a list or dict."""
    if isinstance(loaders, DataLoader):
        return [loaders]
    values = loaders.values() if isinstance(loaders, dict) else loaders
    if isinstance(values, (list, tuple)) or isinstance(loaders, dict):
        return [v for v in values if isinstance(v, DataLoader)]
    return []


def _length(trainer: Any) -> int | None:
    batches = trainer.num_training_batches
    return int(batches) if isinstance(batches, int) else None
