"""Fit a linear classifier to the rows of a CSV file (features..., label) and save its
weights after every epoch.

    python train_options.py --data rows.csv --save model.pt --epochs 3
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description="fit a linear classifier to a CSV file")
parser.add_argument("--data", default="rows.csv", help="one row per sample: features, label")
parser.add_argument("--save", default="model.pt", help="where to write the weights")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--classes", type=int, default=3)
args = parser.parse_args()

with open(args.data) as f:
    rows = [line.strip().split(",") for line in f if line.strip()]
features = torch.tensor([[float(v) for v in row[:-1]] for row in rows])
labels = torch.tensor([int(row[-1]) for row in rows])
print(f"{len(rows)} rows, {features.shape[1]} features, {args.classes} classes")

model = nn.Linear(features.shape[1], args.classes)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for start in range(0, len(rows), args.batch_size):
        batch = slice(start, start + args.batch_size)
        loss = F.cross_entropy(model(features[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with open(args.save, "wb") as f:
        torch.save(model.state_dict(), f)
    print(f"epoch {epoch}: loss {loss.item():.3f}, weights saved to {args.save}")
