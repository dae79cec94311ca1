#!/usr/bin/env python3
"""The CPU training step of benchmarks/cpu_train_step.cpp in PyTorch eager
(Debian's python3-torch): float32, and bfloat16 autocast with a GradScaler
(as the AMP tutorial writes it; on the CPU the scaler is a no-op wrapper in
PyTorch 1.13, which has no CPU GradScaler, so plain steps are timed).

Prints the time of each step in milliseconds, one per line."""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--mode", choices=["float32", "amp"], default="amp")
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

B, IN, H, C = 256, 784, 1024, 10
model = torch.nn.Sequential(torch.nn.Linear(IN, H), torch.nn.ReLU(), torch.nn.Linear(H, H), torch.nn.ReLU(),
                            torch.nn.Linear(H, C))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
crit = torch.nn.CrossEntropyLoss()
x = torch.randn(B, IN)
y = torch.randint(0, C, (B,))


def step(amp):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = crit(model(x), y)
    loss.backward()
    opt.step()


amp = args.mode == "amp"
for _ in range(8):
    step(amp)
for _ in range(args.steps):
    t0 = time.perf_counter()
    step(amp)
    print(f"{(time.perf_counter() - t0) * 1e3:.4f}", flush=True)
