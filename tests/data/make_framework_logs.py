"""Write the logs of tests/data/framework-logs/: a tiny Hugging Face Trainer and a tiny
Lightning job (built offline from configs, nothing downloaded) whose dataset holds label 3 at
index 45 for 3 classes, run as a user runs them, their stdout and stderr in one file.

    python tests/data/make_framework_logs.py trainer [simulated] > trainer.log 2>&1
    python tests/data/make_framework_logs.py lightning-tqdm|lightning-rich [simulated] > x 2>&1

`simulated`: under cudadiag.testing.simulated_cuda() (the CUDA kernel's assertion line and
its asynchronous error, on a machine without a GPU); without it the CPU's IndexError.
"""

import sys

import torch


class Labels(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (8,), generator=g),
                "labels": torch.tensor(3 if i == 45 else i % 3)}


def trainer():
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, vocab_size=64, num_labels=3)
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=8,
                             num_train_epochs=2, report_to=[], use_cpu=True,
                             save_strategy="no", logging_steps=1, seed=1)
    return Trainer(model=BertForSequenceClassification(config), args=args,
                   train_dataset=Labels()).train


def lightning(bar):
    import lightning as L
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.EmbeddingBag(64, 16)
            self.head = torch.nn.Linear(16, 3)

        def training_step(self, batch, batch_idx):
            logits = self.head(self.embed(batch["input_ids"]))
            loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(Labels(), batch_size=8, shuffle=True)
    progress = TQDMProgressBar() if bar == "tqdm" else RichProgressBar()
    fit = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                    callbacks=[progress], default_root_dir="out").fit
    return lambda: fit(Classifier(), loader)


if __name__ == "__main__":
    torch.manual_seed(0)
    job, *rest = sys.argv[1:]
    train = trainer() if job == "trainer" else lightning(job.rpartition("-")[2])
    if rest == ["simulated"]:
        from cudadiag.testing import simulated_cuda

        with simulated_cuda():
            train()
    else:
        train()
