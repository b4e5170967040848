"""The facts of a model that the advice needs (how many labels, how large the vocabulary,
which id pads), read from its configuration: attribute reads of plain values, no user code
run."""

from __future__ import annotations

from typing import Any

from torch import nn

from cudadiag.incident import ModelFacts

_CONFIG_INTS = ("num_labels", "vocab_size", "pad_token_id")


def model_facts(model: Any, tokenizer: Any = None, label_names: Any = None) -> ModelFacts:
    """Return the facts of `model` (a Hugging Face model, or a module holding one: a
    LightningModule), with len(tokenizer) and the Trainer's label names when given."""
    config = _config_of(model)
    facts = ModelFacts(model=type(model).__name__)
    if config is not None:
        for name in _CONFIG_INTS:
            setattr(facts, name, _plain(config, name, int))
        facts.problem_type = _plain(config, "problem_type", str)
    else:
        hparams = getattr(model, "hparams", None)
        for key in ("num_labels", "num_classes"):
            value = hparams.get(key) if isinstance(hparams, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                facts.num_labels, facts.num_labels_from = value, f"hparams.{key}"
    facts.tokenizer_length = _length(tokenizer)
    if isinstance(label_names, (list, tuple)) and all(isinstance(n, str) for n in label_names):
        facts.label_names = list(label_names)
    return facts


def _config_of(model: Any) -> Any:
    """The model's `config` (a PretrainedConfig), or that of the first submodule with one."""
    config = getattr(model, "config", None)
    if config is not None or not isinstance(model, nn.Module):
        return config
    return next((m.config for m in model.modules() if getattr(m, "config", None) is not None),
                None)


def _plain(config: Any, name: str, kind: type) -> Any:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, kind):
        return None
    return value


def _length(tokenizer: Any) -> int | None:
    if tokenizer is None or not hasattr(tokenizer, "__len__"):
        return None
    try:
        return len(tokenizer)
    except TypeError:  # a processing class without a vocabulary (an image processor)
        return None
