"""Which environment variables hold secrets, told by their names (a table of shell patterns).

The scrubber (repro/redact.py) masks the values of such variables wherever they appear; a run
that records the variables a program read (isolate/worker.py) keeps such a value masked, so
the log never holds it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

SECRET_ENV_NAMES = (
    "*TOKEN*", "*SECRET*", "*KEY*", "*PASSWORD*", "*PASSWD*", "*PASSPHRASE*", "*CREDENTIAL*",
    "*_AUTH*", "AUTH_*", "*_PAT", "*_DSN", "*COOKIE*", "HF_*", "HUGGING_FACE_*", "AWS_*",
    "AZURE_*", "WANDB_API_KEY", "OPENAI_*", "ANTHROPIC_*", "DATABASE_URL",
)
"""Environment variables whose values are masked wherever they appear (case-insensitive
shell patterns)."""


def looks_secret(name: str) -> bool:
    """Return True when the variable `name` matches SECRET_ENV_NAMES."""
    return any(fnmatch.fnmatchcase(name.upper(), p) for p in SECRET_ENV_NAMES)


def masked_value(name: str) -> str:
    """The placeholder that stands for the value of the secret variable `name`."""
    return f"[REDACTED:{name}]"


SECRET_MIN_LENGTH = 6
"""Shorter values are not worth masking: they would mask ordinary words and numbers."""
NOT_SECRET_VALUES = frozenset({"true", "false", "yes", "no", "none", "null", "enabled",
                               "disabled", "offline", "online", "default", "auto"})


def secret_env_values(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return (value, name) for the variables of `env` whose names look secret and whose
    values are worth masking, longest value first."""
    found = []
    for name, value in env.items():
        if not looks_secret(name):
            continue
        value = value.strip()
        if (len(value) < SECRET_MIN_LENGTH or value.lower() in NOT_SECRET_VALUES
                or (value.startswith(("/", "~")) and os.path.exists(os.path.expanduser(value)))):
            continue  # a path to a key file is not the key
        found.append((value, name))
    return sorted(found, key=lambda pair: -len(pair[0]))


def env_secret_mask(env: Mapping[str, str]) -> Callable[[str], str]:
    """Return a function that replaces, in a string, the value of each secret variable of
    `env` by its placeholder (`[REDACTED:NAME]`); it returns its input when `env` holds
    none. What a record keeps of a secret the process that wrote it knew: a later reader,
    in another shell, no longer knows it."""
    secrets = {secret: masked_value(name) for secret, name in secret_env_values(env)}
    if not secrets:
        return str
    pattern = re.compile("|".join(map(re.escape, secrets)))
    return lambda text: pattern.sub(lambda m: secrets[m.group(0)], text)


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """Return a copy of a JSON-like value with `change` applied to every string in it (dict
    keys are kept as they are)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, Mapping):
        return {key: map_strings(item, change) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [map_strings(item, change) for item in value]
    return value
