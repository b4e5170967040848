"""`cudadiag explain` and `%cudadiag explain`: the first error of a log, the rank that failed
first, the other ranks as consequences, streamed in bounded memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tracemalloc

import pytest
from IPython.core.error import UsageError

from cudadiag import cli
from cudadiag.explain import explain_blocks, explain_path, explain_text

ASSERT_RANK1 = (
    "[rank1]: /pytorch/aten/src/ATen/native/cuda/Loss.cu:240: "
    "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion "
    "`t >= 0 && t < n_classes` failed.\n"
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "train.py", line 88, in <module>\n'
    "[rank1]:     loss.item()\n"
    "[rank1]: RuntimeError: CUDA error: device-side assert triggered\n"
)
WATCHDOG_RANK0 = (
    "[rank0]:[E501 12:59:59.000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.\n"
)
PROGRESS = "[rank{r}]: 2024-05-01 12:00:{s:02d},000 INFO step {s} loss=0.5\n"


def progress(lines: int) -> str:
    return "".join(PROGRESS.format(r=i % 2, s=i % 60) for i in range(lines))


def test_first_failing_rank_decides_and_the_others_are_consequences():
    log = progress(50) + ASSERT_RANK1 + progress(10) + WATCHDOG_RANK0
    explanation = explain_text(log)
    assert explanation.diagnosis.family == "device_assert"
    assert explanation.diagnosis.sticky
    assert explanation.diagnosis.rank == 1
    assert "Assertion `t >= 0 && t < n_classes` failed" in explanation.diagnosis.evidence
    assert [(c.rank, c.family) for c in explanation.consequences] == [(0, "distributed")]
    assert explanation.first is not None and explanation.first.line == 51


def test_a_louder_collective_error_printed_first_is_still_a_consequence():
    log = WATCHDOG_RANK0 + ASSERT_RANK1
    explanation = explain_text(log)
    assert explanation.diagnosis.rank == 1
    assert explanation.diagnosis.family == "device_assert"


def test_timestamps_decide_which_rank_failed_first_when_lines_carry_them():
    later = ("[rank0]: 2024-05-01 12:00:09,000 ERROR RuntimeError: CUDA error: an illegal memory "
             "access was encountered\n")
    earlier = ("[rank1]: 2024-05-01 12:00:03,000 ERROR torch.OutOfMemoryError: CUDA out of "
               "memory. Tried to allocate 2.00 GiB.\n")
    explanation = explain_text(later + earlier)
    assert explanation.diagnosis.rank == 1
    assert explanation.diagnosis.family == "oom"
    assert explanation.consequences[0].rank == 0
    # a sticky error anywhere in the log still means a restart
    assert explanation.diagnosis.sticky
    assert "illegal memory access" in explanation.diagnosis.details["sticky_evidence"]


def test_without_timestamps_the_first_to_appear_decides():
    text = ("[rank3]: RuntimeError: Expected all tensors to be on the same device, but found "
            "at least two devices, cuda:3 and cpu!\n"
            "[rank2]: RuntimeError: CUDA error: device-side assert triggered\n")
    explanation = explain_text(text)
    assert explanation.diagnosis.rank == 3
    assert explanation.diagnosis.family == "device_mismatch"


def test_only_collective_timeouts_point_at_the_slow_rank_not_a_kernel():
    text = (progress(20)
            + "[rank2]: 2024-05-01 12:00:30,000 INFO step 99 loss=0.5\n"
            + WATCHDOG_RANK0
            + WATCHDOG_RANK0.replace("rank0", "rank1").replace("Rank 0", "Rank 1")
            .replace("SeqNum=6463", "SeqNum=6462"))
    explanation = explain_text(text)
    assert explanation.only_collective_failures
    assert explanation.diagnosis.family == "distributed"
    assert not explanation.diagnosis.sticky
    assert explanation.silent_ranks == [2]
    from cudadiag.explain.view import render_explanation

    rendered = render_explanation(explanation, "job.log")
    assert "no rank raised an error first" in rendered
    assert "Ranks with no error in this log: 2" in rendered
    assert "behind: 1" in rendered


def test_torchrun_summary_names_the_root_cause_rank_when_only_collectives_failed():
    text = (WATCHDOG_RANK0
            + "[rank1]: [E501 12:59:58] NCCL communicator was aborted on rank 1.\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
            "Root Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_12:59:58\n"
            "  host      : node7\n  rank      : 1 (local_rank: 1)\n  exitcode  : -6\n")
    explanation = explain_text(text)
    assert explanation.root_cause_rank == 1
    assert explanation.diagnosis.rank == 1


def test_slurm_label_and_torchrun_tee_prefixes_are_ranks():
    text = ("0: step 1\n1: step 1\n"
            "1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
            "[default0]: RuntimeError: NCCL communicator was aborted on rank 0.\n")
    explanation = explain_text(text)
    assert explanation.diagnosis.rank == 1
    assert explanation.diagnosis.family == "oom"
    assert explanation.consequences[0].rank == 0


def test_single_process_log_has_no_rank():
    explanation = explain_text("epoch 1\n" + ASSERT_RANK1.replace("[rank1]: ", ""))
    assert explanation.diagnosis.rank is None
    assert explanation.to_dict()["rank"] is None


def test_an_unknown_python_error_is_reported_with_its_line():
    explanation = explain_text("loading data\nKeyError: 'label'\n")
    assert explanation.diagnosis.family == "unknown"
    assert explanation.diagnosis.evidence == "KeyError: 'label'"


def test_a_stream_is_read_in_bounded_memory(tmp_path):
    # long lines (a metrics dump each): 10 MB in 6,000 lines; tracemalloc slows every
    # allocation, and a short-line log this size took minutes under it
    metrics = " metrics=" + "0.125," * 300 + "\n"
    log = "".join(line.rstrip("\n") + metrics for line in progress(6000).splitlines(True))
    data = log.encode()
    assert len(data) > 10 * 2**20

    def chunks():
        for start in range(0, len(data), 4093):  # cut at odd places
            yield data[start:start + 4093]
        yield ASSERT_RANK1.encode()

    tracemalloc.start()
    explanation = explain_blocks(chunks())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert explanation.diagnosis.rank == 1
    assert explanation.lines == 6000 + 5
    assert peak < 2**20


TQDM_BAR = "".join(f"\rtrain: {i // 10:3d}%|{'#' * (i // 100):10s}| {i}/1000 [00:{i // 100:02d}"
                   f"<00:10, 95.1it/s, loss=0.{i:03d}]" for i in range(0, 1000, 5))
ASSERT_LINE = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_"
               "kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` "
               "failed.")


@pytest.mark.parametrize("lines_before", [0, 60000], ids=["pasted", "long log"])
def test_an_error_after_a_progress_bars_redraws_on_its_line_is_found_and_shown_alone(
        tmp_path, capsys, lines_before):
    log = tmp_path / "slurm-1234.out"
    log.write_text("srun: job 1234 started\n" + "step 1 loss=0.5 lr=3e-4\n" * lines_before
                   + TQDM_BAR + ASSERT_LINE
                   + "\nsrun: error: node17: task 0: Aborted (core dumped)\n")
    assert len(TQDM_BAR) > 12000
    assert cli.main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"first error (line {lines_before + 2:,}):" in out
    (evidence,) = [line for line in out.splitlines() if "Assertion" in line]
    assert evidence.endswith(ASSERT_LINE) and len(evidence) < len(ASSERT_LINE) + 100
    assert "`t >= 0 && t < n_classes` failed in nll_loss_forward_reduce_cuda_kernel_2d" in out


def test_a_ranks_progress_bar_frames_keep_its_rank():
    explanation = explain_text("[rank0]: step 1\n[rank1]: " + TQDM_BAR + "\r" + ASSERT_LINE
                               + "\n[rank0]: step 2\n")
    assert explanation.diagnosis.family == "device_assert"
    assert explanation.diagnosis.rank == 1 and explanation.first.evidence == ASSERT_LINE


def test_an_error_after_a_long_unbroken_line_is_found():
    explanation = explain_text("epoch 1 " * 3000 + "RuntimeError: CUDA error: an illegal "
                               "memory access was encountered\n")
    assert explanation.diagnosis.family == "illegal_memory"
    assert explanation.first.evidence.endswith("an illegal memory access was encountered")


def test_cli_explains_a_file_in_text_and_json(tmp_path, capsys):
    log = tmp_path / "slurm-1234.out"
    log.write_text(progress(30) + ASSERT_RANK1 + WATCHDOG_RANK0)
    assert cli.main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "first error (line 31, rank 1)" in out
    assert "restart: yes" in out
    assert "rank 0, line 36: distributed" in out
    assert cli.main(["explain", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["family"], data["sticky"], data["rank"]) == ("device_assert", True, 1)
    assert data["evidence"].startswith("/pytorch/aten/src/ATen/native/cuda/Loss.cu:240")


def test_cli_reads_gzip_files(tmp_path, capsys):
    log = tmp_path / "job.log.gz"
    with gzip.open(log, "wt") as f:
        f.write(ASSERT_RANK1)
    assert cli.main(["explain", "--json", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == "device_assert"


@pytest.mark.slow
def test_cli_reads_pasted_text_from_standard_input():
    pasted = "Traceback (most recent call last):\n  File \"x.py\", line 3\nRuntimeError: " \
             "Expected all tensors to be on the same device, but found at least two devices, " \
             "cuda:0 and cpu!\n"
    out = subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", "--json", "-"],
                         input=pasted, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["family"] == "device_mismatch" and data["sticky"] is False


def test_cli_says_when_no_error_is_found_and_exits_1(tmp_path, capsys):
    log = tmp_path / "clean.log"
    log.write_text(progress(10))
    assert cli.main(["explain", str(log)]) == 1
    assert "no error found" in capsys.readouterr().out


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing.log", "no such file"),
    (lambda p: p, "is a directory"),
])
def test_cli_rejects_what_is_not_a_log_with_a_clear_message(tmp_path, capsys, make, message):
    assert cli.main(["explain", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudadiag explain: ") and message in err


def test_magic_explains_the_last_error_of_the_kernel(shell, capsys):
    from tests.scenarios import MODEL, SETUP, run

    # pytest re-points fds 1/2 between setup and call: load again so the device lines are read
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, SETUP)
    run(shell, MODEL + "\nloss.item()")
    capsys.readouterr()
    run(shell, "%cudadiag explain")
    out = capsys.readouterr().out
    assert "the last error of this kernel" in out
    assert "Assertion `t >= 0 && t < n_classes` failed" in out
    assert "restart: yes" in out


def test_magic_explains_a_file_or_pasted_text(shell, tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(ASSERT_RANK1 + WATCHDOG_RANK0)
    run_result = shell.run_cell(f"%cudadiag explain --json {log}")
    assert run_result.success
    data = json.loads(capsys.readouterr().out)
    assert (data["family"], data["rank"]) == ("device_assert", 1)
    shell.run_cell("%cudadiag explain RuntimeError: CUDA error: out of memory")
    assert "restart: not needed" in capsys.readouterr().out


def test_magic_without_an_error_or_argument_says_what_to_give(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext cudadiag")
    saved = [getattr(sys, name, None) for name in ("last_exc", "last_value")]
    for name in ("last_exc", "last_value"):
        if hasattr(sys, name):
            delattr(sys, name)
    try:
        result = ip.run_cell("%cudadiag explain")
    finally:
        for name, value in zip(("last_exc", "last_value"), saved, strict=True):
            if value is not None:
                setattr(sys, name, value)
        ip.extension_manager.unload_extension("cudadiag")
    assert not result.success
    assert "give a log file or the text to explain" in str(result.error_in_exec)


def test_explain_path_and_text_agree(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(progress(5) + ASSERT_RANK1)
    assert explain_path(log).to_dict() == explain_text(log.read_text()).to_dict()


@pytest.mark.parametrize("ending", ["", "\n"])
def test_cli_counts_the_bytes_of_the_file_whether_or_not_it_ends_in_a_newline(
        tmp_path, ending):
    log = tmp_path / "job.log"
    log.write_text(ASSERT_RANK1.rstrip("\n") + ending)
    size = log.stat().st_size
    shown = subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", str(log)],
                           capture_output=True, text=True, timeout=120)
    assert f"— 5 lines, {size:,} bytes" in shown.stdout.splitlines()[0]
    as_json = subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", "--json",
                              str(log)], capture_output=True, text=True, timeout=120)
    assert (json.loads(as_json.stdout)["bytes"], json.loads(as_json.stdout)["lines"]) == (
        size, 5)


@pytest.mark.parametrize("argument", ["/nonexistent.log", "~/no-such-folder/slurm-1.out",
                                      "slurm-404.out", "logs/train.log.gz"])
def test_a_mistyped_log_path_is_no_such_file_in_the_magic_as_in_the_cli(shell, tmp_path,
                                                                       argument):
    result = shell.run_cell(f"%cudadiag explain {argument}")
    assert isinstance(result.error_in_exec, UsageError)
    typed = os.path.expanduser(argument)
    assert str(result.error_in_exec) == f"{typed}: no such file"
    cli_run = subprocess.run([sys.executable, "-m", "cudadiag.cli", "explain", typed],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (cli_run.returncode, cli_run.stderr) == (2, f"cudadiag explain: {typed}: no such "
                                                       "file\n")


@pytest.mark.parametrize("pasted", ["CUBLAS_STATUS_NOT_SUPPORTED", "torch.OutOfMemoryError",
                                    "RuntimeError: CUDA error: out of memory"])
def test_pasted_words_that_are_no_path_are_still_explained_as_text(shell, capsys, pasted):
    assert shell.run_cell(f"%cudadiag explain {pasted}").success
    assert "cudadiag explain: the text given" in capsys.readouterr().out


GLOO_CLOSED = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] "
               "Connection closed by peer [127.0.0.1]:51234")


def test_a_node_log_takes_its_first_failure_from_cudadiags_line_when_its_own_are_consequences(
        tmp_path, capsys):
    line = ("cudadiag [0123456789ab] device_assert — rank 1 on node 1 failed first at step 3 "
            "(nll_loss, target 4); rank 0 on node 0 failed afterwards in all_reduce — "
            "consequences")
    log = tmp_path / "node0.log"
    log.write_text(f"{GLOO_CLOSED}\n{line}\n  details: cudadiag show 0123456789ab\n")
    explanation = explain_path(log)
    assert explanation.agreed and not explanation.agreed_from_incident  # no such incident here
    assert explanation.diagnosis.family == "device_assert" and explanation.first.line == 2
    assert [c.family for c in explanation.consequences] == ["distributed"]
    assert explanation.to_dict()["cudadiag_line"] == {
        "line": 2, "id": "0123456789ab", "family": "device_assert", "agreed": True,
        "incident_read": False}
    assert cli.main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"\n  {line}\n" in out and "first failure, as cudadiag diagnosed the run (line 2;" in out
    assert "later errors (probable consequences of the first error):\n  rank 0, line 1: " \
           "distributed — RuntimeError:" in out


def test_cudadiags_line_of_a_family_that_says_less_leaves_the_logs_own_error_first():
    text = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d"
            ": block: [0,0,0], thread: [4,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
            "cudadiag [0123456789ab] unknown — Unrecognised error: something else\n")
    explanation = explain_text(text)
    assert not explanation.agreed and explanation.first.line == 1
    assert explanation.diagnosis.family == "device_assert"
    assert explanation.diagnosed is not None  # seen, and not read as the program's error
    assert explanation.consequences == []
