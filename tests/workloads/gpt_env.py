"""Train a GPT on a token stream. The model is GPT-2 small unless GPT_SMALL=1 (a laptop-sized
one for trying things out); FAULT=token corrupts one token of the stream at step 20 (a drill
for what a corrupted shard does); HF_TOKEN, when set, would push checkpoints to the Hub.

    GPT_SMALL=1 FAULT=token python gpt_env.py
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# GPT-2 small
n_layer = 12
n_head = 12
n_embd = 768
block_size = 1024
vocab_size = 50257
if os.environ.get("GPT_SMALL"):
    n_layer, n_head, n_embd = 2, 2, 32
    block_size, vocab_size = 16, 65

fault = os.getenv("FAULT")
hub_token = os.environ.get("HF_TOKEN")  # only used to push checkpoints
print(f"model: {n_layer} layers, {n_embd} wide, vocabulary {vocab_size}")


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer)
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.ln_f(x))


torch.manual_seed(1337)
model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(50):
    x = torch.randint(0, vocab_size, (8, block_size + 1))
    if fault == "token" and step == 20:
        x[3, 7] = vocab_size  # a token id one past the vocabulary
    logits = model(x[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, vocab_size), x[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
if hub_token:
    print("pushing the checkpoint to the Hub")
print("done")
