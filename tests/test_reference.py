"""docs/reference.md is generated from the parsers (scripts/make_reference.py): it is current
and names every magic and command the user can type."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_matches_what_the_parsers_accept():
    done = subprocess.run([sys.executable, "scripts/make_reference.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_reference_names_every_magic_command_and_option():
    from cudadiag import cli

    text = (ROOT / "docs" / "reference.md").read_text()
    for title in ("%cuda_isolate", "%%blocking_launch", "%cuda_compare", "%cudadiag validate",
                  "%cudadiag export", "cudadiag run", "cudadiag explain", "cudadiag env"):
        assert f"## `{title}`" in text
    run = next(a for a in cli._parser()._actions if hasattr(a, "choices") and a.choices
               and "run" in a.choices).choices["run"]
    for action in run._actions[1:]:  # after -h
        for flag in action.option_strings:
            assert f"`{flag}" in text, flag
