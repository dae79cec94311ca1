#!/usr/bin/env python3
"""The MobileNetV3-small training step of benchmarks/cpu_mobilenet_step.cpp in
PyTorch eager with torchvision (Debian's python3-torch 1.13 and
python3-torchvision 0.14): SGD with momentum, cross-entropy, in float32 or
under bfloat16 autocast (PyTorch 1.13 has no CPU GradScaler; bfloat16 needs
none), in NCHW or channels-last (--channels-last 1). Prints the time of each step in milliseconds, one per line."""
import argparse
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--mode", choices=["float32", "amp"], default="amp")
p.add_argument("--batch", type=int, default=64)
p.add_argument("--size", type=int, default=224)
p.add_argument("--classes", type=int, default=1000)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--channels-last", type=int, default=0, help="1: model and input in torch.channels_last")
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

model = torchvision.models.mobilenet_v3_small(num_classes=args.classes)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
crit = torch.nn.CrossEntropyLoss()
x = torch.randn(args.batch, 3, args.size, args.size)
if args.channels_last:
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
y = torch.randint(0, args.classes, (args.batch,))
amp = args.mode == "amp"


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = crit(model(x), y)
    loss.backward()
    opt.step()


for _ in range(args.warmup):
    step()
for _ in range(args.steps):
    t0 = time.perf_counter()
    step()
    print(f"{(time.perf_counter() - t0) * 1e3:.4f}", flush=True)
