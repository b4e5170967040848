"""Which environment variables hold secrets, told by their names (a table of shell patterns).

The scrubber (repro/redact.py) masks the values of such variables wherever they appear; a run
that records the variables a program read (isolate/worker.py) keeps such a value masked, so
the log never holds it.
"""

from __future__ import annotations

import fnmatch
import functools

SECRET_ENV_NAMES = (
    "*TOKEN*", "*SECRET*", "*KEY*", "*PASSWORD*", "*PASSWD*", "*PASSPHRASE*", "*CREDENTIAL*",
    "*_AUTH*", "AUTH_*", "*_PAT", "*_DSN", "*COOKIE*", "HF_*", "HUGGING_FACE_*", "AWS_*",
    "AZURE_*", "WANDB_API_KEY", "OPENAI_*", "ANTHROPIC_*", "DATABASE_URL",
)
"""Environment variables whose values are masked wherever they appear (case-insensitive
shell patterns)."""


@functools.lru_cache(maxsize=4096)  # asked for every variable of the environment per record
def looks_secret(name: str) -> bool:
    """Return True when the variable `name` matches SECRET_ENV_NAMES."""
    return any(fnmatch.fnmatchcase(name.upper(), p) for p in SECRET_ENV_NAMES)


def masked_value(name: str) -> str:
    """The placeholder that stands for the value of the secret variable `name`."""
    return f"[REDACTED:{name}]"
