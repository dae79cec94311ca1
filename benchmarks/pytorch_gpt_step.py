#!/usr/bin/env python3
"""The training step of benchmarks/gpt_step.cpp in PyTorch eager (Debian's
python3-torch 1.13): the GPT of examples/gpt/model.h (nanoGPT's model: token
and position embeddings, pre-LayerNorm blocks of causal self-attention with a
fused qkv Linear and an MLP Linear-GELU-Linear, a final LayerNorm, the head
tied to the token embedding), AdamW (betas 0.9/0.99, weight decay 0.1 on the
2-d weights), gradient clipping at 1.0, float32 or bfloat16 autocast.
PyTorch 1.13 has no F.scaled_dot_product_attention: the attention is written
out (q k^T / sqrt(d), causal mask, softmax, @ v), as nanoGPT's slow path. It
has no CPU GradScaler either, so the AMP step is plain autocast (as ours
for bf16).

Prints the time of each timed step in milliseconds, one per line, then
'#peak_rss_kb N', as the other CPU benchmarks' children do."""
import argparse
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--embd", type=int, default=128)
p.add_argument("--block", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--vocab", type=int, default=96)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--mode", choices=["float32", "amp"], default="amp")
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(args.embd, 3 * args.embd)
        self.c_proj = nn.Linear(args.embd, args.embd)
        self.register_buffer("mask", torch.tril(torch.ones(args.block, args.block, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, args.heads, C // args.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(args.embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(args.embd)
        self.c_fc = nn.Linear(args.embd, 4 * args.embd)
        self.c_proj = nn.Linear(4 * args.embd, args.embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.embd)
        self.wpe = nn.Embedding(args.block, args.embd)
        self.h = nn.ModuleList([Block() for _ in range(args.layers)])
        self.ln_f = nn.LayerNorm(args.embd)

    def forward(self, idx):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


model = GPT()
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.99))
x = torch.randint(0, args.vocab, (args.batch, args.block))
y = torch.randint(0, args.vocab, (args.batch, args.block))
amp = args.mode == "amp"


def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for _ in range(args.warmup):
    step()
times = []
for _ in range(args.steps):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1e3)
for t in times:
    print(f"{t:.4f}")
print(f"#peak_rss_kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
