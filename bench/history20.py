"""A 20-cell notebook history with one faulty cell, for the minimizer's tests and benchmark:
a 4-class model gets the targets [0, 2, 4] in cell 17; cell 20 reads the loss (where CUDA
would report the error). Data preparation, logging and plotting cells are unrelated."""

from __future__ import annotations

FAULTY_CELL = 17


def history(simulated: bool) -> dict[int, str]:
    """Return {execution count: source}; `simulated` runs it on the simulated CUDA device."""
    device = ("from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()"
              if simulated else "device = 'cpu'")
    return {
        1: f"import math, json\nimport torch\nimport torch.nn.functional as F\n{device}",
        2: "config = {'lr': 0.1, 'epochs': 2, 'classes': 4}\nprint(json.dumps(config))",
        3: "torch.manual_seed(0)\nfeatures = torch.randn(64, 8)",
        4: "mean, std = features.mean(0), features.std(0)",
        5: "normalized = (features - mean) / std",
        6: "def describe(t):\n    return f'{tuple(t.shape)} {t.dtype}'",
        7: "print(describe(normalized))",
        8: "log = []",
        9: "model = torch.nn.Linear(8, 4)",
        10: "optimizer = torch.optim.SGD(model.parameters(), lr=config['lr'])",
        11: "print(sum(p.numel() for p in model.parameters()))",
        12: "scale = math.sqrt(8)",
        13: "log.append(('start', scale))",
        14: "train_labels = torch.arange(64) % config['classes']",
        15: "warmup = F.cross_entropy(model(normalized), train_labels)\nlog.append(warmup.item())",
        16: "batch = torch.randn(3, 8)\nprint(describe(batch))",
        17: "loss = F.cross_entropy(model(torch.randn(3, 8)), torch.tensor([0, 2, 4]))",
        18: "log.append(('batch', describe(batch)))",
        19: "summary = json.dumps(log[:1])",
        20: "print('loss', loss.item())",
    }
