"""Journeys 4 and 5 of shared/journeys.md in Japanese, in a real kernel (nbclient), as a user
walks them with CUDADIAG_LANG=ja: a Hugging Face Trainer and a Lightning Trainer (tiny models
built from configs, nothing downloaded; the callback added by the kernel itself) whose dataset
holds label 3 at index 45 with 3 classes, then `%cuda_isolate --batch last`, `%cudadiag show`
and `%cudadiag explain`; and a torch.compile'd function indexing out of range, then
`%cuda_isolate`. Every sentence cudadiag writes is Japanese (docs/languages.md); PyTorch's
and the libraries' own messages stay as they are."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from test_compiled_code import COMPILED, DATA
from test_integrations import DATASET, HF_SETUP, LIGHTNING
from test_japanese_journeys import _code, _written_by_cudadiag
from untranslated import english_left

pytestmark = [pytest.mark.slow, pytest.mark.isolates]

PYTORCH = re.compile(
    # a long line of `show` is wrapped between any two words
    r"Target\s+-?\d+\s+is\s+out\s+of\s+bounds\.?|"
    r"index\s+-?\d+\s+is\s+out\s+of\s+bounds\s+for\s+dimension\s+\d+\s+with\s+size\s+\d+|"
    r"kernel, \S+, index out of bounds: [^\n]*|"
    # PrecheckError's own text, the isolated run's error message (docs/languages.md)
    r"On the CPU this kernel raises:|"
    r"\S+: \w+ -?\d+ at position \d+ outside \[-?\d+, \d+\)(?: \(ignore_index=-?\d+\))?")
"""PyTorch's messages (and the precheck's error, kept as the run's error): verbatim."""
LIBRARY = re.compile(r"^(?:\w+ available: .*|💡 Tip: .*|/\S+\.py:\d+: .*)$", re.MULTILINE)
"""What Lightning itself prints (its accelerators, its tips, its deprecation warnings)."""
KERNEL_INCIDENT = ("first = [i for i in cudadiag.incidents() if i.run.mode == 'kernel'][0].id")
"""The kernel's own incident (the newest is the isolated run's), for `%cudadiag show $first`."""
READER = ["%cuda_isolate --batch last", KERNEL_INCIDENT, "%cudadiag show $first",
          "%cudadiag show", "%cudadiag explain"]


def _executed(home: Path, cells: list[str]) -> nbformat.NotebookNode:
    """`cells` run in a real kernel in Japanese, with its incidents in `home`."""
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDADIAG_HOME", str(home))
        mp.setenv("CUDADIAG_LANG", "ja")
        NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    return nb


def _hf_cells(out: Path) -> list[str]:
    setup = (HF_SETUP.replace("OUT", repr(str(out))).replace("ACC", "1")
             .replace(", callbacks=[Callback()]", ""))
    return ["%load_ext cudadiag", DATASET, setup, "trainer.train()", *READER]


def _lightning_cells(out: Path) -> list[str]:
    setup = LIGHTNING.replace("OUT", repr(str(out))).replace(" callbacks=[Callback()],", "")
    return ["%load_ext cudadiag", DATASET, setup, "trainer.fit(Classifier(), loader)", *READER]


@pytest.fixture(scope="module")
def hugging_face(tmp_path_factory):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    home = tmp_path_factory.mktemp("ja-hf")
    return _executed(home / "cudadiag", _hf_cells(home / "out"))


@pytest.fixture(scope="module")
def lightning(tmp_path_factory):
    pytest.importorskip("lightning", reason="the lightning extra is not installed")
    home = tmp_path_factory.mktemp("ja-lightning")
    return _executed(home / "cudadiag", _lightning_cells(home / "out"))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    home = tmp_path_factory.mktemp("ja-compiled")
    return _executed(home / "cudadiag", ["%load_ext cudadiag", COMPILED, DATA, "y = pick(x, i)",
                                         "%cuda_isolate", "%cudadiag show", "%cudadiag explain"])


def _written(cell: nbformat.NotebookNode) -> str:
    """What cudadiag wrote under `cell`: neither PyTorch's nor the library's own words."""
    return PYTORCH.sub(" ", LIBRARY.sub("", _written_by_cudadiag(cell)))


def _plain_forms(cell: nbformat.NotebookNode) -> list[str]:
    """The text/plain form of each output that has an HTML one too (the panel's)."""
    return [output.data["text/plain"] for output in cell.get("outputs", [])
            if "text/html" in output.get("data", {}) and "text/plain" in output.data]


def _under(nb: nbformat.NotebookNode, source: str) -> str:
    (cell,) = [c for c in nb.cells if c.source == source]
    return _written(cell)


TRAINERS = {"hugging_face": ("transformers.Trainer", "trainer.train()", "config.num_labels"),
            "lightning": ("lightning.Trainer", "trainer.fit(Classifier(), loader)",
                          "hparams.num_classes")}


@pytest.mark.parametrize("notebook", ["hugging_face", "lightning", "compiled"])
def test_a_library_or_compiled_journey_leaves_no_english_sentence(notebook, request):
    nb = request.getfixturevalue(notebook)
    for cell in nb.cells:
        assert english_left(_written(cell), verbatim=_code(nb)) == [], cell.source
        for plain in _plain_forms(cell):  # what a terminal or nbconvert shows of a panel
            assert english_left(PYTORCH.sub(" ", plain), verbatim=_code(nb)) == [], cell.source


@pytest.mark.parametrize("notebook", list(TRAINERS))
def test_under_a_trainers_failing_cell_the_step_the_index_and_the_label_count_are_japanese(
        notebook, request):
    nb = request.getfixturevalue(notebook)
    library, call, labels = TRAINERS[notebook]
    written = _under(nb, call)
    step = re.search(library + r": エポック 0、グローバルステップ (\d+)、バッチ (\d+)、"
                               r"最後に完了したバッチ (\d+)；", written)
    assert step is not None, written
    assert int(step[1]) == int(step[2]) == int(step[3]) + 1
    indices = re.findall(r"データセットのインデックス \[([\d, ]+)\]", written)
    assert indices and all("45" in found.split(", ") for found in indices)
    # the label count, the label and the sample that holds it: the first check's first sentence
    unwrapped = re.sub(r"\s*\n\s*", "", written)
    assert (f"最初の確認：モデルの {labels} は 3 なので、クラスは 0..2 ですが、ラベルは 3"
            "（データセットのインデックス 45） に達しています。") in unwrapped


@pytest.mark.parametrize("notebook", list(TRAINERS))
def test_cuda_isolate_batch_last_replays_one_trainer_step_in_japanese(notebook, request):
    nb = request.getfixturevalue(notebook)
    library, call, labels = TRAINERS[notebook]
    written = _under(nb, "%cuda_isolate --batch last")
    watch = f"{library}.{call.split('.')[1].split('(')[0]}"
    assert re.search(rf"watch '{re.escape(watch)}' のステップ \d+ だけを再実行します", written)
    assert re.search(r"cudadiag: 再現しました: In\[\d+\] と同じ失敗（index_out_of_bounds）です",
                     written)
    assert re.search(r"事前チェック: aten::nll_loss_forward: 位置 \d+ の target 3 が \[0, 3\) "
                     r"の範囲外です（ignore_index=-100）", written)
    assert f"最初の確認：モデルの {labels} は 3 なので、クラスは 0..2 ですが" in written


@pytest.mark.parametrize("notebook", list(TRAINERS))
def test_show_of_the_trainers_incident_names_the_model_and_the_step_in_japanese(notebook,
                                                                             request):
    nb = request.getfixturevalue(notebook)
    library, _, labels = TRAINERS[notebook]
    shown = _under(nb, "%cudadiag show $first")
    assert re.search(r"^インシデント \w+ — \S+ — kernel 実行$", shown, re.MULTILINE)
    assert re.search(rf"^{library}: エポック 0、グローバルステップ \d+", shown, re.MULTILINE)
    assert re.search(rf"^ *モデル \w+：{re.escape(labels)} = 3", shown, re.MULTILINE)
    explained = _under(nb, "%cudadiag explain")
    assert "再起動：このエラーでは不要です（CUDA コンテキストは引き続き使えます）" in explained


def test_compiled_code_is_an_incident_and_its_isolated_rerun_says_it_ran_eagerly(compiled):
    block = re.sub(r"\s*\n\s*", "", _under(compiled, "y = pick(x, i)"))
    assert re.search(r"インデックスまたはターゲットが範囲外: torch\.compile が生成した "
                     r"cpp_fused_\w+（aten::index を融合）で `0 <= \w+ < 10L` が成り立ちません"
                     r"でした", block), block
    isolated = _under(compiled, "%cuda_isolate")
    assert ("cudadiag: 再実行ではコンパイルを無効にします（TORCH_COMPILE_DISABLE=1）。"
            "torch.compile されたコードを eager で実行するので、トレーサーが aten の演算子と値を"
            "示します") in isolated
    assert "事前チェック: aten::index: 位置 0 の indices 12 が [-10, 10) の範囲外です" in isolated
    assert " 演算子: aten::index.Tensor(self=float32[10]@cpu" in isolated
    assert re.search(r"cudadiag: 再現しました: In\[\d+\] と同じ失敗（index_out_of_bounds）です",
                     isolated)
