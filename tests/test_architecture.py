"""The layers of docs/architecture.md hold, and no part reaches another behind the reader's
back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "cudadiag"


def test_the_import_linter_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_cycle_contract_fails_on_a_cycle_made_of_a_type_only_import(tmp_path):
    """The project's own settings (every import counted, no sibling cycles) applied to a
    two-module package whose only cycle is an import under TYPE_CHECKING."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    cycle_contract = next(c for c in settings["contracts"] if c["type"] == "acyclic_siblings")
    package = tmp_path / "loop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from loop.b import B\n\nA = B\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                  "    from loop.a import A\n\nB = 1\n")
    (tmp_path / "lint.toml").write_text(
        f"[tool.importlinter]\nroot_package = \"loop\"\nexclude_type_checking_imports = "
        f"{str(settings['exclude_type_checking_imports']).lower()}\n\n"
        f"[[tool.importlinter.contracts]]\nname = \"{cycle_contract['name']}\"\n"
        f"type = \"acyclic_siblings\"\nancestors = [\"loop\"]\n")
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "lint.toml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert ".a -> .b" in result.stdout or ".b -> .a" in result.stdout


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
