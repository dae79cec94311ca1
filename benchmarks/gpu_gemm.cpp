// GEMM on the GPU: C = A @ B, n x n x n (n = 8192), float16 and bfloat16
// operands with float32 accumulation, through the public hg::matmul on CUDA
// tensors, against torch.matmul measured in the same run (a child process,
// after ours). Target: our TFLOP/s >= 0.95x PyTorch's.
//
// The work, counted first (docs/performance.md): 2 n^3 = 1.0995 TFLOP per
// product; at least 3 n^2 x 2 B = 403 MB through memory (A and B read once,
// C written once). Against the H200's ceilings measured in this workplace
// (about 790 TFLOP/s dense bf16 through PyTorch, 4.3 TB/s copy) that is
// about 1.4 ms of arithmetic and 0.09 ms of memory traffic: compute-bound
// (about 2700 FLOP per byte), so TFLOP/s is the measure.
//
// Method: operands drawn once (random, never zeros), a result check on a
// 256-row slice against a float32 GEMM of the same operands, `--warmup`
// untimed products, then `--iters` products each between its own pair of
// CUDA events (no host sync in between); the median is reported.
//
//   build/benchmarks/gpu_gemm [--n 8192] [--iters 20] [--warmup 5]
#include "gpu_bench.h"

int main(int argc, char** argv) {
  using namespace gpu_bench;
  const int n = int_arg(argc, argv, "--n", 8192);
  const int iters = int_arg(argc, argv, "--iters", 20);
  const int warmup = int_arg(argc, argv, "--warmup", 5);
  if (!hg::cuda::is_available()) {
    fmt::print("gpu_gemm: no usable CUDA device here: skipped\n");
    return 77;
  }
  print_device();
  const double flop = 2.0 * n * n * n;
  fmt::print("GEMM {0}x{0}x{0}: {1:.4f} TFLOP per product, >= {2:.0f} MB moved; median of {3} products "
             "(CUDA events) after {4} warm-ups\n",
             n, flop / 1e12, 3.0 * n * n * 2 / 1e6, iters, warmup);

  struct Row {
    hg::DType dtype;
    double tol;  // for ‖C − C_fp32‖ / ‖C_fp32‖: output rounding is 2^-11 (fp16) or 2^-8 (bf16)
    double ms = 0, err = -1;  // err -1: the check could not run
    std::string error, check_error;
  };
  std::vector<Row> rows{{hg::float16, 2e-3, 0, -1, {}, {}}, {hg::bfloat16, 1e-2, 0, -1, {}, {}}};
  try {
    hg::manual_seed(0);
    const hg::Device dev = hg::Device::cuda();
    // One host draw (the generator is on the CPU); B is derived from it on
    // the device, so the two operands differ and neither is zero.
    const hg::Tensor base = hg::randn({n, n}, hg::TensorOptions(hg::float32, dev));
    const hg::Tensor base_b = hg::tanh(base);
    for (Row& r : rows) {
      try {
        const hg::Tensor a = base.to(r.dtype), b = base_b.to(r.dtype);
        hg::Tensor c = hg::matmul(a, b);
        try {
          const int64_t m = std::min(n, 256);
          r.err = rel_err(c.narrow(0, 0, m), hg::matmul(a.narrow(0, 0, m).to(hg::float32), b.to(hg::float32)));
        } catch (const std::exception& e) {
          r.check_error = e.what();
        }
        r.ms = median(time_each(warmup, iters, [&] { c = hg::matmul(a, b); }));
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
  } catch (const std::exception& e) {
    for (Row& r : rows) r.error = e.what();
  }

  const auto pt = run_pytorch(fmt::format("gemm --n {} --iters {} --warmup {}", n, iters, warmup));

  fmt::print("\n{:<9} {:>12} {:>9} {:>10} {:>12} {:>9} {:>8}  {}\n", "dtype", "halfgrad ms", "TFLOP/s",
             "rel.err", "pytorch ms", "TFLOP/s", "ratio", "target");
  for (const Row& r : rows) {
    const std::string name(hg::dtype_name(r.dtype));
    const double pt_ms = get(pt, "gemm." + name + ".ms");
    const double ours = r.ms > 0 ? flop / (r.ms * 1e-3) / 1e12 : 0, theirs = pt_ms > 0 ? flop / (pt_ms * 1e-3) / 1e12 : 0;
    const double ratio = ours > 0 && theirs > 0 ? ours / theirs : 0;
    const bool correct = r.err >= 0 && r.err <= r.tol;
    fmt::print("{:<9} {:>12} {:>9} {:>10} {:>12} {:>9} {:>8}  >= 0.95x{}\n", name, num(r.ms, 3), num(ours, 1),
               r.err >= 0 ? fmt::format("{:.1e}", r.err) : "n/a", num(pt_ms, 3), num(theirs, 1),
               ratio > 0 ? fmt::format("{:.3f}x", ratio) : "n/a",
               r.err >= 0 && !correct ? fmt::format("  WRONG RESULT (tolerance {:.0e})", r.tol) : "");
    if (!r.check_error.empty()) fmt::print("  {}: the result check could not run: {}\n", name, r.check_error);
    if (!r.error.empty()) fmt::print("  halfgrad {}: error: {}\n", name, r.error);
    const bool wrong = r.err >= 0 && !correct;
    summary(fmt::format("GEMM {}^3 {}", n, name), "TFLOP/s vs torch.matmul",
            !r.error.empty() ? "error" : (wrong ? "WRONG" : num(ours, 0) + (correct ? "" : "?")), num(theirs, 0),
            ratio, ">= 0.95x", correct && ratio >= 0.95);
  }
  bool failed = false;
  for (const Row& r : rows) failed |= !r.error.empty();
  return failed ? 1 : 0;
}
