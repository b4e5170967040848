"""Which batch tensor `cudadiag show` judges against the failing operator's valid range: the
one the operator read its offending value from (`batch['labels']` of a classifier whose
label 3 is out of [0, 3)), not another integer tensor whose values happen to leave that range
(`batch['input_ids']`, token ids up to the vocabulary's 63)."""

from __future__ import annotations

import sys

import pytest

from cudadiag import incidents
from test_cli import cudadiag

pytestmark = pytest.mark.slow

LOOP = """\
import torch, cudadiag
class Labels(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {'input_ids': torch.randint(0, 64, (8,), generator=g),
                'labels': torch.tensor(3 if i == 45 else i % 3)}
torch.manual_seed(0)
embed, head = torch.nn.EmbeddingBag(64, 16), torch.nn.Linear(16, 3)
for batch in cudadiag.watch(torch.utils.data.DataLoader(Labels(), batch_size=8)):
    loss = torch.nn.functional.cross_entropy(head(embed(batch['input_ids'])), batch['labels'])
"""
"""A plain loop over dict batches: token ids 0..63 beside class labels 0..2, one label 3."""


def batch_section(tmp_path, script: str) -> str:
    """`cudadiag run` the script (it fails), then `cudadiag show` its incident: the Batch
    section, its wrapped lines joined."""
    (tmp_path / "train.py").write_text(script)
    ran = cudadiag("run", "--", sys.executable, "train.py", cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr[-3000:]
    (incident,) = incidents()
    assert incident.diagnosis.details["valid_range"] == [0, 3]
    shown = cudadiag("show", incident.id, cwd=tmp_path).stdout
    return " ".join(shown.split("\nBatch\n", 1)[1].split("\n\n", 1)[0].split())


def test_show_flags_and_draws_the_labels_not_the_token_ids_of_a_plain_loop(tmp_path):
    batch = batch_section(tmp_path, LOOP)
    assert "flags: batch['labels']: values 0..3 outside [0, 3) step 5" in batch
    assert "batch['input_ids']: values" not in batch
    assert ("picture: batch['labels']: values against the valid range [0, 3); outside: 3 ×1; "
            "3 at position 5 is outside the valid range (aten::nll_loss_forward, argument "
            "target)") in batch


def trainer_script(library: str) -> str:
    """The Hugging Face Trainer's (a tiny BERT from its config) or Lightning's training of
    the same dataset, as a script."""
    from test_integrations import DATASET, LIGHTNING, SCRIPT

    pytest.importorskip(library, reason=f"the {library} extra is not installed")
    if library == "transformers":
        return SCRIPT.replace("DATASET", DATASET)
    return (DATASET + "\n" + LIGHTNING.replace("OUT", repr("out"))
            + "\ntrainer.fit(Classifier(), loader)\n")


@pytest.mark.parametrize("library", ["transformers", "lightning"])
def test_show_flags_and_draws_the_labels_a_library_trainer_passed_to_the_loss(tmp_path,
                                                                              library):
    batch = batch_section(tmp_path, trainer_script(library))
    assert "flags: batch['labels']: values 0..3 outside [0, 3)" in batch
    assert "batch['input_ids']: values" not in batch
    assert "picture: batch['labels']: values against the valid range [0, 3); outside: 3 ×1" \
        in batch


def test_under_the_failing_cell_the_labels_are_drawn_before_the_range_is_known(shell):
    from cudadiag.ui.render import render_text
    from scenarios import run
    from test_integrations import DATASET

    run(shell, "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, DATASET + "\nembed = torch.nn.EmbeddingBag(64, 16).cuda()\n"
                         "head = torch.nn.Linear(16, 3).cuda()")
    result, _ = run(shell, "for batch in cudadiag.watch(torch.utils.data.DataLoader(\n"
                           "        Labels(), batch_size=8)):\n"
                           "    logits = head(embed(batch['input_ids'].cuda()))\n"
                           "    loss = torch.nn.functional.cross_entropy(logits,\n"
                           "                                             batch['labels'].cuda())\n"
                           "    print(loss.item())")
    assert result.error_in_exec is not None
    (incident,) = incidents()
    assert incident.run.mode == "kernel" and "valid_range" not in incident.diagnosis.details
    assert incident.batch.tensor("batch['input_ids']").counts  # both could be drawn
    text = render_text(incident)
    assert "picture: batch['labels']: values in the batch: 0 ×1, 1 ×3, 2 ×3, 3 ×1" in text
    assert "batch['input_ids']: values in the batch" not in text
