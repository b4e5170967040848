"""A character-level MLP in the shape of the lecture notebooks: the characters of names.txt
are numbered from 1 ('.' is 0), and the lookup table and the output layer are written for 27
symbols ('.' and 26 letters). This names.txt also holds hyphenated names: a 28th symbol, so
'z' is numbered 27 and the first step's table lookup `C[X]` reads row 27 of a 27-row table."""

import argparse

import torch
import torch.nn.functional as F


def build_dataset(words, stoi, block_size=3):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = [*context[1:], ix]
    return torch.tensor(X), torch.tensor(Y)


def main():
    parser = argparse.ArgumentParser(description="character-level MLP")
    parser.add_argument("--data", default="names.txt")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--simulated", action="store_true")
    args = parser.parse_args()
    if args.simulated:
        from cudadiag.testing import simulated_cuda

        simulated_cuda().start()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    words = open(args.data).read().splitlines()
    chars = sorted(set("".join(words)))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    X, Y = build_dataset(words, stoi)
    X, Y = X.to(device), Y.to(device)
    g = torch.Generator().manual_seed(2147483647)
    C = torch.randn((27, 10), generator=g).to(device)
    W1 = (torch.randn((30, 200), generator=g) * 0.1).to(device)
    b1 = torch.zeros(200).to(device)
    W2 = (torch.randn((200, 27), generator=g) * 0.01).to(device)
    b2 = torch.zeros(27).to(device)
    parameters = [C, W1, b1, W2, b2]
    for p in parameters:
        p.requires_grad = True
    for step in range(args.steps):
        emb = C[X]
        h = torch.tanh(emb.view(-1, 30) @ W1 + b1)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Y)
        for p in parameters:
            p.grad = None
        loss.backward()
        for p in parameters:
            p.data += -0.1 * p.grad
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
