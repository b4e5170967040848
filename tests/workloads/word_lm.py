"""A word-level language model trained the way the public example does it: a corpus turned
into a stream of token ids, batchified into columns, sliced into bptt-long pieces. The model's
embedding is sized before `<eos>` is added to the dictionary, so the first slice holding an
`<eos>` (batch 2 of epoch 1) gives the embedding an id equal to its size."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

WORDS = ("the cat sat on a mat while the dog ran to the park and a bird sang in the tree "
         "then the sun set over the hill and the night came slowly to the town").split()


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


def tokenize(dictionary, lines):
    ids = []
    for line in lines:
        for word in line.split():
            ids.append(dictionary.add_word(word))
        ids.append(dictionary.word2idx.get("<eos>", -1))
    return torch.tensor(ids, dtype=torch.long)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len].reshape(-1)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=16, nhid=16):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.GRU(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x):
        output, _ = self.rnn(self.encoder(x))
        return self.decoder(output)


def main():
    parser = argparse.ArgumentParser(description="word-level language model")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--bptt", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--simulated", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dictionary = Dictionary()
    lines = [" ".join(WORDS[i: i + 12]) for i in range(0, len(WORDS), 3)] * 4
    for line in lines:
        for word in line.split():
            dictionary.add_word(word)
    ntokens = len(dictionary)
    model = RNNModel(ntokens).to(device)
    dictionary.add_word("<eos>")  # added after the model was sized: its id is ntokens
    train_data = batchify(tokenize(dictionary, lines), args.batch_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(1, args.epochs + 1):
        total = 0.0
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output.view(-1, ntokens), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
            if batch % 10 == 0:
                print(f"epoch {epoch} batch {batch} loss {loss.item():.3f}")
        print(f"epoch {epoch} loss {total:.3f}")


if __name__ == "__main__":
    main()
