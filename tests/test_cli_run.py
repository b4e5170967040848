"""`cudadiag run` and `cudadiag demo` as a user types them: the script's own traceback, its
exit status, left-over processes, bad timeouts, no temporary leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cudadiag import incidents
from test_cli import TRAIN, cudadiag
from test_isolate_magics import _alive

pytestmark = pytest.mark.slow

BOOM = """\
import torch


def parse(values):
    return torch.tensor(values).view(3, 3)


print("about to fail")
parse([1, 2])
"""


def test_run_prints_the_scripts_traceback_as_python_does_then_the_diagnosis(tmp_path):
    (tmp_path / "boom.py").write_text(BOOM)
    plain = subprocess.run([sys.executable, "boom.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert plain.stderr.startswith("Traceback (most recent call last):")
    result = cudadiag("run", "--", sys.executable, "boom.py", cwd=tmp_path)
    assert result.returncode == plain.returncode == 1
    assert result.stdout == plain.stdout == "about to fail\n"
    traceback, _, diagnosis = result.stderr.partition("cudadiag [")
    assert traceback == plain.stderr
    assert "boom.py:5 in parse: return torch.tensor(values).view(3, 3)" in diagnosis


def test_a_script_shows_all_of_its_output_and_its_traceback_however_much_it_prints(tmp_path):
    (tmp_path / "loud.py").write_text(
        "import sys\n"
        "for i in range(30000):\n"
        "    print(f'step {i:06d} ' + 'x' * 88)\n"  # 3 MB on stdout
        "for i in range(15000):\n"
        "    print(f'warn {i:06d} ' + 'y' * 88, file=sys.stderr)\n"  # 1.5 MB on stderr
        + BOOM)
    plain = subprocess.run([sys.executable, "loud.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    result = cudadiag("run", "loud.py", cwd=tmp_path)
    assert result.returncode == plain.returncode == 1
    assert len(result.stdout) > 3 * 2**20 // 2 and result.stdout == plain.stdout
    shown, _, diagnosis = result.stderr.partition("cudadiag [")
    assert shown == plain.stderr and shown.splitlines()[-1].startswith("RuntimeError: shape")
    assert "not shown" not in result.stderr and "isolated run" not in result.stderr
    assert "loud.py:" in diagnosis


def test_the_traceback_of_a_failing_operator_ends_at_the_call_in_pytorch(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    result = cudadiag("run", "train.py", "--bad", cwd=tmp_path)
    assert result.returncode == 1
    traceback, _, diagnosis = result.stderr.partition("cudadiag [")
    lines = traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == f'  File "{tmp_path / "train.py"}", line 18, in <module>'
    assert lines[2] == "    loss = F.cross_entropy(model(x), y)"
    assert "torch/nn/functional.py" in traceback
    for internal in ("runpy", "isolate/worker.py", "cudadiag/trace.py", "_dynamo"):
        assert internal not in traceback
    assert "target 4 at position 3 outside [0, 4)" in lines[-2]
    assert "aten::nll_loss_forward" in diagnosis


UNRELATED = {
    "KeyError: 'lr'": "config = {'epochs': 1}\nprint('lr', config['lr'])\n",
    "NameError: name 'n_embd' is not defined": "import torch\nx = torch.zeros(n_embd)\n",
    "DataError: no rows in train.csv": "class DataError(Exception):\n    pass\n\n"
                                       "raise DataError('no rows in train.csv')\n",
}


@pytest.mark.parametrize("error", UNRELATED)
def test_an_error_unrelated_to_pytorch_is_no_incident_as_in_the_kernel(tmp_path, shell,
                                                                      capsys, error):
    (tmp_path / "script.py").write_text(UNRELATED[error])
    plain = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    ran = cudadiag("run", "script.py", cwd=tmp_path)
    assert ran.returncode == plain.returncode == 1
    traceback, _, said = ran.stderr.partition("cudadiag: ")
    assert traceback == plain.stderr and traceback.splitlines()[-1] == error
    assert said == (f"the script failed with {error}, an error unrelated to PyTorch: no "
                    "incident recorded\n")
    assert cudadiag("incidents", cwd=tmp_path).stdout == "no incidents recorded\n"
    result = shell.run_cell(UNRELATED[error], store_history=True)  # the kernel's rule
    assert str(result.error_in_exec) in error and incidents() == []


def test_a_folder_given_as_the_script_is_a_usage_error(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "train.py").write_text(TRAIN)
    ran = cudadiag("run", "--", "python", "project", cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr == (
        "cudadiag run: project is a folder, not a script: name the script in it (cudadiag run "
        "-- python project/train.py) or run a package with -m (cudadiag run -- python -m "
        "PACKAGE)\n")
    assert incidents() == []
    (tmp_path / "project" / "__main__.py").write_text("print('the folder ran')\n")
    runs = cudadiag("run", "project", cwd=tmp_path)  # as `python project` runs it
    assert runs.returncode == 0 and runs.stdout == "the folder ran\n", runs.stderr


def test_sys_exit_with_a_message_prints_it_and_exits_1(tmp_path):
    (tmp_path / "quit.py").write_text("import sys\nsys.exit('no data found')\n")
    result = cudadiag("run", "quit.py", cwd=tmp_path)
    assert result.returncode == 1 and "no data found" in result.stderr


def test_a_script_that_exits_non_zero_without_an_exception_is_not_said_to_have_succeeded(
        tmp_path):
    (tmp_path / "exit3.py").write_text("import sys\nprint('stopping')\nsys.exit(3)\n")
    result = cudadiag("run", "exit3.py", cwd=tmp_path)
    assert result.returncode == 3
    assert "the script exited with status 3, with no exception to diagnose" in result.stderr
    assert "finished without error" not in result.stderr


@pytest.mark.parametrize(("where", "message"), [
    ("missing/x.json", "the directory missing does not exist"),
    (".", "is a directory"),
])
def test_a_json_path_that_cannot_be_written_is_refused_before_the_script_runs(
        tmp_path, where, message):
    (tmp_path / "ran.py").write_text("print('the script ran')\n")
    result = cudadiag("run", "--json", where, "ran.py", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert "the script ran" not in result.stdout and "Traceback" not in result.stderr


SECRET_ARGS = """import argparse
import torch.nn.functional as F
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--api-key")
args = parser.parse_args()
key = args.api_key
F.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))
"""
API_KEY = "s3cr3tAPIkeyValue987654321xyz"


def test_a_secret_given_on_the_command_line_is_masked_in_every_output_but_the_log(tmp_path):
    (tmp_path / "secret_args.py").write_text(SECRET_ARGS)
    ran = cudadiag("run", "--json", "incident.json", "secret_args.py", "--api-key", API_KEY,
                   cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr
    outputs = {"run": ran.stderr, "run --json": (tmp_path / "incident.json").read_text()}
    for command in (["show"], ["show", "--json"], ["report"]):
        outputs[" ".join(command)] = cudadiag(*command, cwd=tmp_path).stdout
    incident_id = json.loads(outputs["run --json"])["id"]
    exported = cudadiag("export", "--no-verify", incident_id, "repro.py", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    outputs["export"] = (tmp_path / "repro.py").read_text()
    assert {name: API_KEY in text for name, text in outputs.items()} == dict.fromkeys(
        outputs, False)
    assert "'--api-key', '[REDACTED]'" in outputs["export"]
    assert json.loads(outputs["show --json"])["run"]["command"][-1] == "[REDACTED]"


def test_a_script_reads_what_is_piped_to_cudadiag_run(tmp_path):
    (tmp_path / "reads.py").write_text("import sys\nprint('read', repr(sys.stdin.read()))\n")
    result = subprocess.run([sys.executable, "-m", "cudadiag.cli", "run", "reads.py"],
                            cwd=tmp_path, input="hello\nworld\n", capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "read 'hello\\nworld\\n'" in result.stdout


SWALLOWS = """\
import torch
import torch.nn.functional as F

skipped = []
for i in range(5):
    target = torch.tensor([0, 1, 3 if i == 2 else 2])
    try:
        F.cross_entropy(torch.zeros(3, 3), target)
    except RuntimeError as error:  # what a device-side assert raises
        skipped.append(i)
print("skipped", skipped)
"""


def test_an_error_the_script_catches_and_goes_on_from_is_still_the_first_error(tmp_path):
    (tmp_path / "swallows.py").write_text(SWALLOWS)
    result = cudadiag("run", "swallows.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # the script's own status
    assert "skipped [2]" in result.stdout  # its handler ran, as it would on the GPU
    assert ("the program caught PrecheckError (aten::nll_loss_forward: target 3 at position "
            "2 outside [0, 3)") in result.stderr
    assert "loop: i=2 (swallows.py)" in result.stderr  # where it was raised, not i=4
    (incident,) = incidents()
    assert incident.diagnosis.details["value"] == 3 and incident.op.name == (
        "aten::nll_loss_forward")


WRAPS = """\
import torch
import torch.nn.functional as F


def step(logits, target):
    return F.cross_entropy(logits, target)


for i in range(5):
    try:
        step(torch.zeros(3, 3), torch.tensor([0, 1, 3 if i == 2 else 2]))
    except RuntimeError as error:
        raise ValueError(f"step {i} failed") from error
"""


def test_an_error_the_script_raises_from_the_failure_keeps_the_failures_place_and_values(
        tmp_path):
    (tmp_path / "wraps.py").write_text(WRAPS)
    result = cudadiag("run", "wraps.py", cwd=tmp_path)
    assert result.returncode == 1
    traceback, _, diagnosis = result.stderr.partition("cudadiag [")
    assert traceback.splitlines()[-1] == "ValueError: step 2 failed"  # the script's own
    assert "raised at" in diagnosis and "wraps.py:6 in step: return F.cross_entropy(" in diagnosis
    assert "target 3 at position 2 outside [0, 3)" in diagnosis
    assert "loop: i=2 (wraps.py)" in diagnosis
    (incident,) = incidents()
    assert incident.error.type == "cudadiag.trace.PrecheckError"
    assert incident.diagnosis.details["value"] == 3


def test_a_script_that_dies_by_os_exit_says_its_status(tmp_path):
    (tmp_path / "dies.py").write_text("import os\nprint('bye', flush=True)\nos._exit(3)\n")
    result = cudadiag("run", "dies.py", cwd=tmp_path)
    assert result.returncode == 3
    assert "the process exited with status 3 without a Python exception" in result.stderr


def test_run_returns_when_the_script_exits_and_kills_what_it_left(tmp_path):
    (tmp_path / "spawns.py").write_text(
        "import subprocess\np = subprocess.Popen(['sleep', '30'])\nprint('grandchild', p.pid)\n")
    started = time.monotonic()
    result = cudadiag("run", "spawns.py", cwd=tmp_path)
    assert time.monotonic() - started < 25  # the grandchild sleeps 30 s and holds stdout
    pid = int(result.stdout.split()[-1])
    assert (f"cudadiag: killed 1 left-over process of the script: pid {pid} (sleep)"
            in result.stderr)
    assert not _alive(pid)  # named once it is gone
    assert result.returncode == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
@pytest.mark.parametrize("command", [["run", "--timeout", "{}", "train.py"],
                                     ["export", "--timeout", "{}", "abc", "x.ipynb"]])
def test_a_timeout_that_is_not_a_positive_number_exits_2(tmp_path, command, value):
    (tmp_path / "train.py").write_text(TRAIN)
    result = cudadiag(*[word.format(value) for word in command], cwd=tmp_path)
    assert result.returncode == 2
    assert "--timeout: expected a number of seconds greater than 0" in result.stderr


def run_a_loop_with_a_grandchild(tmp_path, popen_options, env=None):
    """`cudadiag run loop.py` of a loop that starts a grandchild (`sleep 60`): the process
    and its first three lines (the grandchild's pid, epochs 0 and 1), read."""
    (tmp_path / "loop.py").write_text(
        "import subprocess, time\np = subprocess.Popen(['sleep', '60'])\n"
        "print('grandchild', p.pid, flush=True)\nfor epoch in range(600):\n"
        "    print('epoch', epoch, flush=True)\n    time.sleep(0.2)\n")
    process = subprocess.Popen([sys.executable, "-m", "cudadiag.cli", "run", "loop.py"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, **popen_options)
    return process, [process.stdout.readline() for _ in range(3)]


def test_ctrl_c_kills_the_scripts_group_and_exits_130(tmp_path, ctrl_c_as_in_a_terminal):
    process, seen = run_a_loop_with_a_grandchild(tmp_path, ctrl_c_as_in_a_terminal)
    process.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "cudadiag: interrupted; the script's process group was killed" in err
    assert not _alive(int(seen[0].split()[1]))


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.25, 0.5, 0.8, 1.2, 1.8])
def test_ctrl_c_at_any_moment_of_a_run_says_interrupted_in_one_line_and_exits_130(
        tmp_path, delay, ctrl_c_as_in_a_terminal):
    (tmp_path / "slow.py").write_text("import os, time\nprint('pid', os.getpid(), flush=True)"
                                      "\ntime.sleep(60)\n")
    process = subprocess.Popen(  # 'ready' once inside main() (Ctrl-C before it is Python's)
        [sys.executable, "-c", "import sys\nfrom cudadiag import cli\nparser = cli._parser\n"
         "def ready():\n    print('ready', flush=True)\n    return parser()\n"
         "cli._parser = ready\nsys.exit(cli.main(['run', 'slow.py']))"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        **ctrl_c_as_in_a_terminal)
    assert process.stdout.readline() == "ready\n"
    time.sleep(delay)  # from starting the run (importing torch) to streaming the script
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("cudadiag: interrupted")
    if out:
        assert not _alive(int(out.split()[1]))


def test_a_ctrl_c_that_an_import_swallowed_still_stops_the_run_before_the_script_starts(
        tmp_path, ctrl_c_as_in_a_terminal):
    # Importing torch can take a Ctrl-C for a missing optional module and go on (torch 2.13,
    # SIGINT 0.7 s into `import torch`); here an import that does so stands in for it
    (tmp_path / "quick.py").write_text("print('the script started', flush=True)\n")
    swallowing_import = (
        "import signal, sys\nfrom cudadiag import cli\nparser = cli._parser\n"
        "def swallowing():\n    try:\n        signal.raise_signal(signal.SIGINT)\n"
        "    except KeyboardInterrupt:\n        pass\n    return parser()\n"
        "cli._parser = swallowing\nsys.exit(cli.main(['run', 'quick.py']))")
    done = subprocess.run([sys.executable, "-c", swallowing_import], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          **ctrl_c_as_in_a_terminal)
    assert "the script started" not in done.stdout
    assert done.returncode == 130, done.stderr
    assert done.stderr == "cudadiag: interrupted\n"


def _demo(tmp_path, *args):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run([sys.executable, "-m", "cudadiag.cli", "demo", *args],
                            env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True,
                            text=True, timeout=300)
    # torchinductor_USER is PyTorch's own per-user cache (any dispatch mode creates it)
    left = [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")]
    return result, left


def test_the_demo_says_its_log_was_temporary_and_leaves_nothing_behind(tmp_path,
                                                                      cudadiag_home):
    result, left = _demo(tmp_path)
    assert result.returncode == 0 and "Device-side assertion" in result.stdout + result.stderr
    assert left == []
    assert "the demo's incident went to a temporary log, now removed" in result.stdout
    assert "cudadiag demo --keep" in result.stdout
    assert not cudadiag_home.exists()


def test_the_demo_with_keep_records_an_incident_that_show_finds_afterwards(tmp_path):
    result, left = _demo(tmp_path, "--keep")
    assert result.returncode == 0 and left == []
    listing = cudadiag("incidents", "--family", "device_assert").stdout.splitlines()
    incident_id = listing[1].split()[0]
    shown = cudadiag("show", incident_id, "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["run"]["simulated"] is True


def test_run_imports_torch_only_in_the_script_s_process_and_still_diagnoses_it(tmp_path):
    # torch's import takes seconds, paid by the script's own process: `cudadiag run`'s
    # process needs no torch to start it, read its result and print the diagnosis
    (tmp_path / "train.py").write_text(TRAIN)
    code = ("import sys\n"
            "from cudadiag.cli import main\n"
            "sys.argv = ['cudadiag', 'run', '--', sys.executable, 'train.py', '--bad']\n"
            "code = main()\n"
            "print('torch imported by cudadiag run:', 'torch' in sys.modules, file=sys.stderr)\n"
            "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert "aten::nll_loss_forward: target 4 at position 3 outside [0, 4)" in done.stderr
    assert done.stderr.rstrip().endswith("torch imported by cudadiag run: False"), done.stderr
