"""Two notebooks in the shapes of popular lecture notebooks, each with a data fault, and the
data files they read by relative path.

- `char_mlp`: a character-level MLP (a vocabulary built from names.txt, unseeded random
  minibatches, `for p in parameters: p.requires_grad = True`). The output layer is sized 26
  for a vocabulary of 27 ('.' and 26 letters): the first minibatch that holds a 'z' fails,
  after a few hundred steps.
- `curriculum`: a small classifier with a full-batch loop that redraws its output every step
  (`clear_output`), labels read from labels.csv. A curriculum admits harder samples as the
  margin threshold drops: the mislabelled sample (label 2 for 2 classes) joins at step 120.
"""

from __future__ import annotations

import random
from pathlib import Path

from nbformat.v4 import new_code_cell, new_notebook

SYLLABLES = ("ka", "lo", "mi", "an", "el", "ri", "sa", "to", "ne", "ha", "bo", "du", "fe",
             "gi", "ju", "ve", "wy", "xo", "qu", "ca", "pe", "ti")


def write_names(folder: Path, count: int = 600, with_z: int = 3, hyphenated: int = 0) -> Path:
    """names.txt: `count` made-up names, `with_z` of them holding a 'z' (the rare letter),
    `hyphenated` of them two names joined by a hyphen (a character the letters do not
    count)."""
    rng = random.Random(7)
    names = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
             for _ in range(count * 2)}
    names = sorted(names)[:count]
    for i in range(with_z):
        names[(i + 1) * count // (with_z + 1)] += "z"
    for i in range(hyphenated):
        at = (2 * i + 1) * count // (2 * hyphenated + 1)
        names[at] += "-" + names[at + 1]
    path = folder / "names.txt"
    path.write_text("\n".join(names) + "\n")
    return path


CHAR_MLP = [
    "%load_ext cudadiag",
    "import random\n"
    "import torch\n"
    "import torch.nn.functional as F\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()  # no GPU here: CPU tensors behave like a CUDA device",
    "words = open('names.txt').read().splitlines()\n"
    "print(len(words), 'names')",
    "chars = sorted(set(''.join(words)))\n"
    "stoi = {s: i + 1 for i, s in enumerate(chars)}\n"
    "stoi['.'] = 0\n"
    "itos = {i: s for s, i in stoi.items()}\n"
    "vocab_size = 26  # letters of the alphabet",
    "block_size = 3\n"
    "X, Y = [], []\n"
    "for w in words:\n"
    "    context = [0] * block_size\n"
    "    for ch in w + '.':\n"
    "        ix = stoi[ch]\n"
    "        X.append(context)\n"
    "        Y.append(ix)\n"
    "        context = context[1:] + [ix]\n"
    "X = torch.tensor(X)\n"
    "Y = torch.tensor(Y)\n"
    "print(X.shape, Y.shape)",
    "g = torch.Generator().manual_seed(2147483647)\n"
    "C = torch.randn((27, 10), generator=g)\n"
    "W1 = torch.randn((30, 200), generator=g) * 0.1\n"
    "b1 = torch.randn(200, generator=g) * 0.01\n"
    "W2 = torch.randn((200, vocab_size), generator=g) * 0.01\n"
    "b2 = torch.zeros(vocab_size)\n"
    "parameters = [C, W1, b1, W2, b2]\n"
    "print(sum(p.nelement() for p in parameters))",
    "for p in parameters:\n"
    "    p.requires_grad = True",
    "lossi = []\n"
    "for i in range(3000):\n"
    "    ix = torch.randint(0, X.shape[0], (32,))\n"
    "    emb = C[X[ix]]\n"
    "    h = torch.tanh(emb.view(-1, 30) @ W1 + b1)\n"
    "    logits = h @ W2 + b2\n"
    "    loss = F.cross_entropy(logits, Y[ix])\n"
    "    for p in parameters:\n"
    "        p.grad = None\n"
    "    loss.backward()\n"
    "    for p in parameters:\n"
    "        p.data += -0.1 * p.grad\n"
    "    lossi.append(loss.log10().item())\n"
    "print(loss.item())",
]


def write_labels(folder: Path) -> Path:
    """labels.csv: x0,x1,label for 40 points of two blobs; one label is 2."""
    rng = random.Random(3)
    rows = ["x0,x1,label"]
    for i in range(40):
        label = i % 2
        x0 = (1.5 if label else -1.5) + rng.gauss(0, 0.6)
        x1 = rng.gauss(0, 0.6)
        if i == 17:
            label, x0 = 2, 0.05  # a mislabelled point, near the boundary (a hard sample)
        rows.append(f"{x0:.4f},{x1:.4f},{label}")
    path = folder / "labels.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


CURRICULUM = [
    "%load_ext cudadiag",
    "import csv\n"
    "import torch\n"
    "import torch.nn.functional as F\n"
    "from IPython.display import clear_output\n"
    "from cudadiag.testing import simulated_cuda\n"
    "sim = simulated_cuda().start()",
    "rows = list(csv.DictReader(open('labels.csv')))\n"
    "x = torch.tensor([[float(r['x0']), float(r['x1'])] for r in rows])\n"
    "y = torch.tensor([int(r['label']) for r in rows])\n"
    "margin = x[:, 0].abs()  # distance to the boundary: small is hard",
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))\n"
    "opt = torch.optim.Adam(model.parameters(), lr=0.05)",
    "history = []\n"
    "for step in range(200):\n"
    "    threshold = 1.2 - step / 100  # the curriculum admits harder samples over time\n"
    "    keep = margin > threshold\n"
    "    logits = model(x[keep])\n"
    "    loss = F.cross_entropy(logits, y[keep])\n"
    "    opt.zero_grad()\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "    history.append(loss.item())\n"
    "    clear_output(wait=True)\n"
    "    print(f'step {step}: {int(keep.sum())} samples, loss {history[-1]:.4f}')",
]


def notebook(cells: list[str]):
    """A notebook of code cells, for nbclient."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [new_code_cell(source) for source in cells]
    return nb
