#!/usr/bin/env python3
"""The CPU training step of benchmarks/cpu_train_step.cpp in PyTorch eager
(Debian's python3-torch): an MLP (Linear layers with a ReLU between each two),
CrossEntropyLoss, SGD, float32 or bfloat16 autocast. PyTorch 1.13 has no CPU
GradScaler, so the AMP step is plain autocast (ours adds a GradScaler).

Prints the time of each timed step in milliseconds, one per line, then
'#peak_rss_kb N' and '#minflt_per_step X' (minor page faults over the timed
steps / steps), as cpu_train_step's own children do."""
import argparse
import resource
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="784,1024,1024,10", help="in,hidden...,classes")
p.add_argument("--batch", type=int, default=256)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--warmup", type=int, default=8)
p.add_argument("--mode", choices=["float32", "amp"], default="amp")
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

sizes = [int(s) for s in args.sizes.split(",")]
layers = []
for i in range(len(sizes) - 1):
    if i > 0:
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
model = torch.nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
crit = torch.nn.CrossEntropyLoss()
x = torch.randn(args.batch, sizes[0])
y = torch.randint(0, sizes[-1], (args.batch,))
amp = args.mode == "amp"


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = crit(model(x), y)
    loss.backward()
    opt.step()


for _ in range(args.warmup):
    step()
before = resource.getrusage(resource.RUSAGE_SELF)
times = []
for _ in range(args.steps):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1e3)
after = resource.getrusage(resource.RUSAGE_SELF)
for t in times:
    print(f"{t:.4f}")
print(f"#peak_rss_kb {after.ru_maxrss}")
print(f"#minflt_per_step {(after.ru_minflt - before.ru_minflt) / max(1, args.steps):.2f}", flush=True)
