"""An image classifier trained the way public example scripts do it: argparse, a Dataset, a
DataLoader, epochs and batches. One label of the dataset is 10 for a 10-class model: the
loss's kernel fails at epoch 1, batch 3 (dataset index 57)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Digits(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 1, 8, 8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.labels[57] = 10  # a mislabelled sample: there are 10 classes, 0..9

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(F.relu(self.conv(x)).flatten(1))


def train(model, device, loader, optimizer, epoch, log_interval):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]"
                  f"\tLoss: {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser(description="digits")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--log-interval", type=int, default=1)
    parser.add_argument("--simulated", action="store_true",
                        help="run on cudadiag's simulated CUDA device (no GPU)")
    args = parser.parse_args()
    torch.manual_seed(1)
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # the dataset's order is fixed (shuffle off) so that index 57 is in epoch 1, batch 3
    train_set = Digits(64, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=False)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        train(model, device, loader, optimizer, epoch, args.log_interval)


if __name__ == "__main__":
    main()
