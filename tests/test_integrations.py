"""Training loops that run inside a library: a Hugging Face Trainer and a Lightning Trainer,
with cudadiag's callback passed explicitly, in a real IPython shell. A tiny BERT classifier
(built from its config, nothing downloaded) whose dataset holds label 3 at index 45 with
num_labels=3."""

from __future__ import annotations

import pytest

from cudadiag import incidents
from scenarios import run, unwrapped

DATASET = (
    "import torch, cudadiag\n"
    "class Labels(torch.utils.data.Dataset):\n"
    "    def __len__(self): return 64\n"
    "    def __getitem__(self, i):\n"
    "        g = torch.Generator().manual_seed(i)\n"
    "        return {'input_ids': torch.randint(0, 64, (8,), generator=g),\n"
    "                'labels': torch.tensor(3 if i == 45 else i % 3)}\n"
    "torch.manual_seed(0)"
)
HF_SETUP = (
    "from transformers import BertConfig, BertForSequenceClassification, Trainer, "
    "TrainingArguments\n"
    "config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,\n"
    "                    intermediate_size=37, vocab_size=64, num_labels=3)\n"
    "model = BertForSequenceClassification(config)\n"
    "args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=8,\n"
    "                         gradient_accumulation_steps=ACC, num_train_epochs=2,\n"
    "                         report_to=[], use_cpu=True, save_strategy='no',\n"
    "                         logging_strategy='no', disable_tqdm=True, seed=1)\n"
    "from cudadiag.integrations.transformers import Callback\n"
    "trainer = Trainer(model=model, args=args, train_dataset=Labels(), callbacks=[Callback()])"
)


def _hf(shell, tmp_path, accumulation=1):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    run(shell, DATASET)
    run(shell, HF_SETUP.replace("OUT", repr(str(tmp_path / "out")))
        .replace("ACC", str(accumulation)))
    result, cell = run(shell, "trainer.train()")
    assert result.error_in_exec is not None
    (incident,) = incidents()
    return incident, cell


def test_trainer_incident_names_step_epoch_dataset_index_and_num_labels(shell, tmp_path):
    incident, _ = _hf(shell, tmp_path)
    step, batch = incident.step, incident.batch
    assert step.framework == "transformers.Trainer" and step.epoch == 0
    assert step.global_step == step.iteration and step.last_completed == step.iteration - 1
    assert 45 in batch.indices and len(batch.indices) == 8
    labels = batch.tensor("batch['labels']")
    assert labels.max == 3 and labels.shape == [8]
    assert incident.model.num_labels == 3 and incident.model.vocab_size == 64
    assert incident.model.pad_token_id == 0
    from cudadiag.ui.render import render_text

    text = render_text(incident)
    assert f"transformers.Trainer: epoch 0, global step {step.global_step}" in text
    assert "config.num_labels = 3" in text
    assert "45" in text.split("dataset indices", 1)[1].splitlines()[0]
    assert labels.max_at == [45]
    (first, *_) = incident.diagnosis.first_checks
    assert first.startswith("The model has config.num_labels = 3, so its classes are 0..2; "
                            "labels reach 3 (dataset index 45).")
    assert "fix the mapping where the data is prepared" in first


def test_trainer_micro_step_under_gradient_accumulation(shell, tmp_path):
    incident, _ = _hf(shell, tmp_path, accumulation=2)
    step = incident.step
    assert step.accumulation == 2
    assert step.micro_step == step.iteration % 2
    assert step.global_step == step.iteration // 2
    assert 45 in incident.batch.indices


LIGHTNING = (
    "import lightning as L\n"
    "from cudadiag.integrations.lightning import Callback\n"
    "class Classifier(L.LightningModule):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.save_hyperparameters({'num_classes': 3})\n"
    "        self.embed = torch.nn.EmbeddingBag(64, 16)\n"
    "        self.head = torch.nn.Linear(16, 3)\n"
    "    def training_step(self, batch, batch_idx):\n"
    "        logits = self.head(self.embed(batch['input_ids']))\n"
    "        return torch.nn.functional.cross_entropy(logits, batch['labels'])\n"
    "    def configure_optimizers(self):\n"
    "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
    "loader = torch.utils.data.DataLoader(Labels(), batch_size=8, shuffle=True)\n"
    "trainer = L.Trainer(max_epochs=2, accelerator='cpu', callbacks=[Callback()],\n"
    "                    logger=False, enable_checkpointing=False, enable_progress_bar=False,\n"
    "                    enable_model_summary=False, default_root_dir=OUT)"
)


def _lightning(shell, tmp_path):
    pytest.importorskip("lightning", reason="the lightning extra is not installed")
    run(shell, DATASET)
    run(shell, LIGHTNING.replace("OUT", repr(str(tmp_path / "out"))))
    result, cell = run(shell, "trainer.fit(Classifier(), loader)")
    assert result.error_in_exec is not None
    (incident,) = incidents()
    return incident, cell


def test_lightning_incident_names_the_batch_the_step_ran_not_the_one_fetched_ahead(
        shell, tmp_path):
    incident, _ = _lightning(shell, tmp_path)
    step, batch = incident.step, incident.batch
    assert step.framework == "lightning.Trainer" and step.epoch == 0
    assert step.global_step == step.iteration
    assert 45 in batch.indices
    assert batch.tensor("batch['labels']").max == 3
    assert incident.model.num_labels == 3


def test_a_kernel_adds_the_callback_to_every_trainer_and_says_so(shell, tmp_path, capsys):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    run(shell, DATASET)
    setup = (HF_SETUP.replace("OUT", repr(str(tmp_path / "out"))).replace("ACC", "1")
             .replace(", callbacks=[Callback()]", ""))
    run(shell, setup)
    out = capsys.readouterr().out
    assert out.count("cudadiag: recording the steps of this transformers.Trainer") == 1
    assert "`%cudadiag attach off` stops it" in out
    run(shell, "trainer.train()")
    (incident,) = incidents()
    assert incident.step.framework == "transformers.Trainer" and 45 in incident.batch.indices

    run(shell, "%cudadiag attach off")
    assert "get no cudadiag callback" in capsys.readouterr().out
    run(shell, setup)
    assert "recording the steps" not in capsys.readouterr().out
    run(shell, "from cudadiag.integrations.transformers import Callback as C\n"
               "attached = [c for c in trainer.callback_handler.callbacks if isinstance(c, C)]")
    assert shell.user_ns["attached"] == []


def test_cuda_isolate_batch_last_finds_the_batch_the_trainer_ran(shell, tmp_path, capsys):
    incident, _ = _hf(shell, tmp_path)
    from cudadiag.capture.shell_state import recorded_batch

    step, batch = recorded_batch("last")
    assert step == incident.step.iteration
    assert batch["labels"].max().item() == 3
    assert "replaying step" in capsys.readouterr().out


@pytest.mark.slow
def test_cuda_isolate_batch_last_replays_one_trainer_step_not_the_training(
        shell, tmp_path, capsys):
    incident, _ = _hf(shell, tmp_path)
    run(shell, "%cuda_isolate --batch last")
    out = capsys.readouterr().out
    assert f"replaying step {incident.step.iteration} of watch 'transformers.Trainer.train'" in out
    assert "reproduced: same failure (index_out_of_bounds)" in out
    (isolated,) = [i for i in incidents() if i.run.mode == "isolated"]
    assert isolated.batch.replayed == f"only step {incident.step.iteration} was replayed"
    assert isolated.step.framework == "transformers.Trainer"
    assert isolated.step.global_step is None  # no training ran: only the replayed step
    assert isolated.op.precheck.startswith("aten::nll_loss_forward: target 3 at position")
    assert isolated.diagnosis.first_checks[0].startswith("The model has config.num_labels = 3")


TINY_BERT_AND_ARGS = """\
config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=37, vocab_size=64, num_labels=3)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, num_train_epochs=2,
                         report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, seed=1)
"""
"""The tiny BERT config and the Trainer's arguments both scripts train with (offline)."""
SCRIPT = """\
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from cudadiag.integrations.transformers import Callback
DATASET
""" + TINY_BERT_AND_ARGS + """\
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Labels(),
        callbacks=[Callback()]).train()
"""


@pytest.mark.slow
def test_a_script_run_with_cudadiag_run_names_step_epoch_index_and_num_labels(tmp_path):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    import sys

    from test_cli import cudadiag

    (tmp_path / "train.py").write_text(SCRIPT.replace("DATASET", DATASET))
    result = cudadiag("run", "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 1
    diagnosis = unwrapped(result.stderr).partition("cudadiag [")[2]
    assert "transformers.Trainer: epoch 0, global step" in diagnosis
    assert "The model has config.num_labels = 3, so its classes are 0..2; labels reach 3 " \
           "(dataset index 45)" in diagnosis


def test_watch_over_accelerates_prepared_loader_records_the_dataset_indices(shell):
    pytest.importorskip("accelerate", reason="accelerate is not installed")
    run(shell, DATASET)
    run(shell, "from accelerate import Accelerator\n"
               "accelerator = Accelerator(cpu=True)\n"
               "loader = accelerator.prepare(torch.utils.data.DataLoader(\n"
               "    Labels(), batch_size=8, shuffle=True))\n"
               "embed, head = torch.nn.EmbeddingBag(64, 16), torch.nn.Linear(16, 3)\n"
               "print(type(loader).__name__)")
    result, _ = run(shell, "for batch in cudadiag.watch(loader, name='prepared'):\n"
                           "    logits = head(embed(batch['input_ids']))\n"
                           "    torch.nn.functional.cross_entropy(logits, batch['labels'])")
    assert result.error_in_exec is not None
    (incident,) = incidents()
    assert incident.step.loader == "prepared"
    assert 45 in incident.batch.indices and len(incident.batch.indices) == 8
    assert incident.batch.tensor("batch['labels']").max_at == [45]


@pytest.mark.slow
def test_cuda_isolate_batch_last_replays_one_lightning_training_step(shell, tmp_path, capsys):
    incident, fit_cell = _lightning(shell, tmp_path)
    run(shell, "%cuda_isolate --batch last")
    out = capsys.readouterr().out
    assert f"replaying step {incident.step.iteration} of watch 'lightning.Trainer.fit'" in out
    assert incident.error.reported_at.cell == fit_cell - 1  # training_step's cell
    assert f"reproduced: same failure (index_out_of_bounds) as In[{fit_cell}]" in out
    (isolated,) = [i for i in incidents() if i.run.mode == "isolated"]
    assert isolated.batch.replayed == f"only step {incident.step.iteration} was replayed"
    assert isolated.op.precheck.startswith("aten::nll_loss_forward: target 3 at position")
    assert isolated.step.framework == "lightning.Trainer"


TOKENS = (
    "import torch, cudadiag\n"
    "class Tokens(torch.utils.data.Dataset):\n"
    "    def __len__(self): return 64\n"
    "    def __getitem__(self, i):\n"
    "        g = torch.Generator().manual_seed(i)\n"
    "        labels = torch.randint(0, 3, (16,), generator=g)\n"
    "        labels[0] = -100\n"
    "        if i == 45:\n"
    "            labels[10] = 3\n"
    "        return {'input_ids': torch.randint(0, 64, (16,), generator=g), 'labels': labels}\n"
)
TOKEN_SCRIPT = TOKENS + """\
from transformers import BertConfig, BertForTokenClassification, Trainer, TrainingArguments
from cudadiag.integrations.transformers import Callback
""" + TINY_BERT_AND_ARGS + """\
Trainer(model=BertForTokenClassification(config), args=args, train_dataset=Tokens(),
        callbacks=[Callback()]).train()
"""


@pytest.mark.slow
def test_a_token_classification_targets_flat_position_is_named_as_row_and_token(tmp_path):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    import sys

    from test_cli import cudadiag

    (tmp_path / "train.py").write_text(TOKEN_SCRIPT)
    result = cudadiag("run", "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 1
    (incident,) = incidents()
    row = incident.batch.indices.index(45)
    position = row * 16 + 10
    assert incident.op.precheck.startswith(
        f"aten::nll_loss_forward: target 3 at position {position} outside [0, 3)")
    found = incident.op.in_batch
    assert (found.tensor, found.index, found.dataset_index) == ("batch['labels']", [row, 10], 45)
    summary = unwrapped(result.stderr).partition("cudadiag [")[2].splitlines()[0]
    assert summary.endswith(f"; position {position} is batch['labels'][{row}, 10] "
                            f"(row {row}: dataset index 45)")
    from cudadiag.ui.render import render_text

    assert f"in the batch: batch['labels'][{row}, 10] (row {row}: dataset index 45)" in \
        render_text(incident)


@pytest.mark.slow
def test_a_flat_position_of_targets_no_batch_tensor_matches_is_not_placed(tmp_path):
    import sys

    from test_cli import cudadiag

    (tmp_path / "train.py").write_text(TOKENS + (
        "head = torch.nn.Linear(4, 3)\n"
        "for batch in cudadiag.watch(torch.utils.data.DataLoader(Tokens(), batch_size=8)):\n"
        "    every_other = batch['labels'].view(-1)[::2]\n"
        "    torch.nn.functional.cross_entropy(head(torch.randn(64, 4)), every_other)\n"))
    result = cudadiag("run", "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 1
    (incident,) = incidents()
    assert incident.op.precheck.startswith("aten::nll_loss_forward: target 3 at position")
    assert incident.op.in_batch is None
    assert "is batch[" not in incident.diagnosis.summary


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["", "off"])
def test_cudadiag_run_says_how_to_stop_adding_callbacks_in_a_script(tmp_path, switch,
                                                                     monkeypatch):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    import sys

    from test_cli import cudadiag

    script = SCRIPT.replace("DATASET", DATASET).replace(",\n        callbacks=[Callback()]", "")
    (tmp_path / "train.py").write_text(script)
    monkeypatch.setenv("CUDADIAG_ATTACH", switch)
    result = cudadiag("run", "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 1
    (incident,) = incidents()
    if switch == "off":
        assert "recording the steps" not in result.stdout + result.stderr
        assert incident.step is None or incident.step.framework != "transformers.Trainer"
    else:
        said = result.stdout + result.stderr
        assert "recording the steps of this transformers.Trainer" in said
        assert "CUDADIAG_ATTACH=off in the environment stops it" in said
        assert "%cudadiag" not in said
        assert incident.step.framework == "transformers.Trainer"
