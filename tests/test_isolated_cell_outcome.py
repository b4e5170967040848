"""How %cuda_isolate and %%blocking_launch cells end, as a notebook's "Run All" sees them:
interrupts, failing bodies, left-over processes, the comparison with the original failure,
folded replay output, bad options.

Each test with a shell waits for the kernel's warm interpreter (a torch import); its
isolated runs fork from it.
"""

from __future__ import annotations

import os
import time

import pytest
from IPython.core.error import UsageError

from cudadiag import incidents
from scenarios import MODEL, SETUP, run
from test_isolate_magics import _alive

pytestmark = [pytest.mark.slow, pytest.mark.isolates]

GRANDCHILD = ("import subprocess\n"
              "p = subprocess.Popen(['sleep', '30'])  # inherits stdout: keeps the pipe open\n"
              "print('grandchild', p.pid, flush=True)")



def _pids(text: str, word: str) -> list[int]:
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith(word + " ")]


@pytest.fixture
def interrupt_on(monkeypatch):
    """interrupt_on(b"text"): a Ctrl-C lands in the pump when the child prints `text`."""
    from cudadiag.isolate import output

    def arm(text: bytes) -> None:
        take = output.ChildOutput.take

        def take_then_interrupt(self, name, data):
            take(self, name, data)
            if text in data:
                raise KeyboardInterrupt

        monkeypatch.setattr(output.ChildOutput, "take", take_then_interrupt)
    return arm


@pytest.mark.parametrize("magic", ["%%blocking_launch\n", "%cuda_isolate"])
def test_an_interrupted_isolated_cell_raises_keyboard_interrupt_after_killing_its_group(
        shell, capsys, interrupt_on, magic):
    body = GRANDCHILD + "\nprint('started', flush=True)\nimport time\ntime.sleep(60)"
    if magic == "%cuda_isolate":
        _, cell = run(shell, "import time\n_ = 'long cell'")
        shell.history_manager.input_hist_raw[cell] = body  # as if In[cell] had been this
        magic = f"%cuda_isolate {cell}"
    interrupt_on(b"started")
    started = time.monotonic()
    result, _ = run(shell, magic + body if magic.startswith("%%") else magic)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert time.monotonic() - started < 40
    out = capsys.readouterr().out
    assert "cudadiag: interrupted; the isolated run's process group was killed" in out
    (grandchild,) = _pids(out, "grandchild")
    assert not _alive(grandchild)
    assert incidents() == []


def test_a_failing_blocking_launch_fails_the_cell_with_the_diagnosis_recorded_once(shell,
                                                                                   capsys):
    run(shell, "import torch")
    result, _ = run(shell, "%%blocking_launch\nimport torch.nn.functional as F\n"
                           "F.embedding(torch.tensor([1, 7]), torch.randn(5, 3))")
    exc = result.error_in_exec
    assert type(exc).__name__ == "IsolatedRunFailed"
    (isolated,) = incidents()  # the isolated incident only: the kernel did not file it again
    assert isolated.run.mode == "isolated" and exc.incident_id == isolated.id
    assert str(exc).startswith("index_out_of_bounds — ")
    assert "aten::embedding: indices 7 at position 1 outside [0, 5)" in str(exc)
    assert f"%cudadiag show {isolated.id}" in str(exc)
    # shown as one line, not as a traceback into cudadiag
    assert exc._render_traceback_() == [f"IsolatedRunFailed: {exc}"]
    assert "magics.py" not in capsys.readouterr().out
    assert capture_current(shell) is None


def capture_current(shell):
    from cudadiag.capture.shell_state import capture_for

    return capture_for(shell).current


def test_a_blocking_launch_body_with_an_ordinary_error_fails_with_that_error(shell):
    result, _ = run(shell, "%%blocking_launch\nraise ValueError('no such column: label')")
    assert str(result.error_in_exec).startswith("ValueError: no such column: label (details: ")


def test_a_blocking_launch_that_times_out_fails_the_cell(shell):
    result, _ = run(shell, "%%blocking_launch --timeout 3\nwhile True:\n    pass")
    assert type(result.error_in_exec).__name__ == "IsolatedRunFailed"
    assert "exceeded the timeout of 3 s" in str(result.error_in_exec)


def test_a_blocking_launch_that_succeeds_lets_run_all_go_on(shell, capsys):
    result, _ = run(shell, "%%blocking_launch\nprint('fine', 1 + 1)")
    assert result.success and "fine 2" in capsys.readouterr().out


def test_cuda_isolate_of_a_failing_cell_is_a_diagnosis_that_succeeds(shell, capsys):
    run(shell, SETUP)
    run(shell, MODEL)
    result, _ = run(shell, "print('loss', loss.item())")
    assert not result.success
    capsys.readouterr()
    result, _ = run(shell, "%cuda_isolate")
    assert result.success  # the failure was reproduced and stored: "Run All" goes on
    kinds = sorted(i.run.mode for i in incidents())
    assert kinds == ["isolated", "kernel"]


def test_the_cell_returns_when_the_child_exits_and_left_overs_are_killed_and_named(shell,
                                                                                    capsys):
    started = time.monotonic()
    result, _ = run(shell, "%%blocking_launch\n" + GRANDCHILD)
    wall = time.monotonic() - started
    assert result.success
    captured = capsys.readouterr()
    (grandchild,) = _pids(captured.out, "grandchild")
    assert (f"cudadiag: killed 1 left-over process of the isolated run: pid {grandchild} "
            "(sleep)") in captured.err
    assert not _alive(grandchild)
    assert wall < 25, wall  # the grandchild sleeps 30 s; the child needs seconds


def test_os_exit_and_signals_say_how_the_child_ended(shell, capsys):
    result, _ = run(shell, "%%blocking_launch\nimport os\nos._exit(3)")
    assert "exited with status 3" in capsys.readouterr().out
    assert "exited with status 3" in str(result.error_in_exec)
    run(shell, "%%blocking_launch\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert "the process was killed by SIGSEGV (Segmentation fault)" in capsys.readouterr().out


def test_the_listing_names_the_cell_that_raised_not_the_first_replayed_one(shell, capsys):
    _, imports = run(shell, "import torch")
    run(shell, "unused = 1")
    _, failing = run(shell, "torch.ones(2)[torch.tensor([3])]")
    run(shell, f"%cuda_isolate {failing}")
    capsys.readouterr()
    run(shell, "%cudadiag incidents")
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[3] for row in rows] == [f"In[{failing}]", f"In[{failing}]"]
    assert f"In[{imports}]" not in "\n".join(rows)


def test_an_isolated_incident_names_the_cell_that_ran_and_a_precheck_kept_the_context(
        shell, capsys):
    from cudadiag.panel.widget import Panel

    _, setup = run(shell, SETUP)
    _, defining = run(shell, "class Picker:\n    def __call__(self, t, i):\n"
                             "        return t[i]\npick = Picker()")
    _, calling = run(shell, "x = torch.ones(3)\ny = pick(x, torch.tensor([5]))\n"
                            "print(y.sum().item())")
    run(shell, "%cuda_isolate")
    stopped = incidents()[-1]
    assert stopped.error.reported_at.cell == defining and stopped.op.precheck
    run(shell, "%cuda_isolate --no-precheck")
    poisoned = incidents()[-1]
    assert poisoned.run.cells[0] == setup and not poisoned.op.precheck
    capsys.readouterr()
    run(shell, f"%cudadiag show {stopped.id}")
    shown = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert (f"The precheck stopped aten::index.Tensor in In[{calling}] before it ran: the CUDA "
            "context (simulated) of that run stayed usable") in shown
    assert "RESTART REQUIRED" not in shown and "unusable from" not in shown
    run(shell, f"%cudadiag show {poisoned.id}")
    shown = " ".join(capsys.readouterr().out.split())
    assert "RESTART REQUIRED" in shown
    assert f"was unusable from In[{calling}] on" in shown and f"In[{setup}] on" not in shown
    panel = Panel(poisoned, shell=shell)
    assert panel.rerun.tooltip == f"%cuda_isolate {calling}"
    label, shown_id = panel.selector.options[0]
    assert shown_id == poisoned.id
    assert f"  In[{calling}]  device_assert: " in label and label.endswith("(isolated)")


def test_same_failure_says_reproduced_first(shell, capsys):
    run(shell, SETUP)
    run(shell, MODEL)
    _, item_cell = run(shell, "print('loss', loss.item())")
    capsys.readouterr()
    run(shell, "%cuda_isolate")
    first = _after_plan(capsys.readouterr().out)[0]
    assert first == f"cudadiag: reproduced: same failure (device_assert) as In[{item_cell}]"


BLOCKING_DEPENDENT = (
    "import os, torch\n"
    "if os.environ.get('CUDA_LAUNCH_BLOCKING'):\n"
    "    {blocking}\n"
    "else:\n"
    "    torch.ones(2)[torch.tensor([3])]"
)


def _after_plan(out: str) -> list[str]:
    lines = out.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("plan: ")) + 1:]


def test_a_different_failure_is_said_first_with_what_to_try(shell, capsys):
    cell_source = BLOCKING_DEPENDENT.format(blocking="torch.ones(2, 3) @ torch.ones(2, 3)")
    _, cell = run(shell, cell_source)
    capsys.readouterr()
    run(shell, f"%cuda_isolate {cell}")
    first = _after_plan(capsys.readouterr().out)[0]
    assert first.startswith("cudadiag: the isolated run failed differently: shape_mismatch "
                            f"RuntimeError in aten::mm at In[{cell}]: torch.ones(2, 3) @ ")
    assert (f"original: index_out_of_bounds IndexError at In[{cell}]: "
            "torch.ones(2)[torch.tensor([3])]") in first
    assert "--dry-run" in first and "--cells" in first


def test_an_error_that_does_not_reproduce_is_said_first(shell, capsys):
    _, cell = run(shell, BLOCKING_DEPENDENT.format(blocking="print('no error here')"))
    capsys.readouterr()
    run(shell, f"%cuda_isolate {cell}")
    streamed, first = _after_plan(capsys.readouterr().out)[:2]
    assert streamed == "no error here"
    assert first.startswith("cudadiag: the error did not reproduce: the isolated run finished "
                            "without error (original: index_out_of_bounds IndexError at "
                            f"In[{cell}]")
    assert "--dry-run" in first


CHATTY = "for i in range(1204):\n    print('setup', i)\nn = 3"


def test_replayed_cells_output_is_folded_and_the_suspect_cell_streams(shell, capsys):
    _, chatty = run(shell, CHATTY)
    _, target = run(shell, "for i in range(n):\n    print('suspect', i)\nraise ValueError(n)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {target} --ship none")  # replay the chatty cell, not ship n
    out = capsys.readouterr().out
    assert f"In[{chatty}]: 1,204 lines hidden; --show-replay to see them" in out
    assert "setup 0" not in out
    assert "suspect 0\nsuspect 1\nsuspect 2\n" in out
    run(shell, f"%cuda_isolate {target} --ship none --show-replay")
    out = capsys.readouterr().out
    assert "setup 1203" in out and "lines hidden" not in out


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
@pytest.mark.parametrize("line", ["%cuda_isolate 1 --dry-run --timeout {}",
                                  "%%blocking_launch --timeout {}\nprint(1)",
                                  "%cudadiag export --timeout {}"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(shell, capsys, line, value):
    run(shell, "x = 1")
    result, _ = run(shell, line.format(value))
    assert isinstance(result.error_in_exec, UsageError)
    assert "number of seconds greater than 0" in str(result.error_in_exec)
    assert "plan:" not in capsys.readouterr().out


@pytest.mark.parametrize("line", ['%cudadiag show "x', "%cudadiag incidents --family 'oom",
                                  '%cudadiag report "x', '%cudadiag panel "x',
                                  '%cudadiag export "x', '%cuda_isolate 1 --env "A=b',
                                  "%%blocking_launch --env 'A=b\nprint(1)"])
def test_unbalanced_quotes_are_a_usage_error(shell, line):
    run(shell, "x = 1")
    result, _ = run(shell, line)
    assert isinstance(result.error_in_exec, UsageError)
    assert "No closing quotation" in str(result.error_in_exec)


def test_a_real_kernel_interrupt_ends_the_cell_with_keyboard_interrupt(tmp_path):
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path),
                                       env={**os.environ})
    try:
        client.execute_interactive("%load_ext cudadiag", timeout=120)
        ready = client.execute_interactive(  # the run below forks from the warm interpreter
            "from cudadiag.isolate import warm\nassert warm.wait_ready(180)", timeout=200)
        assert ready["content"]["status"] == "ok"
        seen: list[str] = []

        def watch(message):
            if message["msg_type"] == "stream":
                seen.append(message["content"]["text"])
                if "started" in "".join(seen) and not interrupted:
                    interrupted.append(time.monotonic())
                    manager.interrupt_kernel()

        interrupted: list[float] = []
        reply = client.execute_interactive(
            "%%blocking_launch\n" + GRANDCHILD + "\nprint('started', flush=True)\n"
            "import time\ntime.sleep(60)", output_hook=watch, timeout=120)
        ended = time.monotonic()
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert ended - interrupted[0] < 10
        pids = _pids("".join(seen), "grandchild")
        assert len(pids) == 1, seen
        (grandchild,) = pids
        assert not _alive(grandchild)
        after = client.execute_interactive("print('kernel alive')", timeout=60)
        assert after["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
