"""The layers of docs/architecture.md hold, and no part reaches another behind the reader's
back."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "cudadiag"


def test_the_import_linter_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "--config", str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_module_reaches_another_through_sys_modules():
    hidden = [f"{path.relative_to(SRC)}:{number}"
              for path in SRC.rglob("*.py")
              for number, line in enumerate(path.read_text().splitlines(), 1)
              if 'sys.modules.get("cudadiag' in line or "sys.modules['cudadiag" in line
              or 'sys.modules["cudadiag' in line]
    assert hidden == []


def test_incidents_are_built_only_by_the_one_builder():
    """diagnose.py builds every Incident (docs/architecture.md); incident.py defines it."""
    by_hand = [f"{path.relative_to(SRC)}:{number}"
               for path in SRC.rglob("*.py") if path.name not in ("incident.py", "diagnose.py")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"\bIncident\(", line)]
    assert by_hand == []


@pytest.mark.slow
def test_mypy_strict_finds_nothing_in_the_package():
    """`[tool.mypy]` in pyproject.toml: strict on src/cudadiag (about 90 s cold on two busy
    cores, 10 s with the .mypy_cache of an earlier run)."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found")
