"""What `cudadiag run` costs on clean training scripts, start-up included, against the same
script under plain `python` and under `CUDA_LAUNCH_BLOCKING=1 python` (what the method's
step 1 does by hand).

Two realistic scripts, written to a temporary folder: a tiny character-level GPT trained in
the lecture style (a model of many small ops per step: one Linear per attention head, masks,
softmax, layer norms) and an MLP classifier whose step is a few large matmuls. Each side runs
`--runs` times, the sides rotating which goes first, and the medians are compared: targets
<= 1.15 (small ops) and <= 1.05 (large ops) for `cudadiag run`, judged on wall time. Beside
it, the CPU time of each side's processes (user + system, all of them): on a machine shared
with other work, wall time also counts their turns, and the CPU ratio is the steadier figure.

    python bench/run_overhead.py [--runs 5] [--only small|large]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALL_OPS = '''\
"""A tiny character-level GPT, trained on a few lines of text (the lecture's model)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1337)
device = "cuda" if torch.cuda.is_available() else "cpu"
text = ("First Citizen: Before we proceed any further, hear me speak. "
        "All: Speak, speak. First Citizen: You are all resolved rather to die than to "
        "famish? All: Resolved. resolved. ") * 40
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]
vocab_size, block_size, batch_size = len(chars), 16, 16
n_embd, n_head, n_layer, max_iters, eval_interval = 32, 4, 2, 60, 30


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + block_size + 1] for i in ix])
    return x.to(device), y.to(device)


class Head(nn.Module):
    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        k, q = self.key(x), self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        return wei @ self.value(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, num_heads, head_size):
        super().__init__()
        self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa = MultiHeadAttention(n_head, n_embd // n_head)
        self.ffwd = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(),
                                  nn.Linear(4 * n_embd, n_embd))
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        return x + self.ffwd(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
        self.position_embedding_table = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        tok = self.token_embedding_table(idx)
        pos = self.position_embedding_table(torch.arange(T, device=device))
        logits = self.lm_head(self.ln_f(self.blocks(tok + pos)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    out = {}
    for split in ("train", "val"):
        losses = torch.zeros(5)
        for k in range(5):
            _, loss = model(*get_batch(split))
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range(max_iters):
    if it % eval_interval == 0:
        losses = estimate_loss(model)
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    xb, yb = get_batch("train")
    _, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
'''

LARGE_OPS = '''\
"""An MLP classifier on synthetic features: each step is a few large matmuls."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
features, classes, batch, steps = 1024, 10, 512, 12
X = torch.randn(8 * batch, features, device=device)
y = (X[:, :classes].argmax(dim=1)).to(device)
model = nn.Sequential(nn.Linear(features, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                      nn.Linear(2048, classes)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(steps):
    i = (step % 8) * batch
    loss = F.cross_entropy(model(X[i:i + batch]), y[i:i + batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
'''

SCRIPTS = {"small": ("tiny char-level GPT (many small ops)", SMALL_OPS, 1.15),
           "large": ("MLP classifier (large matmuls)", LARGE_OPS, 1.05)}


def cudadiag_command() -> list[str]:
    """The `cudadiag` console script beside this interpreter (what a user types), else the
    module."""
    script = Path(sys.executable).with_name("cudadiag")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cudadiag.cli"]


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system of the process and all it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "final loss" not in done.stdout:
        sys.exit(f"bench: {' '.join(command)} failed ({done.returncode}):\n"
                 f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def sides(script: Path, home: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    env = {**os.environ, "CUDADIAG_HOME": home}
    env.pop("CUDA_LAUNCH_BLOCKING", None)
    # the untimed first run writes the .pyc files a user's first run (or pip's install)
    # leaves: under PYTHONDONTWRITEBYTECODE an editable install compiled every module of
    # cudadiag again in each run, in both of its processes
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # one intra-op thread on every side unless told otherwise: on a shared machine of few
    # cores, small ops waiting for descheduled threads otherwise swamp what is measured
    env.setdefault("OMP_NUM_THREADS", "1")
    return {
        "python": ([sys.executable, script.name], env),
        "cudadiag run": ([*cudadiag_command(), "run", "--", sys.executable, script.name], env),
        "CUDA_LAUNCH_BLOCKING=1 python": ([sys.executable, script.name],
                                          {**env, "CUDA_LAUNCH_BLOCKING": "1"}),
    }


def measure(script: Path, home: str, runs: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU times of each side over `runs` rounds, each side leading in
    turn."""
    commands = sides(script, home)
    names = list(commands)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for name in names:  # one untimed run each: page cache, .pyc files
        timed(*commands[name], script.parent)
    for round_number in range(runs):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(*commands[name], script.parent))
    return {name: (statistics.median(w for w, _ in values),
                   statistics.median(c for _, c in values)) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=sorted(SCRIPTS))
    args = parser.parse_args()
    chosen = [args.only] if args.only else list(SCRIPTS)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{args.runs} runs of each side")
    with tempfile.TemporaryDirectory(prefix="cudadiag-bench-") as tmp:
        home = str(Path(tmp) / "home")
        for key in chosen:
            title, source, target = SCRIPTS[key]
            script = Path(tmp) / f"{key}_ops_train.py"
            script.write_text(source)
            medians = measure(script, home, args.runs)
            (plain, plain_cpu), (run, run_cpu) = medians["python"], medians["cudadiag run"]
            blocking, blocking_cpu = medians["CUDA_LAUNCH_BLOCKING=1 python"]
            verdict = "met" if run / plain <= target else "NOT met"
            print(f"{title}: python {plain:.2f} s, cudadiag run {run:.2f} s "
                  f"(x{run / plain:.3f}, target <= {target}: {verdict}), "
                  f"CUDA_LAUNCH_BLOCKING=1 python {blocking:.2f} s (x{blocking / plain:.3f})"
                  f"\n  CPU time: python {plain_cpu:.2f} s, cudadiag run {run_cpu:.2f} s "
                  f"(x{run_cpu / plain_cpu:.3f}), CUDA_LAUNCH_BLOCKING=1 python "
                  f"{blocking_cpu:.2f} s (x{blocking_cpu / plain_cpu:.3f})")
        shutil.rmtree(home, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
