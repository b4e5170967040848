"""Jobs of several ranks in Japanese (journeys 2.3 and 6 of issue 28): `cudadiag run
--nproc-per-node 2` and two `cudadiag run --nnodes 2 --node-rank K` agents with
CUDADIAG_LANG=ja name the rank (and node) that failed first and mark the rest as its
consequences in Japanese; `incidents`, `show`, `report` and `explain` of the job's log say
the same. PyTorch's, gloo's and torchrun's own lines stay as they are."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudadiag import incidents
from cudadiag.i18n import localize, using
from cudadiag.incident import Incident
from cudadiag.isolate.job import Job
from cudadiag.isolate.rankfiles import LauncherFailure, LauncherReport, RankState
from cudadiag.isolate.ranks import TorchrunJob
from cudadiag.log.store import IncidentStore
from node_agents import AGENT_LIMIT_S, two_nodes
from node_agents import BAD_TARGET as NODES_BAD_TARGET
from test_ranks import BAD_TARGET, JOB_LIMIT_S
from untranslated import english_left

LANGUAGE_SETTINGS = ("CUDADIAG_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
TORCHRUN_REPORT_END = "=" * 60
"""The rule that closes torchrun's own report of the failures: cudadiag writes after it."""
CONSEQUENCE_OF_RANK_0 = "(その後 all_reduce 内で失敗| all_reduce 内で停止| 不明な場所で停止)"
"""Rank 0's end in Japanese: failed afterwards or was stopped in all_reduce, or stopped
before it wrote where it was (tests/test_ranks.py's FIRST_AND_CONSEQUENCE)."""
FIRST_AND_CONSEQUENCE = re.compile(
    r"ランク 1 が step 3 の時点で最初に失敗しました（nll_loss, target 4）。ランク 0 は"
    + CONSEQUENCE_OF_RANK_0 + " — これらは最初の失敗の結果です")


def cudadiag_ja(*args: str, cwd: Path, timeout: float = 300
                ) -> subprocess.CompletedProcess[str]:
    """The command as a user types it with CUDADIAG_LANG=ja (no other language setting)."""
    base = {k: v for k, v in os.environ.items() if k not in LANGUAGE_SETTINGS}
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                           capture_output=True, text=True, timeout=timeout,
                           env={**base, "CUDADIAG_LANG": "ja"})


def cudadiags_part(stderr: str) -> str:
    """What cudadiag printed after the ranks' and torchrun's own lines: from its first line
    (a waiting line, the diagnosis) after torchrun's report of the failures, when there is
    one."""
    after = stderr.rpartition(TORCHRUN_REPORT_END)[2]
    start = re.search(r"^cudadiag(:| \[)", after, re.MULTILINE)
    assert start, stderr[-3000:]
    return after[start.start():]


def quoted_by(incident: Incident) -> list[str]:
    """What cudadiag quotes of an incident as it is: the error's text and message (PyTorch's
    or the simulated device's), the other ranks' messages (gloo's), the program's
    statements and loop headers."""
    frames = incident.loop.frames if incident.loop else []
    return [incident.error.text, incident.error.message,
            *(later.message for later in incident.error.later),
            *(frame.statement for frame in frames),
            *(loop.header for frame in frames for loop in frame.loops)]


def english_written(text: str, quoted: list[str]) -> list[str]:
    """english_left(text) less the runs whose words are quoted (in `quoted`, as they are or
    as english_left reads them), however the output wrapped or cut the quotation."""
    readings = [_words(r) for q in quoted for r in (q, *english_left(q))]
    return [run for run in english_left(text)
            if not any(_within(_words(run), words) for words in readings)]


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{2,}", text)


def _within(words: list[str], quoted: list[str]) -> bool:
    return any(quoted[i:i + len(words)] == words for i in range(len(quoted) - len(words) + 1))


@pytest.mark.slow
def test_a_two_rank_job_in_japanese_names_the_first_failure_and_its_consequences(tmp_path):
    (tmp_path / "train.py").write_text(BAD_TARGET)
    ran = cudadiag_ja("run", "--nproc-per-node", "2", "--", "train.py", cwd=tmp_path,
                      timeout=JOB_LIMIT_S * 3)
    assert ran.returncode == 1, ran.stderr[-3000:]  # torchrun's status
    (incident,) = incidents()
    assert incident.diagnosis.summary.startswith("rank 1 failed first at step 3")  # kept so
    quoted = quoted_by(incident)
    diagnosis = cudadiags_part(ran.stderr)
    assert FIRST_AND_CONSEQUENCE.search(diagnosis), diagnosis
    assert f"詳細：cudadiag show {incident.id}" in diagnosis
    assert english_written(diagnosis, quoted) == []

    listing = cudadiag_ja("incidents", cwd=tmp_path).stdout
    assert "ランク 1 が step 3 の時点で最初に失敗しました（nll_loss, target 4）。" in listing
    shown = cudadiag_ja("show", incident.id, cwd=tmp_path).stdout
    summary = re.search(r"^device_assert: " + FIRST_AND_CONSEQUENCE.pattern, shown, re.M)
    assert summary, shown
    if summary.group(1).startswith("その後"):  # rank 0 raised: its error is a later one
        assert "後続のエラー（1 件、おそらく最初のエラーの結果）" in shown
    assert "ランク 1（ローカル 1、" in shown and "device_assert を送出" in shown
    assert english_written(shown, quoted) == []
    report = cudadiag_ja("report", incident.id, cwd=tmp_path).stdout
    assert re.search(r"^## device_assert: " + FIRST_AND_CONSEQUENCE.pattern, report, re.M)
    assert english_written(report, quoted) == []

    (tmp_path / "job.log").write_text(ran.stderr)  # the job's log, as a cluster keeps it
    explained = cudadiag_ja("explain", "job.log", cwd=tmp_path).stdout
    assert re.search(r"^最初のエラー（\d+ 行目、(\S+ の)?ランク 1）：$", explained, re.M), explained
    assert "後続のエラー（ランク 1 の失敗の結果と考えられます）：" in explained
    assert english_written(explained, quoted) == []


@pytest.mark.slow
def test_two_nodes_in_japanese_print_the_same_first_failure_and_explain_says_it(tmp_path):
    node0, node1 = two_nodes(tmp_path, NODES_BAD_TARGET, env={"CUDADIAG_LANG": "ja"})
    assert (node0.wait(), node1.wait()) == (1, 1)  # torchrun's status on each node
    (id0, summary0), (id1, summary1) = node0.summary(), node1.summary()
    assert (id0, summary0) == (id1, summary1), (node0.stderr()[-3000:], node1.stderr()[-3000:])
    incident = node1.incident()
    assert incident.id == node0.incident().id == id0
    with using("ja"):
        assert localize(incident.diagnosis.summary) == summary0  # the record says the same
    first = next(r for r in incident.run.ranks if r.node_rank == 1)
    other = next(r for r in incident.run.ranks if r.node_rank == 0)
    assert re.fullmatch(
        rf"ノード 1 のランク {first.rank} が step 3 の時点で最初に失敗しました"
        rf"（nll_loss, target 4）。ノード 0 のランク {other.rank} は"
        + CONSEQUENCE_OF_RANK_0.replace("ランク 0", "") + " — これらは最初の失敗の結果です",
        summary0), summary0
    quoted = quoted_by(incident)
    for node in (node0, node1):
        assert english_written(cudadiags_part(node.stderr()), quoted) == []

    job_log = tmp_path / "job.log"  # both nodes' output in one file, as a scheduler keeps it
    job_log.write_text(node0.stderr() + node1.stderr())
    explained = cudadiag_ja("explain", "job.log", cwd=tmp_path, timeout=AGENT_LIMIT_S).stdout
    assert re.search(rf"^最初のエラー（\d+ 行目、(\S+ の)?ランク {first.rank}）：$", explained,
                     re.M), explained
    assert f"後続のエラー（ランク {first.rank} の失敗の結果と考えられます）：" in explained
    assert english_written(explained, quoted) == []


def test_a_stored_collective_timeout_reads_in_japanese_with_where_the_hung_rank_was(
        tmp_path, cudadiag_home):
    job = TorchrunJob(["--nproc-per-node", "2"], sys.executable)
    job.prepare(Job(tmp_path, []), None)
    assert job.folder is not None
    timed_out = ("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv "
                 "operation to complete")
    for state in (_rank(0), _rank(1, outcome="raised", error_type="RuntimeError",
                                  message=timed_out, text=timed_out, where="all_reduce")):
        (job.folder / f"a0.rank{state.rank}.json").write_bytes(state.to_json())
    (job.folder / "a0.rank0.stack").write_text(  # what rank 0 dumped when it was stopped
        "Current thread 0x00007f0000000000 (most recent call first):\n"
        f'  File "{tmp_path / "job.py"}", line 10 in <module>\n')
    LauncherReport(1, [LauncherFailure(1, 1, 2**31 - 2, 1, 1.7e9),
                       LauncherFailure(0, 0, 2**31 - 1, -15, 1.7e9)]
                   ).write(tmp_path / "torchrun.json")
    result = job.collect(stopped=False)
    assert result is not None and result.incident is not None
    incident = result.incident
    job.complete(incident)
    assert "rank 0 was still at job.py:10 in <module> when it was stopped" in \
        incident.diagnosis.summary  # English as it was
    IncidentStore(cudadiag_home).append(incident)

    shown = cudadiag_ja("show", incident.id, cwd=tmp_path).stdout
    headline = shown.splitlines()[1]
    assert headline.startswith("distributed: 自身のエラーを発生させたランクはありません。"
                               "失敗したのは集団通信だけです"), shown
    assert "ランク 0 は停止時にまだ job.py:10（<module> 内）にいました" in headline
    assert english_left(headline) == []
    listing = cudadiag_ja("incidents", cwd=tmp_path).stdout
    assert "自身のエラーを発生させたランクはありません。" in listing


def _rank(rank: int, **fields: str) -> RankState:
    """A rank's record as a rank of a two-rank job leaves it (a pid that runs no process)."""
    return RankState(rank=rank, local_rank=rank, node="gpu3", pid=2**31 - 1 - rank,
                     world_size=2, attempt=0, at=f"2025-01-01T00:00:0{rank}.000+00:00",
                     **fields)
