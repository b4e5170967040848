"""Retention: the newest N incidents, none older than D days, set in config.json, shown by
`incidents --stats`; what falls out is pruned on purpose, with a line, with its run files."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from cudadiag import classify, cli
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.log import store as store_module
from cudadiag.log.retention import Retention, RetentionConfigError, load_retention
from cudadiag.log.store import IncidentStore

ASSERT = "CUDA error: device-side assert triggered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture(autouse=True)
def no_unsaved_records_between_tests():
    store_module._unsaved.clear()
    yield
    store_module._unsaved.clear()


def make_incident(message: str = ASSERT, days_ago: float = 0.0, mode: str = "kernel"
                  ) -> Incident:
    created = datetime.now(timezone.utc) - timedelta(days=days_ago)
    return Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                    diagnosis=classify(message), run=RunInfo(mode=mode, cells=[2]),
                    created_at=created.isoformat(timespec="seconds"))


def _with_run_files(store: IncidentStore, incident: Incident, tmp_path, values: bytes) -> None:
    rng = tmp_path / "rng_states.pt"
    rng.write_bytes(b"rng")
    store.keep_run_file(incident.id, rng)
    shipped = tmp_path / f"values-{incident.id}.pkl"
    shipped.write_bytes(values)
    assert store.keep_shipped(incident.id, shipped) is None


def test_the_retention_comes_from_config_json_with_defaults(cudadiag_home):
    assert load_retention(cudadiag_home) == Retention(10_000, 180.0)
    cudadiag_home.mkdir()
    (cudadiag_home / "config.json").write_text('{"retention": {"incidents": 500}}')
    retention = load_retention(cudadiag_home)
    assert (retention.incidents, retention.days) == (500, 180.0)
    assert retention.source == f"set in {cudadiag_home / 'config.json'}"


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not a JSON object"),
    ('{"retention": {"incidents": 0}}', "at least 1, not 0"),
    ('{"retention": {"days": "a year"}}',
     r"a number above 0 and at most 36,525 \(100 years\), not 'a year'"),
    ('{"retention": {"count": 5}}', 'takes "incidents" and "days" only'),
])
def test_a_bad_config_says_what_to_fix(cudadiag_home, text, says):
    cudadiag_home.mkdir()
    (cudadiag_home / "config.json").write_text(text)
    with pytest.raises(RetentionConfigError, match=says):
        load_retention(cudadiag_home)


def test_a_bad_config_never_stops_an_incident_from_being_saved(cudadiag_home, capsys):
    cudadiag_home.mkdir()
    (cudadiag_home / "config.json").write_text('{"retention": {"incidents": -3}}')
    store = IncidentStore()
    for _ in range(2):
        store.append(make_incident())
    assert len(store.entries()) == 2
    (line,) = capsys.readouterr().err.splitlines()  # said once
    assert line.startswith("cudadiag: nothing is pruned from the incident log: ")
    assert "at least 1, not -3" in line


def test_incidents_beyond_the_count_are_pruned_with_a_line_and_their_run_files(
        tmp_path, capsys):
    store = IncidentStore(retention=Retention(incidents=3))
    made = [make_incident(days_ago=1 - n / 100, mode="isolated") for n in range(3)]
    for n, incident in enumerate(made):
        store.append(incident)
        _with_run_files(store, incident, tmp_path, values=b"shared" if n else b"own")
    newest = make_incident()
    store.append(newest)
    err = capsys.readouterr().err
    assert err.strip() == (
        "cudadiag: pruned 1 incident(s) from the log (1 beyond the newest 3) and 1 isolated "
        "runs' files; retention: the newest 3 incidents, none older than 180 days (defaults"
        "; see `cudadiag incidents --stats`)")
    assert [e.id for e in store.entries()] == [made[1].id, made[2].id, newest.id]
    assert [i.id for i in store.load()] == [made[1].id, made[2].id, newest.id]
    assert not store.run_files(made[0].id).exists()
    assert store.shipped_file(made[0].id) is None
    assert len(list((store.home / "shipped").glob("*.pkl"))) == 1  # the shared values stay
    assert store.shipped_file(made[1].id).read_bytes() == b"shared"


def test_incidents_older_than_the_days_are_pruned_at_the_next_append(capsys):
    store = IncidentStore()
    old = [make_incident(OOM, days_ago=200), make_incident(days_ago=190)]
    store.home.mkdir()
    with (store.home / "incidents.jsonl").open("w") as f:  # an earlier version, long ago
        f.writelines(json.dumps(i.to_dict()) + "\n" for i in old)
    assert len(store.entries()) == 2
    recent = make_incident(days_ago=10)
    store.append(recent)
    err = capsys.readouterr().err
    assert "pruned 2 incident(s) from the log (2 older than 180 days)" in err
    assert [e.id for e in store.entries()] == [recent.id]
    with pytest.raises(store_module.IncidentNotFound, match="no incident with an id"):
        store.get(old[0].id)


def test_a_prune_deletes_the_rows_beyond_the_retention_and_frees_their_pages(tmp_path):
    store = IncidentStore(tmp_path, retention=Retention(incidents=400))
    made = [make_incident(days_ago=1 - n / 1000) for n in range(40)]
    for incident in made:
        incident.error.text = "device line\n" * 400
        store.append(incident)
    result = store.prune(Retention(incidents=10))
    assert [e.id for e in result.pruned] == [i.id for i in made[:30]]
    assert [i.id for i in store.load()] == [i.id for i in made[30:]]
    assert all(store.get(i.id).id == i.id for i in made[30:])
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM incidents").fetchone() == (10,)
        assert db.execute("PRAGMA freelist_count").fetchone() == (0,)  # given back
    assert store.prune(Retention(incidents=10)).pruned == []


def test_cli_prune_by_hand_and_the_stats(capsys):
    store = IncidentStore()
    made = [make_incident(OOM if n % 2 else ASSERT, days_ago=5 - n) for n in range(5)]
    for incident in made:
        store.append(incident)
    assert cli.main(["incidents", "--stats"]) == 0
    out = capsys.readouterr().out
    assert f"incident log: {store.path} (" in out
    assert "incidents: 5, " in out and "families: device_assert 3, oom 2" in out
    assert "modes: kernel 5" in out
    assert "retention: the newest 10,000 incidents, none older than 180 days (defaults)" in out
    assert f'write {{"retention": {{"incidents": N, "days": D}}}} to {store.home}/config.json' \
        in out
    assert cli.main(["incidents", "--prune", "--keep", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cudadiag: pruned 3 incident(s) from the log (3 beyond the newest 2)")
    assert [e.id for e in store.entries()] == [i.id for i in made[3:]]
    assert cli.main(["incidents", "--prune", "--keep-days", "1.5"]) == 0
    assert "pruned 1 incident(s) from the log (1 older than 1.5 days)" in capsys.readouterr().out
    assert [e.id for e in store.entries()] == [made[4].id]
    assert cli.main(["incidents", "--prune"]) == 0
    assert capsys.readouterr().out.startswith("cudadiag: nothing to prune; retention: the newest")


def test_cli_stats_names_a_config_it_cannot_read(cudadiag_home, capsys):
    IncidentStore().append(make_incident())
    (cudadiag_home / "config.json").write_text('{"retention": {"days": 0}}')
    assert cli.main(["incidents", "--stats"]) == 0
    out = capsys.readouterr().out
    assert "retention: cannot be read, nothing is pruned: " in out
    assert ("days an incident is kept must be a number above 0 and at most 36,525 (100 years), "
            "not 0") in out
    assert cli.main(["incidents", "--prune"]) == 2
    assert capsys.readouterr().err.startswith("cudadiag incidents: ")


def test_config_retention_is_shown_with_its_file(cudadiag_home, capsys):
    cudadiag_home.mkdir()
    config = cudadiag_home / "config.json"
    config.write_text(json.dumps({"retention": {"incidents": 20_000, "days": 365}}))
    IncidentStore().append(make_incident())
    assert cli.main(["incidents", "--stats"]) == 0
    assert (f"retention: the newest 20,000 incidents, none older than 365 days (set in "
            f"{config})") in capsys.readouterr().out


FAILING_SCRIPT = ("import torch\nimport torch.nn.functional as F\n"
                  "F.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))\n")


@pytest.mark.slow
@pytest.mark.parametrize("days, shown", [("1e9", "1000000000.0"), ("Infinity", "inf")])
def test_an_absurd_retention_in_config_json_is_said_after_a_run_not_an_overflow(
        cudadiag_home, tmp_path, days, shown):
    cudadiag_home.mkdir()
    config = cudadiag_home / "config.json"
    config.write_text(f'{{"retention": {{"days": {days}}}}}')
    (tmp_path / "fails.py").write_text(FAILING_SCRIPT)
    ran = subprocess.run([sys.executable, "-m", "cudadiag.cli", "run", "fails.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1
    assert "OverflowError" not in ran.stderr
    assert (f"cudadiag: nothing is pruned from the incident log: {config}: the days an "
            f"incident is kept must be a number above 0 and at most 36,525 (100 years), not "
            f"{shown}\n") in ran.stderr
    listed = subprocess.run([sys.executable, "-m", "cudadiag.cli", "incidents"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "index_out_of_bounds" in listed.stdout, listed.stderr


def test_magic_stats_with_an_absurd_retention_say_what_to_fix(shell, cudadiag_home, capsys):
    IncidentStore().append(make_incident())
    (cudadiag_home / "config.json").write_text('{"retention": {"days": 1e9}}')
    result = shell.run_cell("%cudadiag incidents --stats")
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out
    assert "retention: cannot be read, nothing is pruned: " in out
    assert "at most 36,525 (100 years), not 1000000000.0" in out
    assert not shell.run_cell("%cudadiag incidents --prune").success


@pytest.mark.parametrize("words, says", [
    (["--prune", "--keep-days", "1e9"], "--keep-days: expected a number of days greater "
                                        "than 0 and at most 36,525, like 180 or 1.5; got '1e9'"),
    (["--since", "99999999999d"], "--since 99999999999d: reaches back before the calendar "
                                  "starts; give a date"),
    (["--since", "9999999d"], "--since 9999999d: reaches back before the calendar starts"),
])
def test_cli_absurd_spans_of_days_are_usage_errors(capsys, words, says):
    IncidentStore().append(make_incident())
    with pytest.raises(SystemExit) if words[0] == "--prune" else contextlib.nullcontext():
        assert cli.main(["incidents", *words]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
