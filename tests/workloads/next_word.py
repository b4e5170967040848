"""A next-word model trained one sentence at a time: each sentence becomes its word ids plus
an end-of-sentence id, the inputs are all ids but the last, the targets all but the first.
The vocabulary is counted (and the model sized) from the words of the corpus; `<eos>` is
given an id while the sentences are encoded, so it is one past the model's vocabulary. It is
always the last id of a sentence: it never reaches the embedding, only the loss as a target."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS = """the cat sat on the mat
a dog ran in the park
the bird sang a song
the sun set over the hill
a cat saw the bird""".splitlines()


class Vocab:
    def __init__(self, sentences):
        self.stoi = {}
        for sentence in sentences:
            for word in sentence.split():
                self.stoi.setdefault(word, len(self.stoi))

    def __len__(self):
        return len(self.stoi)

    def encode(self, sentence):
        ids = [self.stoi[w] for w in sentence.split()]
        return [*ids, self.stoi.setdefault("<eos>", len(self.stoi))]


class NextWord(nn.Module):
    def __init__(self, ntokens, dim=16):
        super().__init__()
        self.embed = nn.Embedding(ntokens, dim)
        self.rnn = nn.LSTM(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, ntokens)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)


def main():
    parser = argparse.ArgumentParser(description="next-word model")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--simulated", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    vocab = Vocab(CORPUS)
    ntokens = len(vocab)
    model = NextWord(ntokens).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        total = 0.0
        for sentence in CORPUS:
            ids = torch.tensor([vocab.encode(sentence)], device=device)
            inputs, targets = ids[:, :-1], ids[:, 1:]
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, ntokens), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / len(CORPUS):.3f}")


if __name__ == "__main__":
    main()
