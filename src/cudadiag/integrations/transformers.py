"""A `transformers.TrainerCallback` that records what watch() records for a plain loop: the
step and the batch the Trainer runs, its epoch, global step and place in the gradient
accumulation, the batch's dataset indices, and the model's facts.

The Trainer hands callbacks neither the batch nor itself; the batch a micro-step runs is the
oldest one its DataLoader handed out and not yet run (fetched.py), taken when the model's
forward starts in training mode (a forward pre-hook), so what is recorded is the CPU batch
as the loader gave it, before it moved to the device.
"""

from __future__ import annotations

import math
from typing import Any

import transformers
from torch import nn
from torch.utils.hooks import RemovableHandle

from cudadiag.batch.fetched import FetchedBatches, follow
from cudadiag.batch.watcher import DEFAULT_MAX_BYTES, WatchRecord, open_record
from cudadiag.integrations.models import model_facts

FRAMEWORK = "transformers.Trainer"


class Callback(transformers.TrainerCallback):
    """Records every micro-step of `Trainer.train()` for cudadiag's incidents and for
    `%cuda_isolate --batch`: pass `callbacks=[Callback()]` to the Trainer (a kernel with
    cudadiag loaded adds one to every Trainer). `keep` and `max_bytes` are watch()'s."""

    def __init__(self, keep: int = 2, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.keep, self.max_bytes = keep, max_bytes
        self.record: WatchRecord | None = None
        self.fetched = FetchedBatches()
        self._hook: RemovableHandle | None = None
        self._micro_step = -1

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start a record for this training: the loader followed, the model hooked."""
        loader, model = kwargs.get("train_dataloader"), kwargs.get("model")
        record = self.record = open_record(
            f"{FRAMEWORK}.train", FRAMEWORK, length=_length(loader), keep=self.keep,
            max_bytes=self.max_bytes)
        record.accumulation = int(args.gradient_accumulation_steps)
        tokenizer = kwargs.get("processing_class") or kwargs.get("tokenizer")
        record.model = model_facts(model, tokenizer, getattr(args, "label_names", None))
        follow(loader, self.fetched)
        if isinstance(model, nn.Module):
            self._hook = model.register_forward_pre_hook(self._before_forward)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Note the epoch starting (the Trainer's `state.epoch` counts completed epochs)."""
        if self.record is not None:
            self.record.epoch = math.floor(state.epoch or 0)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Note an optimizer step starting: its first micro-step comes next."""
        self._micro_step = -1
        if self.record is not None:
            self.record.global_step = int(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The training ended without an error: its steps no longer attach to incidents."""
        if self.record is not None:
            self.record.exhausted = True
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _before_forward(self, module: nn.Module, inputs: Any) -> None:
        record = self.record
        if record is None or not module.training:
            return
        entry = self.fetched.next_run()
        if entry is None:
            return
        self._micro_step += 1
        record.micro_step = self._micro_step
        record.record(*entry)


def replay_step(trainer: Any, step: int, batch: Any) -> Any:
    """Run the Trainer's own loss computation (`compute_loss`, the forward pass included) on
    `batch` as step `step`, in place of `train()`: the isolated run's `--batch`. Returns the
    loss; raises what the step raises."""
    record = open_record(f"{FRAMEWORK}.train", FRAMEWORK, keep=1)
    record.model = model_facts(trainer.model, getattr(trainer, "processing_class", None),
                               getattr(trainer.args, "label_names", None))
    record.step, record.replayed_step = step - 1, step
    record.record(batch, None)
    trainer.model.train()
    return trainer.compute_loss(trainer.model, trainer._prepare_inputs(batch))


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None
