#!/usr/bin/env python3
"""The PyTorch side of benchmarks/layer_norm.cpp (PyTorch 1.13 at
/usr/bin/python3): F.layer_norm over the last dim of x [rows, n] with weight
and bias, forward only (no_grad) or forward + backward (x, weight and bias
require grad), all float32 or all bfloat16 (1.13 has no bfloat16 input with
float32 weight on the CPU). Prints one time in milliseconds per line."""
import argparse
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--rows", type=int, default=2048)
p.add_argument("--n", type=int, default=128)
p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
p.add_argument("--backward", type=int, default=1)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=8)
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

dt = torch.float32 if args.dtype == "float32" else torch.bfloat16
x = torch.randn(args.rows, args.n).to(dt).requires_grad_(bool(args.backward))
w = (torch.rand(args.n) + 0.5).to(dt).requires_grad_(bool(args.backward))
b = torch.randn(args.n).to(dt).requires_grad_(bool(args.backward))
g = torch.randn(args.rows, args.n).to(dt)


def step():
    if args.backward:
        x.grad = w.grad = b.grad = None
        F.layer_norm(x, (args.n,), w, b).backward(g)
    else:
        with torch.no_grad():
            F.layer_norm(x, (args.n,), w, b)


for _ in range(args.warmup):
    step()
times = []
for _ in range(args.steps):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1e3)
for t in times:
    print(f"{t:.4f}")
