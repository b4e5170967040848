"""The log's commands are implemented once: `cudadiag CMD` and `%cudadiag CMD` print the same
text and refuse with the same message."""

from __future__ import annotations

import json

import pytest
from IPython.core.error import UsageError

from cudadiag import cli, incidents
from scenarios import MODEL, SETUP, run


@pytest.fixture
def recorded(shell):
    """A kernel incident (the worked example's device-side assert) in the log."""
    run(shell, SETUP)
    run(shell, MODEL)
    run(shell, "loss.item()")
    (incident,) = incidents()
    return incident


def _magic(shell, capsys, line: str) -> str:
    capsys.readouterr()
    shell.run_line_magic("cudadiag", line)
    return capsys.readouterr().out


def _terminal(capsys, *words: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(words))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("words", [
    ["incidents"], ["incidents", "--family", "device_assert"], ["show"], ["show", "--json"],
    ["report"], ["explain", "--json"],
], ids=" ".join)
def test_the_shell_and_the_notebook_print_the_same_text(recorded, shell, capsys, tmp_path,
                                                         words):
    if words[0] == "explain":  # the same log, read from a file in both
        log = tmp_path / "slurm.out"
        log.write_text(recorded.error.text)
        words = [*words, str(log)]
    status, out, _ = _terminal(capsys, *words)
    assert status == 0
    assert _magic(shell, capsys, " ".join(words)) == out
    assert "device_assert" in out or "Device-side assertion" in out


def test_show_json_is_the_stored_record(recorded, shell, capsys):
    record = json.loads(_magic(shell, capsys, f"show --json {recorded.id[:6]}"))
    assert record["id"] == recorded.id and record["schema"] == recorded.schema
    assert record["diagnosis"]["family"] == "device_assert"


@pytest.mark.parametrize("command", ["show", "report"])
def test_an_unknown_id_is_refused_with_the_same_message(recorded, shell, capsys, command):
    status, _, err = _terminal(capsys, command, "zzz")
    assert status == 1
    message = err.removeprefix(f"cudadiag {command}: ").strip()
    assert message.startswith("no incident with an id starting with 'zzz'")
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("cudadiag", f"{command} zzz")
    assert str(raised.value) == message


def test_an_export_path_is_checked_before_the_log_is_read(shell, capsys, tmp_path):
    target = str(tmp_path / "missing" / "repro.ipynb")
    status, _, err = _terminal(capsys, "export", "abc", target)
    assert status == 2 and "missing" in err
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("cudadiag", f"export abc {target}")
    assert str(raised.value) == err.removeprefix("cudadiag export: ").strip()


@pytest.mark.parametrize("line", ["-h", "incidents -h", "show --help", "validate -h"])
def test_the_help_of_a_magic_is_shown_once(shell, capsys, line):
    with pytest.raises(UsageError) as helped:
        shell.run_line_magic("cudadiag", line)
    assert str(helped.value).startswith("usage: %cudadiag")
    assert "show this help message and exit" in str(helped.value)
    assert "usage:" not in capsys.readouterr().out  # not printed before it is raised
