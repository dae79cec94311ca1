#!/usr/bin/env python3
"""The PyTorch side of benchmarks/fp8_gemm.cpp (run by it as a child process
after its own variants, same sizes, same timing method): torch._scaled_mm
with e4m3 x e4m3 and e4m3 x e5m2 operands and a bfloat16 result, and
torch.matmul in bfloat16 (float32 accumulation, no reduced-precision
reductions), n x n x n.

torch._scaled_mm needs PyTorch >= 2.1 (float8 dtypes) and a CUDA GPU with
fp8 tensor cores (compute capability >= 8.9); where it is missing this script
says so and still times the bf16 matmul. `b` is column-major (w.t() of a
row-major w), as _scaled_mm requires; use_fast_accum=False, as ours.

Prints `RESULT gemm.<name>.ms value` lines (median milliseconds; names
bfloat16, e4m3_e4m3, e4m3_e5m2) and informational lines.

  python3 benchmarks/pytorch_fp8_gemm.py --n 8192 --iters 20 --warmup 5
  python3 benchmarks/pytorch_fp8_gemm.py --device cpu --n 1024 --iters 10 --warmup 2"""
import argparse
import statistics
import sys
import time


def result(key, value):
    print(f"RESULT {key} {value:.6f}", flush=True)


def time_each(torch, device, warmup, iters, fn):
    """fn() `warmup` times, then `iters` times each between its own CUDA
    events (no host sync in between), or on the host clock on the CPU."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            fn()
            stops[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, stops)]
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def scaled_mm_unavailable(torch, device):
    """Why torch._scaled_mm cannot run here, or None."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm / float8 dtypes (PyTorch >= 2.1 has them)"
    if device.type != "cuda":
        return "torch._scaled_mm is timed on a CUDA GPU only (fp8 tensor cores)"
    cc = torch.cuda.get_device_capability(device)
    if cc < (8, 9):
        return f"this GPU (sm_{cc[0]}{cc[1]}) has no fp8 tensor cores (compute capability >= 8.9 needed)"
    return None


def scaled_mm(torch, a, b, scale_a, scale_b):
    # 2.1-2.3 return (out, amax), 2.4+ the output alone; keywords work in both.
    out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, use_fast_accum=False)
    return out[0] if isinstance(out, tuple) else out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads)")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print(f"no PyTorch for {sys.executable} (set HALFGRAD_PYTHON to a Python that has it): no PyTorch numbers")
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"torch {torch.__version__}: torch.cuda.is_available() is False: no PyTorch numbers")
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {where}", flush=True)
    if device.type == "cuda":
        # float32 accumulation, as ours (older versions lack the flag)
        try:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        except (AssertionError, AttributeError):
            pass

    n = args.n
    torch.manual_seed(0)
    base = torch.randn(n, n, device=device)
    base_bt = torch.tanh(base).t().contiguous()  # [n, k] row-major; b = base_bt.t() is column-major
    a, b = base.to(torch.bfloat16), base_bt.t().contiguous().to(torch.bfloat16)
    result("gemm.bfloat16.ms", statistics.median(time_each(torch, device, args.warmup, args.iters, lambda: torch.matmul(a, b))))
    del a, b

    why = scaled_mm_unavailable(torch, device)
    if why:
        print(f"torch._scaled_mm: unavailable: {why}: no PyTorch fp8 numbers", flush=True)
        return 0
    scale_a = torch.tensor(0.5, device=device)
    scale_b = torch.tensor(2.0, device=device)
    a = base.to(torch.float8_e4m3fn)
    for name, b_dtype in (("e4m3_e4m3", torch.float8_e4m3fn), ("e4m3_e5m2", torch.float8_e5m2)):
        b = base_bt.to(b_dtype).t()
        try:
            ms = time_each(torch, device, args.warmup, args.iters, lambda: scaled_mm(torch, a, b, scale_a, scale_b))
            result(f"gemm.{name}.ms", statistics.median(ms))
        except RuntimeError as e:  # e.g. a version without e4m3 x e5m2
            print(f"torch._scaled_mm {name}: {str(e).splitlines()[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
