#!/usr/bin/env python3
"""The PyTorch side of the GPU benchmarks (gpu_gemm, gpu_elementwise,
gpu_mlp_step run it as a child process after their own variants, with the
same shapes and the same timing method).

Prints `RESULT key value` lines (milliseconds unless the key says otherwise)
and informational lines; the C++ benchmark prints the two side by side.

  python3 benchmarks/pytorch_gpu.py gemm --n 8192 --iters 20 --warmup 5
  python3 benchmarks/pytorch_gpu.py add --log2n 28 --iters 20 --warmup 3
  python3 benchmarks/pytorch_gpu.py mlp --model seed --steps 200 --warmup 20
  python3 benchmarks/pytorch_gpu.py mlp --model large --steps 45 --warmup 10
  python3 benchmarks/pytorch_gpu.py mobilenet --batch 256 --size 224 --steps 20 --warmup 5

`--device cpu` runs the same code on the CPU with host timers (a smoke test
of this script on a machine without a GPU; give it small sizes)."""
import argparse
import statistics
import sys
import time

import torch


def result(key, value):
    print(f"RESULT {key} {value:.6f}", flush=True)


class Timer:
    """CUDA events on the current stream (on the CPU: the host clock)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.event = torch.cuda.Event(enable_timing=True)

    def record(self):
        if self.cuda:
            self.event.record()
        else:
            self.t = time.perf_counter()

    def since(self, start):  # milliseconds; both recorded and completed
        if self.cuda:
            return start.event.elapsed_time(self.event)
        return (self.t - start.t) * 1e3


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_each(device, warmup, iters, fn):
    """fn() `warmup` times, then `iters` times each between its own events."""
    for _ in range(warmup):
        fn()
    starts = [Timer(device) for _ in range(iters)]
    stops = [Timer(device) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        stops[i].record()
    sync(device)
    return [stops[i].since(starts[i]) for i in range(iters)]


def bench_gemm(args, device):
    # float32 accumulation in every GEMM, as halfgrad's: no reduced-precision
    # split-K reductions (they are allowed by default in PyTorch).
    # (Older versions lack one flag or both; their getattr raises AssertionError.)
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        try:
            setattr(torch.backends.cuda.matmul, flag, False)
        except (AssertionError, AttributeError):
            print(f"(torch.backends.cuda.matmul.{flag} is not in this PyTorch)", flush=True)
    n = args.n
    base = torch.randn(n, n, device=device)
    base_b = torch.tanh(base)
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        if device.type == "cpu" and dtype == torch.float16:
            continue  # (smoke test: old CPU builds have no float16 matmul)
        a, b = base.to(dtype), base_b.to(dtype)
        ms = time_each(device, args.warmup, args.iters, lambda: torch.matmul(a, b))
        result(f"gemm.{name}.ms", statistics.median(ms))
        del a, b


def bench_add(args, device):
    n = 1 << args.log2n
    a = torch.randn(n, device=device, dtype=torch.float16)
    b = torch.randn(n, device=device, dtype=torch.float16) * 0.5
    result("add.ms", statistics.median(time_each(device, args.warmup, args.iters, lambda: torch.add(a, b))))
    dst = torch.empty_like(a)
    result("copy.ms", statistics.median(time_each(device, args.warmup, args.iters, lambda: dst.copy_(a))))


def make_scaler(device, enabled):
    if device.type != "cuda":
        enabled = False
    amp_scaler = getattr(torch.amp, "GradScaler", None)
    if amp_scaler is not None:
        return amp_scaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def bench_mlp(args, device):
    if args.model == "seed":
        widths, batch = [10, 100, 10], 100
    else:
        widths, batch = [4096] * 5, 8192
    if args.widths:  # smaller shapes for a smoke test
        widths = [int(w) for w in args.widths.split(",")]
    if args.batch:
        batch = args.batch
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, widths[0], device=device)
    y = torch.randint(0, widths[-1], (batch,), device=device)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16

    def make_step(amp):
        scaler = make_scaler(device, amp)

        def step(ev=None):
            if ev:
                ev[0].record()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                loss = crit(model(x), y)
            if ev:
                ev[1].record()
            scaled = scaler.scale(loss)
            if ev:
                ev[2].record()
            scaled.backward()
            if ev:
                ev[3].record()
            scaler.step(opt)
            scaler.update()
            if ev:
                ev[4].record()
            return loss

        return step

    if args.model == "seed":
        # Each step on the host clock up to a device sync, as gpu_mlp_step.
        step = make_step(True)
        for _ in range(args.warmup):
            step()
        sync(device)
        ms = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            loss = step()
            sync(device)
            ms.append((time.perf_counter() - t0) * 1e3)
        result("mlp.amp.synced_ms", statistics.median(ms))
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        sync(device)
        result("mlp.amp.pipelined_ms", (time.perf_counter() - t0) * 1e3 / args.steps)
        result("mlp.amp.loss", loss.item())
        return

    # large: events per step, blocks interleaved, as gpu_mlp_step.
    blocks = 3
    amp_block = max(1, args.steps // blocks)
    fp32_block = max(1, amp_block // 5)
    variants = {"amp": (make_step(True), amp_block), "fp32": (make_step(False), fp32_block)}
    times = {k: {"step": [], "scale": [], "tail": []} for k in variants}
    losses = {}
    for k, (step, _) in variants.items():
        for _ in range(args.warmup if k == "amp" else 2):
            step()
    sync(device)
    for _ in range(blocks):
        for k, (step, n) in variants.items():
            evs = [[Timer(device) for _ in range(5)] for _ in range(n)]
            for ev in evs:
                losses[k] = step(ev)
            sync(device)
            for ev in evs:
                times[k]["step"].append(ev[4].since(ev[0]))
                times[k]["scale"].append(ev[2].since(ev[1]))
                times[k]["tail"].append(ev[4].since(ev[3]))
    for k in variants:
        result(f"mlp.{k}.step_ms", statistics.median(times[k]["step"]))
        result(f"mlp.{k}.scale_ms", statistics.median(times[k]["scale"]))
        result(f"mlp.{k}.tail_ms", statistics.median(times[k]["tail"]))
        result(f"mlp.{k}.loss", losses[k].item())


def bench_mobilenet(args, device):
    """torchvision's mobilenet_v3_small training step (SGD momentum 0.9), float32
    and float16 autocast + GradScaler, events around each step, blocks interleaved;
    NCHW, or channels-last with --channels-last 1."""
    try:
        import torchvision
    except ImportError:
        print("torchvision is not installed: no PyTorch numbers", flush=True)
        sys.exit(1)
    torch.manual_seed(0)
    batch, size = args.batch or 256, args.size
    model = torchvision.models.mobilenet_v3_small(num_classes=1000).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, size, size, device=device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16

    def make_step(amp):
        scaler = make_scaler(device, amp)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                loss = crit(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        return step

    steps = {"amp": make_step(True), "fp32": make_step(False)}
    times = {k: [] for k in steps}
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    sync(device)
    blocks = 2
    for _ in range(blocks):
        for k, step in steps.items():
            times[k] += time_each(device, 0, max(1, args.steps // blocks), step)
    for k in steps:
        ms = statistics.median(times[k])
        result(f"mobilenet.{k}.step_ms", ms)
        result(f"mobilenet.{k}.images_per_s", batch * 1e3 / ms)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", choices=["gemm", "add", "mlp", "mobilenet"])
    p.add_argument("--size", type=int, default=224, help="image side (mobilenet)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--log2n", type=int, default=28)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--model", choices=["seed", "large"], default="seed")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--widths", default="", help="comma-separated layer widths (smoke tests)")
    p.add_argument("--batch", type=int, default=0, help="batch size (smoke tests)")
    p.add_argument("--channels-last", type=int, default=0, help="mobilenet: model and images in torch.channels_last")
    args = p.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch.cuda.is_available() is False: no PyTorch numbers", flush=True)
        sys.exit(1)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {where}", flush=True)
    {"gemm": bench_gemm, "add": bench_add, "mlp": bench_mlp, "mobilenet": bench_mobilenet}[args.bench](args, device)


if __name__ == "__main__":
    main()
