"""Every Python binding form is a definition for the plan of an isolated run, and the names a
form only reads (defaults, decorators, annotations, bases) are uses."""

from __future__ import annotations

import sys

import pytest
from IPython.core.error import UsageError

from cudadiag.isolate.plan import make_plan
from scenarios import run

IMPORTS = "import torch\nimport torch.nn.functional as F"
DATA = "x = torch.randn(4, 3)\ntarget = torch.tensor([0, 2, 1, 2])"


def _replay(history: dict[int, str], target: int) -> list[int]:
    return make_plan(history, target, {}, ship="none").replay


def test_except_as_binds_the_exception_in_the_handler():
    history = {1: IMPORTS, 2: DATA,
               3: "try:\n    loss = F.cross_entropy(x, target + 5)\n"
                  "except IndexError as exc:\n"
                  "    raise RuntimeError('labels out of range') from exc"}
    assert _replay(history, 3) == [1, 2, 3]


def test_except_star_binds_the_group():
    history = {1: IMPORTS, 2: DATA,
               3: "try:\n    loss = F.cross_entropy(x, target)\n"
                  "except* (IndexError, RuntimeError) as group:\n"
                  "    print(len(group.exceptions), 'errors')"}
    assert _replay(history, 3) == [1, 2, 3]


def test_match_case_captures_names_as_star_rest_and_class_patterns():
    history = {1: "config = {'lr': 0.1, 'layers': [8, 4, 2], 'act': 'relu', 'seed': 0}",
               2: "match config:\n"
                  "    case {'lr': float(lr), 'layers': [first, *rest], **others}:\n"
                  "        print(lr, first, rest, others)\n"
                  "    case {'act': str() as act} | {'activation': act}:\n"
                  "        print(act)\n"
                  "    case _:\n"
                  "        pass\n"
                  "summary = (lr, first, rest, sorted(others))"}
    assert _replay(history, 2) == [1, 2]
    # the class of a class pattern is read: a user class comes from an earlier cell
    history[2] = "class Settings:\n    lr = 0.1"
    history[3] = "match Settings():\n    case Settings(lr=rate):\n        print(rate)"
    assert _replay(history, 3) == [2, 3]


def test_with_as_binds_single_and_tuple_targets():
    history = {1: IMPORTS, 2: "import contextlib\n"
                              "@contextlib.contextmanager\ndef pair():\n    yield 1, 2",
               3: "with torch.no_grad() as grad_off, pair() as (left, right):\n"
                  "    total = left + right\nprint(grad_off, total)"}
    assert _replay(history, 3) == [1, 2, 3]


def test_for_targets_with_nested_unpacking_are_bound():
    history = {1: IMPORTS, 2: DATA,
               3: "batches = [(x, target)]\n"
                  "for step, (xb, yb) in enumerate(batches):\n    loss = F.cross_entropy(xb, yb)\n"
                  "print(step, loss.item())"}
    assert _replay(history, 3) == [1, 2, 3]


def test_walrus_binds_in_the_cell_even_inside_a_comprehension():
    history = {1: "words = ['emma', 'olivia', 'ava']",
               2: "long_names = [n for w in words if (n := len(w)) > 3]\n"
                  "if (count := len(long_names)) > 0:\n    print(count, 'long; last length', n)"}
    assert _replay(history, 2) == [1, 2]


def test_comprehension_variables_neither_leak_nor_are_required():
    history = {1: "i = 100", 2: "squares = [i * i for i in range(3)]\n"
                                "table = {k: v for k, v in zip('ab', squares)}",
               3: "print(i, squares, table)"}
    # In[2]'s i is its own: In[1] still provides the kernel's i, In[2] reads no i
    assert _replay(history, 3) == [1, 2, 3]
    assert _replay(history, 2) == [2]


def test_import_as_binds_the_alias():
    history = {1: "import numpy as np\nfrom collections import Counter as Tally",
               2: "counts = Tally('hello')\narr = np.array(list(counts.values()))"}
    assert _replay(history, 2) == [1, 2]


def test_global_in_a_function_is_a_change_where_the_function_is_called():
    history = {1: "calls = 0", 2: "def bump():\n    global calls\n    calls += 1",
               3: "bump()\nbump()", 4: "print('unrelated')", 5: "print(calls)"}
    assert _replay(history, 5) == [1, 2, 3, 5]


def test_nonlocal_names_stay_inside_the_function():
    history = {1: "def make_counter():\n    n = 0\n    def inc():\n        nonlocal n\n"
                  "        n += 1\n        return n\n    return inc",
               2: "counter = make_counter()\nprint(counter(), counter())"}
    assert _replay(history, 2) == [1, 2]


def test_del_needs_the_name_and_changes_it():
    history = {1: IMPORTS, 2: "activations = torch.randn(1000, 100)", 3: "del activations"}
    assert _replay(history, 3) == [1, 2, 3]
    history[4] = "activations = torch.zeros(2)"
    history[5] = "print(activations.shape)"
    assert _replay(history, 5) == [1, 4, 5]


def test_function_definitions_read_decorators_defaults_and_annotations():
    history = {1: "import functools", 2: "import torch", 3: "from torch import Tensor",
               4: "scale = 3",
               5: "@functools.lru_cache(maxsize=None)\ndef scaled(n, factor=scale):\n"
                  "    return n * factor\n"
                  "def double(t: Tensor) -> Tensor:\n    return t * 2\n"
                  "print(scaled(2), double(torch.ones(2)))"}
    assert _replay(history, 5) == [1, 2, 3, 4, 5]


def test_lambda_defaults_are_read_when_the_lambda_is_made():
    history = {1: "scale = 3", 2: "times = lambda v, k=scale: v * k\nprint(times(2))"}
    assert _replay(history, 2) == [1, 2]


def test_class_definitions_read_bases_keywords_and_their_body():
    history = {1: IMPORTS + "\nimport torch.nn as nn", 2: "hidden = 16",
               3: "import abc\nclass Meta(abc.ABCMeta):\n    pass",
               4: "class MLP(nn.Module, metaclass=Meta):\n    width = hidden\n"
                  "    def __init__(self):\n        super().__init__()\n"
                  "        self.fc = nn.Linear(4, self.width)\nmodel = MLP()"}
    assert _replay(history, 4) == [1, 2, 3, 4]


def test_augmented_assignment_reads_and_rebinds():
    history = {1: "total = 0", 2: "total += 5", 3: "other = 1", 4: "print(total)"}
    assert _replay(history, 4) == [1, 2, 4]


def test_star_unpacking_binds_every_target():
    history = {1: "batches = [[1, 2], [3], [4, 5]]",
               2: "first, *middle, last = batches\nprint(first, middle, last)"}
    assert _replay(history, 2) == [1, 2]


def test_annotated_assignment_binds_and_bare_annotation_does_not():
    history = {1: "from typing import Optional", 2: "lr = 0.1", 3: "lr: float",
               4: "best: Optional[float] = None\nprint(lr, best)"}
    assert _replay(history, 4) == [1, 2, 4]
    history[3] = "lr: float = 0.01"
    assert _replay(history, 4) == [1, 3, 4]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="`type X = ...` is Python 3.12+")
def test_type_alias_binds_its_name():
    history = {1: "from typing import Sequence", 2: "type Batch = Sequence[int]",
               3: "print(Batch)"}
    assert _replay(history, 3) == [1, 2, 3]


def test_except_as_in_the_suspect_cell_plans_through_the_magic(shell, capsys):
    _, imports = run(shell, IMPORTS)
    _, data = run(shell, DATA)
    run(shell, "print('unrelated')")
    _, suspect = run(shell, "try:\n    loss = F.cross_entropy(x, target + 5)\n"
                            "except IndexError as exc:\n"
                            "    raise RuntimeError('labels out of range') from exc")
    capsys.readouterr()
    result, _ = run(shell, f"%cuda_isolate {suspect} --dry-run")
    assert result.success
    out = capsys.readouterr().out
    # the CPU tensors are shipped; the imports are replayed
    assert out.strip() == f"plan: replay In[{imports}], In[{suspect}]; ship target, x"
    run(shell, f"%cuda_isolate {suspect} --dry-run --ship none")
    out = capsys.readouterr().out
    assert out.strip() == f"plan: replay In[{imports}], In[{data}], In[{suspect}]; ship nothing"


def test_match_walrus_and_del_plan_through_the_magic(shell, capsys):
    _, config = run(shell, "config = {'lr': 0.1, 'layers': [8, 4, 2]}\nscratch = [0] * 10")
    _, suspect = run(shell, "match config:\n"
                            "    case {'layers': [first, *rest], **others}:\n"
                            "        sizes = [s for s in rest if (last := s)]\n"
                            "del scratch\nprint(first, sizes, last, others)")
    capsys.readouterr()
    run(shell, f"%cuda_isolate {suspect} --dry-run")
    # the cell is replayed for scratch, which the suspect cell deletes: it makes config too
    assert capsys.readouterr().out.strip() == (f"plan: replay In[{config}], In[{suspect}]; "
                                               "ship nothing")


def test_a_name_no_cell_binds_is_still_refused_by_the_magic(shell):
    _, suspect = run(shell, "try:\n    pass\nexcept ValueError as exc:\n    pass\nprint(nowhere)")
    result, _ = run(shell, f"%cuda_isolate {suspect} --dry-run")
    assert isinstance(result.error_in_exec, UsageError)
    assert "reads nowhere, which no earlier cell defines" in str(result.error_in_exec)
