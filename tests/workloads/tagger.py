"""A part-of-speech tagger on padded batches: sentences of different lengths are padded with
pad_sequence, the words with id 0 (the embedding's padding_idx), the tags with -1; the loss
is nn.CrossEntropyLoss() with its defaults."""

import argparse

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence

DATA = [
    ("the cat sat", "DET NOUN VERB"),
    ("a dog ran home", "DET NOUN VERB NOUN"),
    ("birds sing", "NOUN VERB"),
    ("the old man saw a bird", "DET ADJ NOUN VERB DET NOUN"),
    ("dogs bark", "NOUN VERB"),
    ("a small cat slept", "DET ADJ NOUN VERB"),
]


def build_index(items):
    index = {}
    for item in items:
        for token in item.split():
            index.setdefault(token, len(index) + 1)  # 0 is the padding id
    return index


class Tagger(nn.Module):
    def __init__(self, nwords, ntags, dim=16):
        super().__init__()
        self.embed = nn.Embedding(nwords, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * dim, ntags)

    def forward(self, words):
        h, _ = self.rnn(self.embed(words))
        return self.out(h)


def batches(data, words, tags, size):
    for start in range(0, len(data), size):
        chunk = data[start:start + size]
        x = [torch.tensor([words[w] for w in s.split()]) for s, _ in chunk]
        y = [torch.tensor([tags[t] - 1 for t in t_.split()]) for _, t_ in chunk]
        yield (pad_sequence(x, batch_first=True, padding_value=0),
               pad_sequence(y, batch_first=True, padding_value=-1))


def main():
    parser = argparse.ArgumentParser(description="POS tagger")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--simulated", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    words = build_index(s for s, _ in DATA)
    tags = build_index(t for _, t in DATA)
    model = Tagger(len(words) + 1, len(tags)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for x, y in batches(DATA, words, tags, args.batch_size):
            x, y = x.to(device), y.to(device)
            scores = model(x)
            loss = criterion(scores.view(-1, scores.size(-1)), y.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
