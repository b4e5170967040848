"""A notebook in the shape of minGPT's sorting demo: it imports the `mingpt` package that
sits beside it (model, trainer, utils), trains through the package's Trainer (DataLoader
workers set to 0 in the notebook) and reads SORT_SEP from the environment: with SORT_SEP=1
the dataset puts a separator token between question and answer, and the vocabulary the
model is built with forgets it, so the first batch fails in the token embedding."""

from __future__ import annotations

import shutil
from pathlib import Path

SORT_GPT = [
    "%load_ext cudadiag",
    "import os\n"
    "import torch\n"
    "from torch.utils.data import Dataset\n"
    "from mingpt.utils import set_seed\n"
    "set_seed(3407)",
    "class SortDataset(Dataset):\n"
    '    """Sort the digits of a sequence: the model reads the digits, then writes them\n'
    '    sorted. With SORT_SEP=1 a separator token stands between the two."""\n'
    "\n"
    "    def __init__(self, split, length=6, num_digits=3):\n"
    "        assert split in {'train', 'test'}\n"
    "        self.split = split\n"
    "        self.length = length\n"
    "        self.num_digits = num_digits\n"
    "        self.separator = os.environ.get('SORT_SEP') == '1'\n"
    "\n"
    "    def __len__(self):\n"
    "        return 10000\n"
    "\n"
    "    def get_vocab_size(self):\n"
    "        return self.num_digits\n"
    "\n"
    "    def get_block_size(self):\n"
    "        return self.length * 2 - 1 + int(self.separator)\n"
    "\n"
    "    def __getitem__(self, idx):\n"
    "        inp = torch.randint(self.num_digits, size=(self.length,), dtype=torch.long)\n"
    "        sol = torch.sort(inp)[0]\n"
    "        parts = [inp, torch.tensor([self.num_digits])] if self.separator else [inp]\n"
    "        cat = torch.cat((*parts, sol), dim=0)\n"
    "        x = cat[:-1].clone()\n"
    "        y = cat[1:].clone()\n"
    "        y[:len(cat) - self.length - 1] = -1  # predict only the sorted digits\n"
    "        return x, y",
    "train_dataset = SortDataset('train')\n"
    "x, y = train_dataset[0]\n"
    "for a, b in zip(x, y):\n"
    "    print(int(a), int(b))",
    "from mingpt.model import GPT\n"
    "\n"
    "model_config = GPT.get_default_config()\n"
    "model_config.model_type = 'gpt-nano'\n"
    "model_config.vocab_size = train_dataset.get_vocab_size()\n"
    "model_config.block_size = train_dataset.get_block_size()\n"
    "model = GPT(model_config)",
    "from mingpt.trainer import Trainer\n"
    "\n"
    "train_config = Trainer.get_default_config()\n"
    "train_config.learning_rate = 5e-4  # the model is small: a large rate is fine\n"
    "train_config.max_iters = 2000\n"
    "train_config.num_workers = 0\n"
    "trainer = Trainer(train_config, model, train_dataset)",
    "def batch_end_callback(trainer):\n"
    "    if trainer.iter_num % 100 == 0:\n"
    "        print(f'iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}')\n"
    "\n"
    "trainer.add_callback('on_batch_end', batch_end_callback)\n"
    "trainer.run()",
]


def copy_mingpt(folder: Path) -> None:
    """The `mingpt` package beside the notebook, as a clone of the project leaves it."""
    shutil.copytree(Path(__file__).parent / "mingpt", folder / "mingpt",
                    ignore=shutil.ignore_patterns("__pycache__"))
