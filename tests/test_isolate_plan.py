"""The plan of an isolated run: which cells to replay, which values to ship."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

from cudadiag import incidents
from cudadiag.isolate.cellfacts import analyse_cell, python_source
from cudadiag.isolate.plan import PlanError, make_plan
from scenarios import fail_fix_rerun, run

HISTORY = {
    1: "import torch\nimport torch.nn.functional as F\nimport matplotlib.pyplot as plt",
    2: "def make_model(n):\n    hidden = 8\n    return torch.nn.Linear(hidden, n)",
    3: "model = make_model(4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    4: "model.weight.data.zero_()",
    5: "losses = [1, 2]\nplt.plot(losses)\n!nvidia-smi",
    6: "%matplotlib inline\nx = torch.randn(3, 8)\ntarget = torch.tensor([0, 2, 4])",
    7: "loss = F.cross_entropy(model(x), target)\nloss.backward()\nopt.step()",
}


def test_multi_cell_history_gets_the_cells_it_needs():
    plan = make_plan(HISTORY, 7, {}, ship="none")
    # imports, the function, the model cell and the cell that mutates the model; the
    # unrelated plotting cell is left out
    assert plan.replay == [1, 2, 3, 4, 6, 7]
    assert plan.ship == []
    assert (6, "%matplotlib inline") in plan.skipped
    assert "replay In[1], In[2], In[3], In[4], In[6], In[7]" in plan.describe()
    assert "skipped (magics and shell escapes): In[6]: %matplotlib inline" in plan.describe()


def test_untouched_cpu_values_are_shipped_instead_of_replayed():
    history = {1: "import torch", 2: "table = torch.arange(10)\nscale = 3",
               3: "y = table * scale"}
    namespace = {"table": torch.arange(10), "scale": 3, "torch": torch}
    plan = make_plan(history, 3, namespace)
    assert plan.ship == ["scale", "table"] and plan.replay == [3]


def test_values_the_suspect_cell_may_change_are_replayed():
    history = {1: "import torch", 2: "w = torch.zeros(3)", 3: "w.add_(1)\nprint(w)"}
    plan = make_plan(history, 3, {"w": torch.ones(3), "torch": torch})
    assert plan.ship == [] and plan.replay == [1, 2, 3]
    assert "may have been changed" in plan.not_shipped["w"]


def test_a_value_mutated_through_an_alias_is_replayed():
    history = {
        1: "import torch",
        2: "C = torch.randn(27, 2)\nW1 = torch.randn(6, 100)",
        3: "parameters = [C, W1]",
        4: "for p in parameters:\n    p.data -= 0.1 * p.data\nout = C.sum()",
    }
    namespace = {"C": torch.randn(27, 2), "W1": torch.randn(6, 100), "torch": torch,
                 "parameters": []}
    plan = make_plan(history, 4, namespace)
    assert "C" not in plan.ship and "parameters" not in plan.ship
    assert plan.replay == [1, 2, 3, 4]


def test_values_changed_by_a_later_cell_are_not_shipped():
    history = {1: "n = 1", 2: "y = n + 1", 3: "n = 5"}
    plan = make_plan(history, 2, {"n": 5})
    assert plan.ship == [] and plan.replay == [1, 2]


class _OnGpu:
    device = torch.device("cuda", 0)


def test_values_on_a_gpu_are_never_shipped():
    history = {1: "import torch", 2: "t = torch.ones(2)", 3: "u = t + 1"}
    plan = make_plan(history, 3, {"t": _OnGpu(), "torch": torch})
    assert plan.ship == [] and plan.replay == [1, 2, 3]
    assert plan.not_shipped["t"].startswith("lives on cuda:0")


def test_explicit_ship_list_and_unshippable_names_are_clear_errors():
    history = {1: "import torch", 2: "x = torch.ones(2)", 3: "y = x * 2"}
    plan = make_plan(history, 3, {"x": torch.ones(2)}, ship=["x"])
    assert plan.ship == ["x"] and plan.replay == [3]
    with pytest.raises(PlanError, match="cannot ship zz"):
        make_plan(history, 3, {"x": torch.ones(2)}, ship=["zz"], cells=[1])


def test_a_name_nothing_provides_is_an_error_before_anything_runs():
    with pytest.raises(PlanError, match="reads undefined_thing"):
        make_plan({1: "import torch", 2: "undefined_thing + 1"}, 2, {})


def test_unknown_target_and_syntax_errors_are_clear():
    with pytest.raises(PlanError, match="not in this kernel's history"):
        make_plan({1: "x = 1"}, 9, {})
    with pytest.raises(PlanError, match="does not parse"):
        make_plan({1: "x = (1"}, 1, {})


def test_cells_option_overrides_the_analysis():
    plan = make_plan(HISTORY, 7, {}, cells=[1, 3])
    assert plan.replay == [1, 3, 7]


def test_magics_and_shell_escapes_become_pass_with_a_note():
    source, skipped = python_source("x = 1\n%xmode Minimal\nfiles = !ls\n  %load_ext cudadiag\nz?")
    assert source.splitlines() == ["x = 1", "pass", "pass", "  pass", "pass"]
    assert skipped == ["%xmode Minimal", "files = !ls", "z?"]
    transformed = "get_ipython().run_line_magic('xmode', 'Minimal')\nx = 1"
    assert python_source(transformed) == ("pass\nx = 1", ["get_ipython().run_line_magic('xmode', "
                                                          "'Minimal')"])
    assert python_source("%%bash\necho hi")[0] == "pass"
    assert python_source("%%time\nx = 1")[0] == "pass\nx = 1"


def test_a_variable_set_with_env_is_set_in_the_replay():
    assert python_source("%env DATA_DIR=inputs\n%env MODE fast\n%env\n%env X=$y") == (
        "import os; os.environ['DATA_DIR'] = 'inputs'\n"
        "import os; os.environ['MODE'] = 'fast'\npass\npass", ["%env", "%env X=$y"])
    transformed = "get_ipython().run_line_magic('env', 'DATA_DIR=inputs')"
    assert python_source(transformed)[0] == "import os; os.environ['DATA_DIR'] = 'inputs'"


def test_a_timed_statement_is_kept_as_the_statement():
    assert python_source("x = 1\n    %time y = f(x)\n%timeit g()") == (
        "x = 1\n    y = f(x)\npass", ["%timeit g()"])
    transformed = "get_ipython().run_line_magic('time', 'y = 2')\nx = 1"
    assert python_source(transformed) == ("y = 2\nx = 1", [])


def test_free_names_respect_local_scopes_and_order():
    facts = analyse_cell(1, "def f(a):\n    b = a + g\n    return b\n"
                            "vals = [i * k for i in range(3)]\nq = 1\nr = q + s")
    assert facts.uses == {"g", "k", "s"}
    assert facts.rebinds == {"f", "vals", "q", "r"}


def test_a_shipped_value_an_earlier_replayed_cell_needs_as_it_was_is_replayed_instead():
    history = {1: "import torch", 2: "n = 3", 3: "w = torch.zeros(n)", 4: "n = 5",
               5: "print(n, w.sum())"}
    namespace = {"torch": torch, "n": 5, "w": _OnGpu()}
    # In[3] must see n = 3: shipping today's n = 5 would rebuild w with the wrong size
    plan = make_plan(history, 5, namespace)
    assert plan.replay == [1, 2, 3, 4, 5] and plan.ship == []
    with pytest.raises(PlanError, match="cannot ship n: an earlier replayed cell needs the "
                                        r"value it had before: it may have been changed since, "
                                        r"by In\[4\]"):
        make_plan(history, 5, namespace, ship=["n"])


def test_a_value_a_replayed_cell_makes_again_is_not_shipped():
    history = {1: "import torch", 2: "torch.manual_seed(0)\nloss = torch.ones(2).sum()",
               3: "print(loss.item())"}
    namespace = {"torch": torch, "loss": torch.tensor(2.0)}
    # In[2] is replayed for its seed and makes loss again: shipping loss would be overwritten
    plan = make_plan(history, 3, namespace)
    assert plan.replay == [1, 2, 3] and plan.ship == []
    assert plan.not_shipped["loss"] == "made again by In[2], which is replayed anyway"
    with pytest.raises(PlanError, match=r"cannot ship loss: it is made again by In\[2\]"):
        make_plan(history, 3, namespace, ship=["loss"])


@pytest.mark.slow
def test_the_re_run_after_a_fix_is_isolated_without_the_cell_that_failed_before(shell, capsys):
    failed, rerun = fail_fix_rerun(shell)
    capsys.readouterr()
    run(shell, f"%cuda_isolate {rerun}")
    out = capsys.readouterr().out
    assert (f"plan: replay In[{failed - 2}], In[{failed - 1}], In[{failed + 1}], In[{rerun}]; "
            "ship nothing") in out
    assert (f"  not replayed: In[{failed}] failed in this session; In[{rerun}], its new "
            "version, stands for it") in out
    assert "the isolated run finished without error" in out
    assert [i.run.mode for i in incidents()] == ["kernel"]  # the failure before the fix only


def test_a_name_only_a_failed_cell_made_is_a_clear_error(shell):
    run(shell, "import torch")
    _, failed = run(shell, "model = torch.nn.Linear(2, 2)\nmodel(torch.ones(3))  # fails")
    _, later = run(shell, "out = model(torch.ones(2))")
    result, _ = run(shell, f"%cuda_isolate {later} --ship none --dry-run")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == (
        f"In[{later}] reads model, made only by In[{failed}], which failed in this session, "
        "and a replay never re-runs a cell that failed: run the code that makes it again in a "
        "cell that ends without error")


def test_a_cell_the_user_interrupted_is_replayed(shell, capsys):
    run(shell, "import torch\nw = torch.zeros(2)")
    _, interrupted = run(shell, "w += 1\nraise KeyboardInterrupt  # the user stopped it")
    _, later = run(shell, "print(w)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {later} --ship none --dry-run")
    out = capsys.readouterr().out
    assert f"In[{interrupted}], In[{later}]; ship nothing" in out and "not replayed" not in out
