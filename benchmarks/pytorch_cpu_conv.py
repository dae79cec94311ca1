#!/usr/bin/env python3
"""The PyTorch side of benchmarks/cpu_conv.cpp (PyTorch 1.13, torchvision 0.14
at /usr/bin/python3).

  --shapes: prints the distinct conv layers of torchvision's
    mobilenet_v3_small at 224x224 (found with forward hooks), one per line:
    in_channels out_channels kernel stride padding groups H W bias
  otherwise: times conv2d forward + backward for each shape given with
    --shape (same fields, comma separated), float32 or bfloat16 autocast,
    and prints "index milliseconds" per step."""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--shapes", action="store_true")
p.add_argument("--shape", action="append", default=[])
p.add_argument("--mode", choices=["float32", "amp"], default="float32")
p.add_argument("--steps", type=int, default=5)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)

if args.shapes:
    import torchvision

    model = torchvision.models.mobilenet_v3_small()
    seen = []

    def hook(m, inp, out):
        x = inp[0]
        key = (m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0], m.groups, x.shape[2],
               x.shape[3], int(m.bias is not None))
        if key not in seen:
            seen.append(key)

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    for key in seen:
        print(" ".join(str(v) for v in key))
    raise SystemExit(0)

torch.manual_seed(0)
layers = []
for s in args.shape:
    cin, cout, k, st, pad, g, h, w, bias = (int(v) for v in s.split(","))
    conv = torch.nn.Conv2d(cin, cout, k, st, pad, groups=g, bias=bool(bias))
    x = torch.randn(args.batch, cin, h, w, requires_grad=cin != 3)  # the stem's input needs no gradient
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode == "amp"):
        y = conv(x)
    layers.append((conv, x, torch.randn_like(y)))


def step(conv, x, g):
    conv.zero_grad(set_to_none=True)
    x.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode == "amp"):
        y = conv(x)
    y.backward(g)


# every layer once per step, so a burst of load elsewhere hits all shapes alike
for _ in range(2):
    for conv, x, g in layers:
        step(conv, x, g)
for _ in range(args.steps):
    for i, (conv, x, g) in enumerate(layers):
        t0 = time.perf_counter()
        step(conv, x, g)
        print(f"{i} {(time.perf_counter() - t0) * 1e3:.4f}", flush=True)
