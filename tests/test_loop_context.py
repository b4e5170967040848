"""The iteration without watch(): the loops around the failing line of each user frame, their
variables and the frames' scalars, in the incident and the lines under the cell."""

from __future__ import annotations

import pytest

from cudadiag import incidents
from cudadiag.incident import Incident
from cudadiag.loopvars import loop_context
from cudadiag.repro.report import render_report
from cudadiag.ui.render import SHOW_IN_IPYTHON, render_short, render_text
from scenarios import SETUP, run, unwrapped

DATA = (
    "C = 10\n"
    "X = torch.randn(1000, 8)\n"
    "Y = torch.randint(0, C, (1000,))\n"
    "Y[777] = C  # one bad label\n"
    "model = torch.nn.Linear(8, C)"
)
# unseeded random minibatches: the failing iteration differs from run to run
RANDOM_MINIBATCHES = (
    "lr = 0.1\n"
    "for i in range(1000):\n"
    "    ix = torch.randint(0, X.shape[0], (256,))\n"
    "    loss = F.cross_entropy(model(X[ix]), Y[ix])\n"
    "    loss.item()"
)
TRAIN_FUNCTION = (
    "def train(epochs, steps_per_epoch, bs=32):\n"
    "    running = 0.0\n"
    "    for epoch in range(epochs):\n"
    "        for batch_idx in range(steps_per_epoch):\n"
    "            ix = torch.arange(batch_idx * bs, (batch_idx + 1) * bs) % X.shape[0]\n"
    "            if epoch == 1 and batch_idx == 23:\n"
    "                ix[0] = 777\n"
    "            loss = F.cross_entropy(model(X[ix]), Y[ix].clamp(max=C - 1) if ix[0] != 777"
    " else Y[ix])\n"
    "            running += loss.item()\n"
    "    return running"
)


def _only_incident() -> Incident:
    (incident,) = incidents()
    return incident


def test_a_cells_top_level_loop_gives_the_iteration_of_random_minibatches(shell, capsys):
    run(shell, SETUP)
    run(shell, DATA)
    _, cell = run(shell, RANDOM_MINIBATCHES)
    failing_i = shell.user_ns["i"]
    incident = _only_incident()
    (frame,) = incident.loop.frames
    assert frame.cell == cell and frame.function == "<module>"
    assert [(loop.kind, loop.line, loop.header) for loop in frame.loops] == [
        ("for", 2, "for i in range(1000):")]
    assert frame.loops[0].values == {"i": str(failing_i)}
    assert frame.statement == "    loss.item()" and frame.line == 5
    assert frame.scalars == {"lr": "0.1"}  # tensors and the notebook's other names are not
    err = unwrapped(capsys.readouterr().err)
    assert f"loop when the error was noticed: i={failing_i} (In[{cell}])" in err
    assert f"locals of In[{cell}]: lr=0.1" in err


def test_nested_loops_in_a_function_from_an_earlier_cell(shell, capsys):
    run(shell, SETUP)
    run(shell, DATA)
    _, defining = run(shell, TRAIN_FUNCTION)
    _, calling = run(shell, "history = []\nfor run_id in range(3):\n    "
                            "history.append(train(2, 30))")
    incident = _only_incident()
    outer, inner = incident.loop.frames
    assert (outer.cell, outer.function, outer.loops[0].values) == (
        calling, "<module>", {"run_id": "0"})
    assert (inner.cell, inner.function) == (defining, "train")
    assert [loop.values for loop in inner.loops] == [{"epoch": "1"}, {"batch_idx": "23"}]
    assert inner.scalars == {"epochs": "2", "steps_per_epoch": "30", "bs": "32",
                             "running": inner.scalars["running"]}
    assert "ix" not in inner.scalars and "loss" not in inner.scalars
    err = unwrapped(capsys.readouterr().err)
    assert (f"run_id=0 (In[{calling}]) › epoch=1, batch_idx=23 (In[{defining}] in train)"
            in err)


def test_a_while_loop_gives_its_counter(shell, capsys):
    run(shell, SETUP)
    run(shell, DATA)
    _, cell = run(shell, "step = 0\nmax_steps = 100\nwhile step < max_steps:\n"
                         "    ix = torch.tensor([step * 9 % 1000, 777 if step == 42 else 0])\n"
                         "    F.cross_entropy(model(X[ix]), Y[ix]).item()\n"
                         "    step += 1")
    (frame,) = _only_incident().loop.frames
    assert frame.loops[0].kind == "while"
    assert frame.loops[0].values == {"step": "42"}
    assert frame.scalars == {"max_steps": "100"}
    assert f"step=42 (In[{cell}])" in capsys.readouterr().err


def test_enumerate_and_zip_targets_are_unpacked_and_tensors_are_described(shell):
    run(shell, SETUP)
    run(shell, DATA)
    run(shell, "batches = [(X[k:k + 4], Y[k:k + 4]) for k in range(0, 1000, 4)]\n"
               "names = ['b%d' % k for k in range(0, 1000, 4)]\n"
               "for batch_idx, ((x, y), name) in enumerate(zip(batches, names)):\n"
               "    F.cross_entropy(model(x), y).item()")
    (frame,) = _only_incident().loop.frames
    assert frame.loops[0].values == {"batch_idx": "194", "x": "<tensor float32[4, 8]>",
                                     "y": "<tensor int64[4]>", "name": "'b776'"}


def test_a_synchronous_error_says_loop_without_the_asynchronous_caveat(shell, capsys):
    run(shell, "import torch, torch.nn.functional as F")
    _, cell = run(shell, "emb = torch.nn.Embedding(5, 3)\n"
                         "for k in range(10):\n"
                         "    emb(torch.tensor([k]))")
    incident = _only_incident()
    assert incident.diagnosis.family == "index_out_of_bounds"
    assert incident.loop.frames[-1].loops[0].values == {"k": "5"}
    err = unwrapped(capsys.readouterr().err)
    assert f"  loop: k=5 (In[{cell}])" in err
    assert "when the error was noticed" not in err


def test_values_are_read_without_running_user_code(shell):
    run(shell, "import torch\n"
               "calls = []\n"
               "class Trainer:\n"
               "    def __init__(self):\n"
               "        self.epoch = 3\n"
               "    @property\n"
               "    def step(self):\n"
               "        calls.append('step')\n"
               "        return 7\n"
               "    def __repr__(self):\n"
               "        calls.append('repr')\n"
               "        return 'Trainer()'\n"
               "trainer = Trainer()")
    run(shell, "for t in [trainer]:\n"
               "    while trainer.step < 10 and trainer.epoch < 5:\n"
               "        trainer.epoch += 1\n"
               "        torch.zeros(2)[torch.tensor([trainer.epoch])]")
    (frame,) = _only_incident().loop.frames
    assert frame.loops[0].values == {"t": "<Trainer>"}
    assert frame.loops[1].values == {"trainer.epoch": "4"}  # the property is not evaluated
    assert shell.user_ns["calls"] == ["step"]  # by the loop's own condition, once


def test_scalars_keep_short_values_and_mask_secrets(shell):
    run(shell, "import torch")
    run(shell, "hf_token = 'hf_abcdefghijklmnopqrstuvwxyz'\n"
               "password = 'hunter2'\n"
               "n_tokens = 512\n"
               "debug = True\n"
               "long_text = 'x' * 500\n"
               "for k in range(3):\n"
               "    torch.zeros(2)[torch.tensor([k])]")
    incident = _only_incident()
    (frame,) = incident.loop.frames
    assert frame.scalars == {"hf_token": "'***'", "password": "'***'", "n_tokens": "512",
                             "debug": "True"}
    report = render_report(incident)
    assert "hunter2" not in report and "hf_abc" not in report
    assert "for k in range(3):  # k=2" in report


ENV_SECRETS = {"HF_TOKEN": "hf_EnvEnvEnvEnvEnvEnvEnvEnvEnvEnv1234",
               "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
LITERAL_SECRETS = ("hf_AbCdEfGhIjKlMnOpQrStUv", "UrlPw123", "AKIAIOSFODNN7EXAMPLE")


def test_secret_values_are_masked_under_the_cell_and_in_show_whatever_their_names(
        shell, capsys, monkeypatch):
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    run(shell, "import os, torch\nkeys = ['AKIAIOSFODNN7EXAMPLE']")
    _, cell = run(shell, "hub = os.environ['HF_TOKEN']\n"
                         "creds = os.environ['AWS_SECRET_ACCESS_KEY']\n"
                         "msg = 'hf_AbCdEfGhIjKlMnOpQrStUv'\n"
                         "url = 'https://user:UrlPw123@github.com/x'\n"
                         "n = 3\n"
                         "for k in keys:\n"
                         "    torch.zeros(2)[torch.tensor([n])]")
    under_cell = unwrapped(capsys.readouterr().err)
    incident = _only_incident()
    run(shell, f"%cudadiag show {incident.id}")
    shown = capsys.readouterr().out
    for text in (under_cell, shown, render_text(incident)):
        for secret in (*ENV_SECRETS.values(), *LITERAL_SECRETS):
            assert secret not in text
    assert (f"locals of In[{cell}]: hub='[REDACTED:HF_TOKEN]', "
            "creds='[REDACTED:AWS_SECRET_ACCESS_KEY]', msg='[REDACTED]'") in under_cell
    assert "n=3" in under_cell and "k='[REDACTED]'" in under_cell
    assert "for k in keys:  # k='[REDACTED]'" in shown
    assert "url='https://user:[REDACTED]@github.com/x'" in shown


def test_the_report_and_show_include_the_failing_statement_and_its_loops(shell):
    run(shell, SETUP)
    run(shell, DATA)
    _, defining = run(shell, TRAIN_FUNCTION)
    _, calling = run(shell, "total = train(2, 30)")  # no loop here: only train's frame
    incident = _only_incident()
    report = render_report(incident)
    assert "**Failing statement and its loops:**" in report
    assert (f"# In[{defining}], line 9 in train\n"
            "for epoch in range(epochs):  # epoch=1\n"
            "    for batch_idx in range(steps_per_epoch):  # batch_idx=23\n"
            "        ...\n"
            "        running += loss.item()  # <- the error was noticed here\n") in report
    block = report.split("**Failing statement and its loops:**")[1].split("**Environment")[0]
    assert f"# In[{calling}]" not in block
    shown = render_text(incident)
    assert "Where in the loop" in shown and "    for batch_idx in range(steps_per_epoch)" \
        in shown


def test_with_watch_the_line_under_the_cell_has_step_flags_and_indices(shell, capsys):
    run(shell, "import torch, torch.nn.functional as F, cudadiag\n"
               "from torch.utils.data import DataLoader, TensorDataset\n"
               "labels = torch.tensor([i % 4 for i in range(100)])\n"
               "labels[97] = 4\n"
               "loader = DataLoader(TensorDataset(torch.randn(100, 8), labels), batch_size=12)\n"
               "model = torch.nn.Linear(8, 4)")
    _, cell = run(shell, "for epoch in range(2):\n"
                         "    for x, y in cudadiag.watch(loader, name='train'):\n"
                         "        F.cross_entropy(model(x), y)")
    err = unwrapped(capsys.readouterr().err)
    assert (f"loop: epoch=0, x=<tensor float32[4, 8]>, y=<tensor int64[4]> (In[{cell}])"
            in err)
    assert ("watch(train): step 8, last completed 7; last incomplete batch; the loader's last "
            "step; dataset indices [96, 97, 98, 99]") in err


def test_the_record_survives_the_json_round_trip(shell):
    run(shell, "import torch")
    run(shell, "for k in range(3):\n    torch.zeros(2)[torch.tensor([k])]")
    incident = _only_incident()
    again = Incident.from_dict(incident.to_dict())
    assert again.loop == incident.loop and again.loop.frames[0].loops[0].values == {"k": "2"}


def _raise_in_header() -> None:
    def batches():
        yield 1
        raise RuntimeError("loader broke")

    for _item in batches():
        pass


def _raise_in_nested_function() -> None:
    for outer in range(2):
        def inner(n):
            values = []
            for j in range(n):
                values.append(1 / (j - 1))
            return values
        inner(outer + 3)


def test_an_error_in_a_loop_header_names_the_header_only():
    with pytest.raises(RuntimeError) as info:
        _raise_in_header()
    frame = next(f for f in loop_context(info.value).frames if f.function == (
        "_raise_in_header"))
    assert frame.statement == "    for _item in batches():"
    assert frame.loops[0].values == {"_item": "1"}


def test_a_nested_functions_frame_has_only_its_own_loops():
    with pytest.raises(ZeroDivisionError) as info:
        _raise_in_nested_function()
    context = loop_context(info.value)
    outer, inner = context.frames[-2:]
    assert [loop.values for loop in outer.loops] == [{"outer": "0"}]
    assert [loop.values for loop in inner.loops] == [{"j": "1"}]
    assert inner.statement.strip() == "values.append(1 / (j - 1))"
    assert inner.scalars == {"n": "3"}


def test_a_frame_without_source_keeps_its_location_only():
    with pytest.raises(ZeroDivisionError) as info:
        exec(compile("for q in range(3):\n    1 / (q - 1)", "<nowhere>", "exec"), {})
    frame = loop_context(info.value).frames[-1]
    assert (frame.file, frame.line, frame.loops, frame.statement) == ("<nowhere>", 2, [], "")


def test_the_short_text_cuts_long_lists_and_says_how_many_more():
    import torch

    from cudadiag import classify, summarize
    from cudadiag.incident import (
        BatchInfo,
        ErrorInfo,
        FrameContext,
        LoopContext,
        LoopInfo,
        RunInfo,
        StepInfo,
    )

    values = {f"v{k}": str(k) for k in range(12)}
    incident = Incident(
        error=ErrorInfo(type="IndexError", message="index out of range in self", text=""),
        diagnosis=classify("IndexError: index out of range in self"),
        run=RunInfo(mode="kernel"),
        step=StepInfo(iteration=5, last_completed=4, loader="train"),
        batch=BatchInfo(**vars(summarize(torch.zeros(64, 2))), indices=list(range(64))),
        loop=LoopContext([FrameContext(file="train.py", line=3, function="<module>", loops=[
            LoopInfo(kind="for", line=1, header="for v0, *rest in rows:", values=values)])]),
    )
    short = unwrapped(render_short(incident, show=SHOW_IN_IPYTHON))
    assert "v7=7, … and 4 more (train.py)" in short
    assert "dataset indices [0, 1, 2, 3, 4, 5, 6, 7, … and 56 more]" in short
    assert "dataset indices [0, 1," in render_text(incident)
    assert "31, … and 32 more]" in render_text(incident)


SCRIPT = """\
import argparse
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def train_epoch(model, loader, epoch, lr):
    for batch_idx, (x, y) in enumerate(loader):
        if epoch == 1 and batch_idx == 3:
            y = y.clone()
            y[5] = 4  # one class more than the model has
        loss = F.cross_entropy(model(x), y)
        loss.backward()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    labels = torch.tensor([i % 4 for i in range(64)])
    loader = DataLoader(TensorDataset(torch.randn(64, 8), labels), batch_size=8)
    model = torch.nn.Linear(8, 4)
    for epoch in range(args.epochs):
        train_epoch(model, loader, epoch, args.lr)


main()
"""


@pytest.mark.slow
def test_a_scripts_loops_in_the_run_summary_and_its_report(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(SCRIPT)

    def cudadiag(*args):
        return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    ran = cudadiag("run", "--json", "incident.json", "--", "python", "train.py")
    assert ran.returncode == 1
    printed = unwrapped(ran.stderr)
    assert ("  loop: epoch=1 (train.py in main) › batch_idx=3, x=<tensor float32[8, 8]>, "
            "y=<tensor int64[8]> (train.py in train_epoch)") in printed
    assert "locals of train.py in train_epoch: epoch=1, lr=0.05" in printed
    assert ("check first: target 4 for 4 output columns (valid [0, 4); these targets span "
            "0..4): a class the model was not built for, or labels numbered 1..4") in printed
    incident = json.loads((tmp_path / "incident.json").read_text())
    report = cudadiag("report", incident["id"]).stdout
    assert ("# ./train.py:12 in train_epoch\n"
            "for batch_idx, (x, y) in enumerate(loader):  # batch_idx=3, "
            "x=<tensor float32[8, 8]>, y=<tensor int64[8]>\n"
            "    ...\n"
            "    loss = F.cross_entropy(model(x), y)  # <- raised here\n") in report
    assert "for epoch in range(args.epochs):  # epoch=1" in report


@pytest.mark.slow
def test_an_isolated_run_records_the_loop_of_the_replayed_cell(shell, capsys):
    run(shell, SETUP)
    run(shell, DATA)
    _, cell = run(shell, "for step in range(5):\n"
                         "    ix = torch.tensor([step, 777 if step == 3 else 1])\n"
                         "    F.cross_entropy(model(X[ix]), Y[ix]).item()")
    run(shell, "%cuda_isolate")
    isolated = next(i for i in incidents() if i.run.mode == "isolated")
    (frame,) = isolated.loop.frames
    assert (frame.cell, frame.loops[0].values) == (cell, {"step": "3"})
    assert frame.statement == "    F.cross_entropy(model(X[ix]), Y[ix]).item()"
