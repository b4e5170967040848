"""Replay never repeats side effects silently: cells that write, delete or move files, start
processes or reach the network are listed in the plan, and a run that would repeat them is
refused unless --allow-side-effects (or the values are shipped instead). --ship of a name that
does not exist or cannot be shipped is a clear error."""

from __future__ import annotations

import threading

import pytest
from IPython.core.error import UsageError

from cudadiag import incidents
from cudadiag.isolate.plan import PlanError, make_plan
from scenarios import SETUP, run

IMPORTS = ("import os, shutil, subprocess, json, pickle, socket, urllib.request, http.client\n"
           "import requests, torch, torchvision, logging, wandb\nimport numpy as np\n"
           "import pandas as pd\n"
           "import matplotlib.pyplot as plt\nfrom pathlib import Path\nfrom os import remove\n"
           "df = pd.DataFrame({'a': [1]})")

WRITERS = [
    ("open('data.txt', 'a').write('run')", "writes a file: open('data.txt', 'a')"),
    ("fh = open('out.bin', mode='wb')", "writes a file: open('out.bin', mode='wb')"),
    ("with open('data.txt', 'r+') as fh:\n    fh.read()", "writes a file: open('data.txt', 'r+')"),
    ("Path('runs').mkdir(exist_ok=True)",
     "creates a directory: Path('runs').mkdir(exist_ok=True)"),
    ("Path('notes.txt').write_text('hi')", "writes a file: Path('notes.txt').write_text('hi')"),
    ("Path('notes.txt').open('w')", "writes a file: Path('notes.txt').open('w')"),
    ("Path('old.txt').unlink()", "deletes files: Path('old.txt').unlink()"),
    ("Path('stamp').touch()", "creates a file: Path('stamp').touch()"),
    ("p = Path('a.txt')\np.rename('b.txt')", "moves or renames files: p.rename('b.txt')"),
    ("os.remove('tmp.txt')", "deletes files: os.remove('tmp.txt')"),
    ("remove('tmp.txt')", "deletes files: remove('tmp.txt')"),
    ("os.makedirs('ckpt', exist_ok=True)",
     "creates a directory: os.makedirs('ckpt', exist_ok=True)"),
    ("os.replace('a', 'b')", "moves or renames files: os.replace('a', 'b')"),
    ("os.system('nvidia-smi')", "starts a process: os.system('nvidia-smi')"),
    ("out = os.popen('ls').read()", "starts a process: os.popen('ls')"),
    ("shutil.rmtree('runs')", "deletes files: shutil.rmtree('runs')"),
    ("shutil.copy('a', 'b')", "copies files: shutil.copy('a', 'b')"),
    ("shutil.move('a', 'b')", "moves or renames files: shutil.move('a', 'b')"),
    ("subprocess.run(['ls'])", "starts a process: subprocess.run(['ls'])"),
    ("r = requests.get('https://example.com')",
     "reaches the network: requests.get('https://example.com')"),
    ("urllib.request.urlopen('https://x')",
     "reaches the network: urllib.request.urlopen('https://x')"),
    ("c = http.client.HTTPSConnection('x')",
     "reaches the network: http.client.HTTPSConnection('x')"),
    ("s = socket.create_connection(('x', 80))",
     "reaches the network: socket.create_connection(('x', 80))"),
    ("torch.save(vocab, 'vocab.pt')", "writes a file: torch.save(vocab, 'vocab.pt')"),
    ("np.save('arr.npy', np.zeros(2))", "writes a file: np.save('arr.npy', np.zeros(2))"),
    ("np.savez_compressed('a.npz', x=1)", "writes a file: np.savez_compressed('a.npz', x=1)"),
    ("pickle.dump(vocab, fh)", "writes a file: pickle.dump(vocab, fh)"),
    ("json.dump(vocab, fh)", "writes a file: json.dump(vocab, fh)"),
    ("df.to_csv('out.csv')", "writes a file: df.to_csv('out.csv')"),
    ("plt.savefig('loss.png')", "writes a file: plt.savefig('loss.png')"),
    ("logging.basicConfig(filename='train.log')",
     "writes a file: logging.basicConfig(filename='train.log')"),
    ("run = wandb.init(project='mlp')",
     "logs to an experiment tracker: wandb.init(project='mlp')"),
    ("ds = torchvision.datasets.MNIST('data', download=True)",
     "downloads files (download=True): torchvision.datasets.MNIST('data', download=True)"),
]

HARMLESS = ["words = open('names.txt').read()", "fh = open('names.txt', 'r')",
            "text = df.to_csv()", "text = json.dumps([1])", "p = os.path.join('a', 'b')",
            "ok = Path('a').exists()", "s = 'a-b'.replace('-', '_')",
            "d = df.rename(columns={'a': 'b'})", "requests = []\nrequests.append(1)",
            "def save(m):\n    torch.save(m, 'm.pt')", "logging.basicConfig(level=10)"]


def _history(code: str) -> dict[int, str]:
    return {1: IMPORTS, 2: f"vocab = ['a', 'b']\nfh = None\n{code}",
            3: "vocab.append('c')\nprint(vocab)"}


@pytest.mark.parametrize(("code", "listed"), WRITERS, ids=[w[0][:30] for w in WRITERS])
def test_a_replayed_cell_that_acts_on_the_machine_is_listed_and_refused(code, listed):
    plan = make_plan(_history(code), 3, {}, ship="none")
    assert 2 in plan.replay
    assert listed in [str(effect) for n, effect in plan.side_effects if n == 2]
    assert f"  side effect: In[2] {listed}" in plan.describe()
    assert f"  In[2] {listed}" in plan.refusal
    assert "--allow-side-effects" in plan.refusal


@pytest.mark.parametrize("code", HARMLESS)
def test_reading_files_and_look_alike_calls_are_not_side_effects(code):
    plan = make_plan(_history(code), 3, {}, ship="none")
    assert 2 in plan.replay
    assert plan.side_effects == [] and plan.refusal is None


def test_the_cell_re_run_is_listed_but_not_refused():
    history = {1: "import torch", 2: "model = torch.nn.Linear(2, 2)",
               3: "out = model(torch.ones(2))\ntorch.save(model.state_dict(), 'ckpt.pt')"}
    plan = make_plan(history, 3, {})
    assert plan.replay == [1, 2, 3] and plan.refusal is None
    assert ("  side effect: In[3] (the cell re-run) writes a file: "
            "torch.save(model.state_dict(), 'ckpt.pt')") in plan.describe()


def test_allow_side_effects_lifts_the_refusal_and_keeps_the_list():
    history = _history("os.remove('tmp.txt')")
    plan = make_plan(history, 3, {}, ship="none", allow_side_effects=True)
    assert plan.refusal is None
    assert "side effect: In[2] deletes files: os.remove('tmp.txt')" in plan.describe()
    assert "needs --allow-side-effects" not in plan.describe()


def test_the_refusal_offers_to_ship_what_the_cell_made():
    history = {1: "with open('data.txt', 'a') as log:\n    log.write('loaded')\n"
                  "vocab = ['a', 'b']",
               2: "print(len(vocab))"}
    namespace = {"vocab": ["a", "b"]}
    plan = make_plan(history, 2, namespace, ship="none")
    assert plan.ship_instead == ["vocab"]
    assert "--ship vocab to send the values instead" in plan.refusal
    assert plan.describe().endswith("  a run needs --allow-side-effects or --ship vocab")
    shipped = make_plan(history, 2, namespace, ship=["vocab"])
    assert shipped.replay == [2] and shipped.ship == ["vocab"] and shipped.refusal is None


def test_the_refusal_says_why_a_value_could_not_be_shipped():
    history = {1: "with open('data.txt', 'a') as log:\n    log.write('loaded')\n"
                  "lossi = []\nstepi = []",
               2: "lossi.append(0.5)\nstepi.append(0)"}
    plan = make_plan(history, 2, {"lossi": [0.5], "stepi": [0]})
    assert plan.replay == [1, 2] and plan.ship == []
    assert ("In[1] is replayed for lossi, stepi (not shipped: may have been changed since, by "
            "In[2] (directly or through an alias)).") in plan.refusal


def test_a_cell_kept_for_process_wide_state_is_refused_with_its_reason():
    history = {1: "import torch", 2: "torch.manual_seed(0)\nlog = open('train.log', 'a')",
               3: "x = torch.randn(3)"}
    plan = make_plan(history, 3, {})
    assert plan.replay == [1, 2, 3]
    assert ("In[2] is replayed for process-wide state (seeds a random generator)."
            in plan.refusal)


def test_side_effects_of_a_called_function_belong_to_the_calling_cell():
    history = {1: "import torch",
               2: "def checkpoint(m, path):\n    torch.save(m.state_dict(), path)",
               3: "model = torch.nn.Linear(2, 2)\ncheckpoint(model, 'best.pt')",
               4: "print(model.weight)"}
    plan = make_plan(history, 4, {}, ship="none")
    assert plan.replay == [1, 2, 3, 4]
    assert [(n, str(e)) for n, e in plan.side_effects] == [
        (3, "writes a file: checkpoint(model, 'best.pt') -> torch.save(m.state_dict(), path)")]


def test_ship_of_a_name_not_in_the_kernel_is_an_error():
    history = {1: "import torch", 2: "x = torch.ones(2)", 3: "y = x * 2"}
    with pytest.raises(PlanError, match="cannot ship xx: no such variable in this kernel"):
        make_plan(history, 3, {"x": 1}, ship=["xx"])
    with pytest.raises(PlanError, match="cannot ship xx: no such variable in this kernel"):
        make_plan(history, 3, {"x": 1}, ship=["xx"], cells=[1, 2])


def test_ship_of_an_unpicklable_value_is_an_error_naming_the_reason():
    history = {1: "import threading", 2: "lock = threading.Lock()", 3: "print(lock)"}
    namespace = {"lock": threading.Lock()}
    with pytest.raises(PlanError, match=r"cannot ship lock: not picklable \(TypeError: cannot "
                                        r"pickle '_thread.lock' object\)"):
        make_plan(history, 3, namespace, ship=["lock"])
    with pytest.raises(PlanError, match="cannot ship lock: not picklable"):
        make_plan(history, 3, namespace, ship=["lock"], cells=[1])


def test_ship_of_a_value_the_plan_does_not_need_is_an_error():
    history = {1: "a = 1\nb = 2", 2: "print(a)"}
    with pytest.raises(PlanError, match=r"cannot ship b: neither In\[2\] nor the cells it "
                                        "needs read it"):
        make_plan(history, 2, {"a": 1, "b": 2}, ship=["a", "b"])


def test_ship_of_a_value_changed_since_is_an_error_naming_the_cell():
    history = {1: "import random\nwords = ['b', 'a']", 2: "print(words[0])",
               3: "random.shuffle(words)"}
    # the kernel's words is what In[3] made of it, not what In[2] read
    with pytest.raises(PlanError, match=r"cannot ship words: may have been changed since, by "
                                        r"In\[3\]"):
        make_plan(history, 2, {"words": ["a", "b"]}, ship=["words"])
    # shuffled before the suspect cell ran: the kernel's value is the one it read
    history[2], history[3] = history[3], history[2]
    assert make_plan(history, 3, {"words": ["a", "b"]}, ship=["words"]).replay == [3]


def test_bad_ship_names_are_usage_errors_in_the_magic(shell):
    run(shell, "import threading")
    _, made = run(shell, "lock = threading.Lock()")
    _, suspect = run(shell, "print(lock)")
    for line, expected in [
            (f"%cuda_isolate {suspect} --ship nosuch",
             "cannot ship nosuch: no such variable in this kernel"),
            (f"%cuda_isolate {suspect} --ship lock", "cannot ship lock: not picklable"),
            (f"%cuda_isolate {suspect} --cells {made} --ship lock",
             "cannot ship lock: not picklable"),
            (f"%cuda_isolate {suspect} --cells {made} --ship nosuch",
             "cannot ship nosuch: no such variable")]:
        result, _ = run(shell, line)
        assert isinstance(result.error_in_exec, UsageError), line
        assert expected in str(result.error_in_exec), line
    assert incidents() == []


@pytest.mark.slow
def test_a_replayed_cell_appending_to_a_file_is_refused_then_allowed(shell, capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, setup = run(shell, SETUP)
    _, log_cell = run(shell, "with open('data.txt', 'a') as log:\n    log.write('epoch 0\\n')\n"
                            "losses = []")
    _, failing = run(shell, "logits = torch.zeros(3, 4)\ntarget = torch.tensor([0, 2, 4])\n"
                            "losses.append(F.cross_entropy(logits, target).item())")
    assert len(incidents()) == 1
    capsys.readouterr()

    result, _ = run(shell, "%cuda_isolate")
    assert isinstance(result.error_in_exec, UsageError)
    message = str(result.error_in_exec)
    assert message.startswith("not run: replaying would repeat what earlier cells did to this "
                              f"machine:\n  In[{log_cell}] writes a file: open('data.txt', 'a')")
    assert f"In[{log_cell}] is replayed for losses (not shipped: may have been changed" in message
    assert "Add --allow-side-effects" in message
    out = capsys.readouterr().out
    assert f"plan: replay In[{setup}], In[{log_cell}], In[{failing}]; ship nothing" in out
    assert f"  side effect: In[{log_cell}] writes a file: open('data.txt', 'a')" in out
    assert (tmp_path / "data.txt").read_text() == "epoch 0\n"
    assert len(incidents()) == 1

    run(shell, "%cuda_isolate --allow-side-effects")
    assert (tmp_path / "data.txt").read_text() == "epoch 0\nepoch 0\n"
    isolated = [i for i in incidents() if i.run.mode == "isolated"]
    assert len(isolated) == 1 and isolated[0].op.name == "aten::nll_loss_forward"
