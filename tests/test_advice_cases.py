"""The advice each workload shape gets, where users read it (issue 21, "Done when"): the
worked example (4 output columns, targets [0, 2, 4]), labels numbered 1..C, an extra class, a
token id equal to the vocabulary size as the embedding's input and as a loss target, a table
sized by a constant (27 rows, value 27), padding −1 not ignored — through `%cuda_isolate` in
a real IPython shell, `cudadiag run` (then `cudadiag show`) and `cudadiag explain` of the
log the same program prints when run on its own. All on the simulated device."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.workloads.notebooks import write_names

from advice_review import assert_class_target_readings, assert_fitted, contradictions
from cudadiag import incidents
from cudadiag.incident import Incident
from cudadiag.ui.render import first_sentence
from scenarios import GUIDE_SCRIPT, MODEL, SETUP, run, unwrapped

pytestmark = [pytest.mark.slow, pytest.mark.isolates]

WORKLOADS = Path(__file__).parent / "workloads"
TARGET_CHECK = "Class targets must lie in [0, C)"


def cudadiag(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudadiag.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def project(tmp_path: Path, script: str) -> Path:
    """A folder holding the workload (the method's worked example written as guide.py) and its
    data."""
    folder = tmp_path / "project"
    folder.mkdir()
    if script == "guide.py":
        (folder / script).write_text(GUIDE_SCRIPT)
    else:
        shutil.copy(WORKLOADS / script, folder / script)
    write_names(folder, hyphenated=2)  # names_mlp.py reads it; the others do not
    return folder


def section(text: str, title: str) -> list[str]:
    """The bullets of one section of `cudadiag show`, each unwrapped into one line (the text
    is wrapped at spaces and after hyphens)."""
    block = text.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]
    bullets = []
    for bullet in re.split(r"^- ", block, flags=re.MULTILINE)[1:]:
        line, *rest = (part.strip() for part in bullet.splitlines())
        for part in rest:
            line += part if line.endswith("-") else " " + part
        bullets.append(line)
    return bullets


def run_script(tmp_path: Path, script: str) -> tuple[list[str], list[str], str, Incident]:
    """`cudadiag run` the workload, then `cudadiag show` its incident: (check first, do not
    conclude, what run and show printed, the incident)."""
    folder = project(tmp_path, script)
    ran = cudadiag("run", "--", sys.executable, script, "--simulated", cwd=folder)
    assert ran.returncode == 1, ran.stderr[-3000:]
    (incident,) = incidents()
    shown = cudadiag("show", incident.id, cwd=folder).stdout
    checks, avoid = section(shown, "Check first"), section(shown, "Do not conclude")
    assert checks == incident.diagnosis.first_checks and avoid == incident.diagnosis.avoid
    return checks, avoid, ran.stderr + shown, incident


def explain_log(tmp_path: Path, script: str) -> tuple[list[str], list[str], str]:
    """Run the workload on its own (no cudadiag around it), then `cudadiag explain` the log
    it printed: (check first, do not conclude, what explain printed)."""
    folder = project(tmp_path, script)
    plain = subprocess.run([sys.executable, script, "--simulated"], cwd=folder,
                           capture_output=True, text=True, timeout=600)
    assert plain.returncode != 0
    log = folder / "job.log"
    log.write_text(plain.stdout + plain.stderr)
    out = cudadiag("explain", str(log), cwd=folder).stdout
    checks = [line[4:] for line in out.split("check first:\n")[1].split("do not conclude:")[0]
              .splitlines()]
    avoid = [line[4:] for line in out.split("do not conclude:\n")[1].splitlines()]
    return checks, avoid, out


def reviewed(checks: list[str], avoid: list[str]) -> str:
    """What every case's advice must be: few distinct lines, none against its conclusions to
    avoid. Returns the checks as one text."""
    assert_fitted(checks)
    assert contradictions(checks, avoid) == []
    return " ".join(checks)


SCRIPT_CASES = {
    # the method's worked example: target 4 for 4 columns, 0 among the targets
    "guide.py": (4, "target 4 for 4 output columns (valid [0, 4); these targets span 0..4): "
                    "a class the model was not built for, or labels numbered 1..4"),
    # wine.data numbers its cultivars 1, 2, 3
    "wine_classifier.py": (3, "target 3 for 3 output columns (valid [0, 3); these targets span "
                              "1..3, no 0): labels numbered 1..3, or a class the model was not "
                              "built for"),
    # a dataset of 10 classes with one sample labelled 10
    "train_classifier.py": (10, "target 10 for 10 output columns (valid [0, 10)"),
}


@pytest.mark.parametrize("script", sorted(SCRIPT_CASES))
def test_cudadiag_run_class_targets_out_of_range_follow_the_method(tmp_path, script):
    high, opening = SCRIPT_CASES[script]
    checks, avoid, printed, _ = run_script(tmp_path, script)
    text = reviewed(checks, avoid)
    assert checks[0].startswith(opening)
    assert_class_target_readings(checks, high)
    assert f"unexpected {high + 1}th class" in checks[0]
    assert "%" not in text and "cudadiag run" not in text  # a script, and already isolated
    assert "Subtracting 1 from every label before knowing" in " ".join(avoid)
    assert f"  check first: {opening}" in unwrapped(printed)
    assert f"valid_range: [0, {high})" in printed and f"[0, {high}]" not in printed


def test_cudadiag_run_a_token_id_equal_to_the_vocabulary_size_at_the_embedding(tmp_path):
    checks, avoid, printed, _ = run_script(tmp_path, "word_lm.py")
    text = reviewed(checks, avoid)
    assert checks[0].startswith("a token id equals the vocabulary size (25): a token given its "
                                "id after the embedding was sized (pad, eos, a special token)")
    assert f"  check first: {first_sentence(checks[0])[:60]}" in unwrapped(printed)
    assert "share one vocabulary" in text
    assert "output columns" not in text and "class names" not in text


def test_cudadiag_run_a_token_id_equal_to_the_vocabulary_size_as_a_loss_target(tmp_path):
    checks, avoid, printed, incident = run_script(tmp_path, "next_word.py")
    assert incident.op.name == "aten::nll_loss_forward" and 18 in incident.op.vocabularies
    text = reviewed(checks, avoid)
    assert checks[0].startswith("a target token id equals the vocabulary size (18): the loss's "
                                "18 classes are the model's vocabulary (its embedding has 18 "
                                "rows), so this is a token the model was not built with, not "
                                "one class more")
    assert f"  check first: {first_sentence(checks[0])[:60]}" in unwrapped(printed)
    assert "share one vocabulary" in text
    assert "output columns" not in text and "labels numbered" not in text


def test_cudadiag_run_a_value_beyond_a_table_sized_by_a_constant_is_a_new_category(tmp_path):
    checks, avoid, printed, incident = run_script(tmp_path, "names_mlp.py")
    assert incident.op.name == "aten::index.Tensor"
    reviewed(checks, avoid)
    # advanced indexing (t[idx]) takes negative indices too
    assert checks[0].startswith("an index equals the size of the dimension it indexes (27; "
                                "valid [-27, 27))")
    assert ("it is a 28th value where the table holds 27 — a new category in the data, not an "
            "off-by-one: count what the mapping holds (len(stoi)") in checks[0]
    assert "valid_range: [-27, 27)" in printed and "[-27, 27]" not in printed


def test_cudadiag_run_padding_minus_one_not_ignored(tmp_path):
    checks, avoid, printed, _ = run_script(tmp_path, "tagger.py")
    text = reviewed(checks, avoid)
    assert checks[0].startswith("−1 among the targets, and the loss skips only "
                                "ignore_index=-100: if −1 marks padding or unlabeled positions, "
                                "pad with -100 or pass ignore_index=-1")
    assert f"  check first: {first_sentence(checks[0])[:60]}" in unwrapped(printed)
    assert "labels numbered" not in text  # the readings of a target equal to C do not apply


@pytest.mark.parametrize("script", ["guide.py", "wine_classifier.py", "train_classifier.py",
                                    "next_word.py", "tagger.py"])
def test_explain_an_nll_loss_assertion_gives_the_class_target_checks(tmp_path, script):
    checks, avoid, out = explain_log(tmp_path, script)
    assert "failed in nll_loss_forward_reduce_cuda_kernel_2d" in out
    text = reviewed(checks, avoid)
    assert checks[0].startswith(f"{TARGET_CHECK} or equal ignore_index")
    assert "A target equal to C has two readings: labels numbered 1..C, or a class the model " \
           "was not built for" in checks[0]
    assert "cudadiag.check_label_mapping(" in text and "cudadiag.keep_case(" in text
    assert "Padding and unlabeled targets must equal the loss's ignore_index" in text
    assert "In a language model the targets are token ids" in text  # a log cannot tell
    assert "`cudadiag run -- python your_script.py`" in text and "%cuda_isolate)" not in text


def test_explain_an_embedding_assertion_gives_the_token_id_checks(tmp_path):
    checks, avoid, _ = explain_log(tmp_path, "word_lm.py")
    text = reviewed(checks, avoid)
    assert checks[0].startswith("Token ids must lie in [0, num_embeddings)")
    assert "share one vocabulary" in text


def test_explain_an_indexing_assertion_reads_a_new_category_before_an_off_by_one(tmp_path):
    checks, avoid, _ = explain_log(tmp_path, "names_mlp.py")
    text = reviewed(checks, avoid)
    assert checks[0].startswith("Each index must be smaller than the size of the dimension")
    assert "it is a new category in the data, not an off-by-one" in text


# --- %cuda_isolate in a real IPython shell ----------------------------------------------------


@pytest.fixture
def isolated(shell, capsys, warm_interpreter):
    """isolated(*cells): run the cells, the last of which fails, then `%cuda_isolate`: (the
    kernel's incident, the isolated one, what %cuda_isolate printed)."""

    def run_then_isolate(*cells: str) -> tuple[Incident, Incident, str]:
        # pytest re-points fds 1/2 between setup and call: load again to read the device's
        # lines (the warm interpreter kept: the isolated run forks from it)
        warm_interpreter.reload_extension(shell)
        run(shell, SETUP)
        for cell in cells:
            run(shell, cell)
        capsys.readouterr()
        run(shell, "%cuda_isolate")
        out = capsys.readouterr().out
        kernel, isolated_run = incidents()
        assert (kernel.run.mode, isolated_run.run.mode) == ("kernel", "isolated")
        return kernel, isolated_run, out

    return run_then_isolate


def test_cuda_isolate_the_methods_example(isolated):
    kernel, isolated_run, out = isolated(MODEL, "print('loss', loss.item())")
    checks, avoid = isolated_run.diagnosis.first_checks, isolated_run.diagnosis.avoid
    text = reviewed(checks, avoid)
    assert_class_target_readings(checks, 4)
    assert "reads as an unexpected 5th class" in checks[0]
    assert "%cuda_isolate" not in text and "Read the assertion line" not in text
    assert not any(a.startswith("The line in the traceback") for a in avoid)  # it raised there
    assert f"  check first: {checks[0]}" in out
    # the kernel's own incident: no values, the operator's checks, then the magic to run
    kernel_text = reviewed(kernel.diagnosis.first_checks, kernel.diagnosis.avoid)
    assert kernel.diagnosis.first_checks[0].startswith(TARGET_CHECK)
    assert kernel_text.count("[0, C)") == 1
    assert kernel.diagnosis.first_checks[-1].endswith("(%cuda_isolate).")


def test_cuda_isolate_labels_numbered_from_1(isolated):
    _, isolated_run, _ = isolated(
        "import torch.nn as nn\n"
        "g = torch.Generator().manual_seed(0)\n"
        "labels = torch.tensor([1 + i % 3 for i in range(30)])  # cultivars 1, 2, 3\n"
        "features = torch.randn(30, 13, generator=g) + labels[:, None]\n"
        "num_classes = len(torch.unique(labels))\n"
        "model = nn.Linear(13, num_classes)",
        "loss = nn.CrossEntropyLoss()(model(features), labels)\nloss.item()")
    checks = isolated_run.diagnosis.first_checks
    reviewed(checks, isolated_run.diagnosis.avoid)
    assert checks[0].startswith("target 3 for 3 output columns (valid [0, 3); these targets "
                                "span 1..3, no 0)")
    assert_class_target_readings(checks, 3)


NEXT_WORD = (
    "import torch.nn as nn\n"
    "words = 'the cat sat on the mat'.split()\n"
    "stoi = {w: i for i, w in enumerate(dict.fromkeys(words))}\n"
    "embed, head = nn.Embedding(len(stoi), 8), nn.Linear(8, len(stoi))\n"
    "stoi['<eos>'] = len(stoi)\n"
    "ids = torch.tensor([stoi[w] for w in words] + [stoi['<eos>']])"
)


def test_cuda_isolate_a_token_id_equal_to_the_vocabulary_size_as_a_loss_target(isolated):
    _, isolated_run, _ = isolated(
        NEXT_WORD,
        "loss = F.cross_entropy(head(embed(ids[:-1])), ids[1:])\nloss.item()")
    checks = isolated_run.diagnosis.first_checks
    text = reviewed(checks, isolated_run.diagnosis.avoid)
    assert checks[0].startswith("a target token id equals the vocabulary size (5)")
    assert "labels numbered" not in text


def test_cuda_isolate_a_token_id_equal_to_the_vocabulary_size_at_the_embedding(isolated):
    _, isolated_run, _ = isolated(NEXT_WORD, "embed(ids).sum().item()")
    checks = isolated_run.diagnosis.first_checks
    reviewed(checks, isolated_run.diagnosis.avoid)
    assert checks[0].startswith("a token id equals the vocabulary size (5)")


def test_cuda_isolate_a_value_beyond_a_table_sized_by_a_constant(isolated, tmp_path,
                                                                 monkeypatch):
    write_names(tmp_path, hyphenated=2)
    monkeypatch.chdir(tmp_path)
    _, isolated_run, _ = isolated(
        "words = open('names.txt').read().splitlines()\n"
        "chars = sorted(set(''.join(words)))\n"
        "stoi = {s: i + 1 for i, s in enumerate(chars)}\n"
        "stoi['.'] = 0\n"
        "xs = torch.tensor([stoi[ch] for w in words for ch in '.' + w])\n"
        "C = torch.randn((27, 2))",
        "emb = C[xs]\nemb.sum().item()")
    checks = isolated_run.diagnosis.first_checks
    reviewed(checks, isolated_run.diagnosis.avoid)
    assert "a 28th value where the table holds 27 — a new category in the data, not an " \
           "off-by-one" in checks[0]


def test_cuda_isolate_padding_minus_one_not_ignored(isolated):
    _, isolated_run, _ = isolated(
        "from torch.nn.utils.rnn import pad_sequence\n"
        "tags = pad_sequence([torch.tensor([0, 1, 2]), torch.tensor([1, 2])], batch_first=True,"
        " padding_value=-1)\n"
        "scores = torch.randn(2, 3, 4)",
        "loss = torch.nn.CrossEntropyLoss()(scores.view(-1, 4), tags.view(-1))\nloss.item()")
    checks = isolated_run.diagnosis.first_checks
    reviewed(checks, isolated_run.diagnosis.avoid)
    assert checks[0].startswith("−1 among the targets, and the loss skips only "
                                "ignore_index=-100")
