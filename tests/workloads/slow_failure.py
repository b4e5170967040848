"""Train on shards fetched one by one from network storage (slow: each takes a while to
arrive), then on their rows; shard 5 holds a label past the last class."""

import time

import torch
import torch.nn.functional as F

NUM_CLASSES = 4


def fetch_shard(i):
    time.sleep(0.6)  # network storage: the transfer, not the computing, takes the time
    g = torch.Generator().manual_seed(i)
    labels = torch.randint(0, NUM_CLASSES, (32,), generator=g)
    if i == 5:
        labels[17] = NUM_CLASSES  # the corrupted shard
    return torch.randn(32, 10, generator=g), labels


torch.manual_seed(0)
model = torch.nn.Linear(10, NUM_CLASSES)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for shard in range(8):
    x, y = fetch_shard(shard)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"shard {shard}: loss {loss.item():.3f}")
