"""Listing filters of `incidents` (--family, --since, --mode, --cell), in the shell command
and the magic: they combine, and a bad value says what it takes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from IPython.core.error import UsageError

from cudadiag import classify, cli
from cudadiag.incident import ErrorInfo, Frame, Incident, RunInfo
from cudadiag.log.query import ListingError, make_filters, parse_since
from cudadiag.log.store import IncidentStore

ASSERT = "CUDA error: device-side assert triggered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def make_incident(message: str, mode: str, days_ago: float, cells: list[int] | None = None,
                  command: list[str] | None = None) -> Incident:
    created = datetime.now(timezone.utc) - timedelta(days=days_ago)
    incident = Incident(error=ErrorInfo(type="RuntimeError", message=message, text=message),
                        diagnosis=classify(message),
                        run=RunInfo(mode=mode, cells=cells or [], command=command or []),
                        created_at=created.isoformat(timespec="seconds"))
    if mode == "isolated" and cells:
        incident.error.reported_at = Frame(file="<cell>", line=1, function="<module>",
                                           cell=cells[-1])
    return incident


@pytest.fixture
def log() -> dict[str, Incident]:
    made = {
        "old_kernel_assert": make_incident(ASSERT, "kernel", 20, cells=[4]),
        "kernel_oom": make_incident(OOM, "kernel", 2, cells=[7]),
        "isolated_assert": make_incident(ASSERT, "isolated", 1, cells=[2, 4]),
        "script_oom": make_incident(OOM, "cli", 0.5, command=["jobs/train.py", "--lr", "1"]),
        "module_assert": make_incident(ASSERT, "cli", 0.1, command=["-m", "pkg.train"]),
    }
    store = IncidentStore()
    for incident in made.values():
        store.append(incident)
    return made


def _listed(capsys, *options: str) -> list[str]:
    assert cli.main(["incidents", *options]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines()[1:] if not line.startswith("... ")]
    return [line.split()[0] for line in rows] if out.startswith("id ") else []


def test_each_filter_and_their_combination(log, capsys):
    ids = {name: i.id for name, i in log.items()}
    assert _listed(capsys) == list(ids.values())
    assert _listed(capsys, "--family", "oom") == [ids["kernel_oom"], ids["script_oom"]]
    assert _listed(capsys, "--since", "3d") == list(ids.values())[1:]
    assert _listed(capsys, "--mode", "cli") == [ids["script_oom"], ids["module_assert"]]
    assert _listed(capsys, "--cell", "4") == [ids["old_kernel_assert"], ids["isolated_assert"]]
    assert _listed(capsys, "--cell", "In[4]", "--since", "7d") == [ids["isolated_assert"]]
    assert _listed(capsys, "--cell", "train.py") == [ids["script_oom"]]
    assert _listed(capsys, "--cell", "pkg.train", "--family", "device_assert") == [
        ids["module_assert"]]
    assert _listed(capsys, "--family", "oom", "--mode", "isolated") == []


def test_a_listing_shows_the_newest_matches_and_says_how_many_are_not_shown(log, capsys):
    ids = [i.id for i in log.values()]
    assert _listed(capsys, "--last", "2") == ids[-2:]
    assert cli.main(["incidents", "--last", "2"]) == 0
    assert "... 3 older incident(s) not shown (the newest 2 are): --all shows them" in (
        capsys.readouterr().out)
    assert _listed(capsys, "--last", "1", "--family", "oom") == [log["script_oom"].id]
    assert cli.main(["incidents", "--last", "1", "--family", "oom"]) == 0
    assert "... 1 older incident(s) not shown" in capsys.readouterr().out
    assert _listed(capsys, "--all") == ids
    assert cli.main(["incidents"]) == 0
    assert "not shown" not in capsys.readouterr().out


def test_a_listing_is_fifty_incidents_unless_told(capsys):
    store = IncidentStore()
    made = [make_incident(ASSERT, "kernel", 1 - n / 100, cells=[n]) for n in range(60)]
    for incident in made:
        store.append(incident)
    assert _listed(capsys) == [i.id for i in made[10:]]
    assert _listed(capsys, "--all") == [i.id for i in made]
    with pytest.raises(SystemExit) as usage:
        cli.main(["incidents", "--all", "--last", "3"])
    assert usage.value.code == 2
    assert "argument --last: not allowed with argument --all" in capsys.readouterr().err


def test_the_listing_names_cells_and_scripts(log, capsys):
    assert cli.main(["incidents"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "  In[4]  " in rows[log["isolated_assert"].id]
    assert "  train.py  " in rows[log["script_oom"].id]
    assert "  pkg.train  " in rows[log["module_assert"].id]


def test_no_match_says_so_with_the_filters(log, capsys):
    assert cli.main(["incidents", "--family", "oom", "--mode", "isolated"]) == 0
    assert capsys.readouterr().out.strip() == (
        "no incident matches --family oom --mode isolated (5 in the log)")


@pytest.mark.parametrize("options, says", [
    (["--family", "oops"], "--family oops: no such family; one of: device_assert"),
    (["--since", "last tuesday"], "--since last tuesday: give a date (2026-11-30)"),
    (["--cell", "-"], "--cell -: give a cell number (3 or In[3]) or a script"),
    (["--stats", "--family", "oom"], "--stats takes no filter (--family oom)"),
    (["--keep", "3"], "--keep and --keep-days go with --prune"),
])
def test_bad_filters_are_usage_errors(log, capsys, options, says):
    assert cli.main(["incidents", *options]) == 2
    assert capsys.readouterr().err.startswith(f"cudadiag incidents: {says}")


def test_argparse_refuses_a_bad_mode_and_counts(capsys):
    for options in (["--mode", "gpu"], ["--prune", "--keep", "0"], ["--stats", "--prune"]):
        with pytest.raises(SystemExit) as caught:
            cli.main(["incidents", *options])
        assert caught.value.code == 2
    assert "invalid choice: 'gpu'" in capsys.readouterr().err


def test_since_takes_dates_times_and_spans():
    assert parse_since("12h", NOW) == NOW - timedelta(hours=12)
    assert parse_since("2w", NOW) == NOW - timedelta(weeks=2)
    assert parse_since("90m", NOW) == NOW - timedelta(minutes=90)
    assert parse_since("2026-11-30T14:00+00:00") == datetime(2026, 11, 30, 14, 0,
                                                              tzinfo=timezone.utc)
    local = parse_since("2026-11-30")
    assert local.tzinfo is not None and (local.year, local.month, local.day) == (2026, 11, 30)
    with pytest.raises(ListingError):
        make_filters(since="3 days")


def test_the_magic_lists_with_the_same_filters(log, shell, capsys):
    shell.run_line_magic("load_ext", "cudadiag")
    capsys.readouterr()
    shell.run_line_magic("cudadiag", "incidents --family device_assert --cell 4")
    out = capsys.readouterr().out
    assert log["old_kernel_assert"].id in out and log["isolated_assert"].id in out
    assert log["module_assert"].id not in out
    shell.run_line_magic("cudadiag", "incidents --stats")
    assert "incidents: 5, " in capsys.readouterr().out
    with pytest.raises(UsageError, match="--since soon: give a date"):
        shell.run_line_magic("cudadiag", "incidents --since soon")
    with pytest.raises(UsageError, match="invalid choice: 'gpu'"):
        shell.run_line_magic("cudadiag", "incidents --mode gpu")
    with pytest.raises(UsageError) as unknown:
        shell.run_line_magic("cudadiag", "bogus")
    assert "{incidents,show,panel,report,export,checkpoints,explain,validate,attach,lang}" in str(
        unknown.value)


def test_keep_days_refuses_a_bad_number_in_days(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["incidents", "--prune", "--keep-days", "0"])
    assert caught.value.code == 2
    assert ("--keep-days: expected a number of days greater than 0 and at most 36,525, like "
            "180 or 1.5; got '0'") in capsys.readouterr().err
