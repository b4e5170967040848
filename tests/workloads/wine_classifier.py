"""A tabular classifier in the shape of the usual UCI wine example: the cultivar is the first
column of wine.data and is numbered 1, 2, 3; the model is sized from the number of distinct
labels (3), and the labels go to the loss as they are."""

import argparse
import csv

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def write_wine(path, n=60, seed=0):
    """wine.data as the repository ships it: class, then 13 measurements."""
    g = torch.Generator().manual_seed(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        for i in range(n):
            cultivar = 1 + i % 3
            features = (torch.randn(13, generator=g) + cultivar).tolist()
            writer.writerow([cultivar, *(f"{v:.3f}" for v in features)])


def load_wine(path):
    rows = list(csv.reader(open(path)))
    labels = torch.tensor([int(r[0]) for r in rows])
    features = torch.tensor([[float(v) for v in r[1:]] for r in rows])
    features = (features - features.mean(0)) / features.std(0)
    return features, labels


def main():
    parser = argparse.ArgumentParser(description="wine cultivars")
    parser.add_argument("--data", default="wine.data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--simulated", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    write_wine(args.data)
    x, y = load_wine(args.data)
    num_classes = len(torch.unique(y))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, num_classes)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        running = 0.0
        for features, labels in loader:
            features, labels = features.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(model(features), labels)
            loss.backward()
            optimizer.step()
            running += loss.item()
        print(f"epoch {epoch}: loss {running / len(loader):.4f}")


if __name__ == "__main__":
    main()
