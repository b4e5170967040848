"""cudadiag's home folder: where the incident log, its config and the isolated runs' files live."""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """Return `$CUDADIAG_HOME`, else the user cache directory for cudadiag."""
    home = os.environ.get("CUDADIAG_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("cudadiag"))
