"""Which values of an environment are secrets to mask, and masking them: the values of the
variables whose names look secret (secret_names.py), when worth masking (not a short value, a
yes/no word or the path of a key file).

The scrubber (repro/redact.py) masks them in what leaves the machine; the store masks, in each
record it writes, those the writing process knows (its environment and the run's), so the
log never holds them for a later reader who no longer knows them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from cudadiag.privacy.secret_names import looks_secret, masked_value

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
    none."""
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
