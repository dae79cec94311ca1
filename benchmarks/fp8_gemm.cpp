// fp8 GEMM: hg::scaled_mm (ops/fp8_ops.h, torch._scaled_mm's semantics) with
// e4m3 x e4m3 and e4m3 x e5m2 operands, float32 accumulation and a bfloat16
// result, against our own bfloat16 GEMM (hg::matmul, bf16 x bf16 -> bf16,
// float32 accumulation) at the same size, and against PyTorch's
// torch._scaled_mm and torch.matmul in bf16 measured in the same run
// (benchmarks/pytorch_fp8_gemm.py, a child process after ours; it says so
// when the installed torch has no _scaled_mm or no GPU).
//
// The work (docs/performance.md, "fp8"): 2 n^3 FLOP per product (1.0995
// TFLOP at n = 8192), at least 2 n^2 + 2 n^2 B through memory (fp8 operands,
// bf16 result): compute-bound. On an H200 (~790 TFLOP/s bf16 measured, ~1979
// dense fp8 peak) the target is fp8 >= 1.6x our bf16 TFLOP/s.
//
// On CUDA: cuBLASLt's fp8 matmul (kernels/cuda/fp8.cu); `b` is column-major
// (b = w.t() of a row-major [n, k] w, the layout of a Linear's x @ w.t(),
// which Hopper's fp8 kernels take without a copy; torch._scaled_mm requires
// it too). Timing: `--warmup` untimed products, then `--iters` products each
// between its own pair of CUDA events, no host sync in between; the median.
// The rows run in interleaved blocks of 5 products.
//
// On the CPU, fp8 is an exact emulation: the fp8 operands are decoded to
// float32 and multiplied by oneDNN's float32 GEMM. There this benchmark
// measures what the emulation costs against our float32 and bfloat16 GEMMs
// (host clock, median), not an fp8 speed-up; the CPU has no fp8 arithmetic.
//
// Each result is checked on a 256-row slice against a float32 GEMM of the
// same (dequantised) operands.
//
//   build/benchmarks/fp8_gemm [--device cuda|cpu] [--n 8192 (cuda) | 1024 (cpu)]
//                             [--iters 20] [--warmup 5 | 2] [--threads N] [--no-pytorch]
#include "fp8_bench.h"

#include <CLI/CLI.hpp>

namespace {

using namespace fp8_bench;

struct Row {
  std::string name;      // also the key of PyTorch's number, when it has one
  std::string label;
  bool cuda_too = true;  // run on the GPU (float32 is there for the CPU's emulation only)
  hg::Tensor a, b, c;    // the operands, the last product
  std::vector<double> times;
  double ms = 0, err = -1;
  std::string error;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8 GEMM (hg::scaled_mm) against our bf16 GEMM and torch._scaled_mm"};
  std::string device = default_device();
  int n = 0, iters = 20, warmup = -1, threads = 0;
  bool no_pytorch = false;
  app.add_option("--device", device, "cuda or cpu (default: cuda when usable)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--n", n, "m = k = n (default 8192 on cuda, 1024 on cpu)");
  app.add_option("--iters", iters, "timed products per variant")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed products first (default 5 on cuda, 2 on cpu)");
  app.add_option("--threads", threads, "CPU threads (default: OpenMP's)");
  app.add_flag("--no-pytorch", no_pytorch, "do not run benchmarks/pytorch_fp8_gemm.py");
  CLI11_PARSE(app, argc, argv);
  if (!usable(device, "fp8_gemm")) return 77;
  const bool cuda = device == "cuda";
  if (n <= 0) n = cuda ? 8192 : 1024;
  if (warmup < 0) warmup = cuda ? 5 : 2;
  if (threads > 0) hg::set_num_threads(threads);
  print_device(cuda);
  const double flop = 2.0 * n * n * n;
  fmt::print("GEMM {0}x{0}x{0}: {1:.4f} TFLOP per product; median of {2} products ({3}) after {4} warm-ups\n", n,
             flop / 1e12, iters, cuda ? "CUDA events" : "host clock", warmup);
  if (!cuda)
    fmt::print("CPU: fp8 is an exact emulation here (fp8 decoded to float32, oneDNN float32 GEMM): the fp8 rows\n"
               "measure the emulation's cost against our float32 and bf16 GEMMs, not an fp8 speed-up.\n");

  std::vector<Row> rows{{"bfloat16", "bf16 matmul", true},
                        {"float32", "fp32 matmul", false},
                        {"e4m3_e4m3", "fp8 e4m3 x e4m3 -> bf16", true},
                        {"e4m3_e5m2", "fp8 e4m3 x e5m2 -> bf16", true}};
  std::erase_if(rows, [&](const Row& r) { return cuda && !r.cuda_too; });
  constexpr int kBlock = 5;  // products per row per interleaved block
  try {
    hg::manual_seed(0);
    const hg::TensorOptions f32 = hg::TensorOptions(hg::float32, cuda ? hg::Device::cuda() : hg::Device::cpu());
    // One draw; B derived from it, so the operands differ and neither is zero.
    const hg::Tensor base = hg::randn({n, n}, f32);
    const hg::Tensor base_b = hg::tanh(base);
    const hg::Tensor base_bt = base_b.t().contiguous();  // [n, k] row-major: b = base_bt.t() is column-major
    // Dequantisation scales (torch._scaled_mm's scale_a, scale_b); any values do.
    const hg::Tensor scale_a = hg::full({1}, 0.5, f32), scale_b = hg::full({1}, 2.0, f32);
    const int64_t slice = std::min(n, 256);
    auto product = [&](const Row& r) {
      return r.name == "bfloat16" || r.name == "float32"
                 ? hg::matmul(r.a, r.b)
                 : hg::scaled_mm(r.a, r.b, scale_a, scale_b, {.out_dtype = hg::bfloat16});
    };
    for (Row& r : rows) {
      try {
        hg::Tensor ref;
        if (r.name == "bfloat16" || r.name == "float32") {
          const hg::DType dt = r.name == "bfloat16" ? hg::bfloat16 : hg::float32;
          r.a = base.to(dt);
          r.b = base_b.to(dt);
          ref = hg::matmul(r.a.narrow(0, 0, slice).to(hg::float32), r.b.to(hg::float32));
        } else {
          r.a = base.to(hg::float8_e4m3fn);
          r.b = base_bt.to(r.name == "e4m3_e4m3" ? hg::float8_e4m3fn : hg::float8_e5m2).t();
          ref = hg::matmul(hg::mul(r.a.narrow(0, 0, slice).to(hg::float32), scale_a),
                           hg::mul(r.b.to(hg::float32), scale_b));
        }
        r.c = product(r);
        r.err = rel_err(r.c.narrow(0, 0, slice), ref);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
    // Blocks of products, the rows interleaved, so all see the same machine
    // (a shared CPU's load, a GPU's clocks); the warm-ups before the first.
    for (int blk = 0, done = 0; done < iters; ++blk) {
      const int count = std::min(kBlock, iters - done);
      for (Row& r : rows) {
        if (!r.error.empty()) continue;
        try {
          const auto ms = time_each(cuda, blk == 0 ? warmup : 0, count, [&] { r.c = product(r); });
          r.times.insert(r.times.end(), ms.begin(), ms.end());
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      }
      done += count;
    }
    for (Row& r : rows) r.ms = r.error.empty() ? median(r.times) : 0;
  } catch (const std::exception& e) {
    for (Row& r : rows) r.error = e.what();
  }

  std::map<std::string, double> pt;
  if (!no_pytorch)
    pt = run_python("pytorch_fp8_gemm.py",
                    fmt::format("--device {} --n {} --iters {} --warmup {}{}", device, n, iters, warmup,
                                cuda ? "" : fmt::format(" --threads {}", hg::get_num_threads())),
                    cuda);

  auto tflops = [&](double ms) { return ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0; };
  auto ms_of = [&](const std::string& name) {
    for (const Row& r : rows)
      if (r.name == name && r.error.empty()) return r.ms;
    return 0.0;
  };
  const double bf16_ms = ms_of("bfloat16"), fp32_ms = ms_of("float32");
  // The result's tolerance: bf16 rounding of the output (2^-9 relative) and,
  // for the fp8 rows, nothing else: the reference multiplies the same fp8 values.
  constexpr double kTol = 1e-2;
  fmt::print("\n{:<24} {:>10} {:>9} {:>9} {:>10}{} {:>11} {:>9} {:>10}\n", "halfgrad", "ms", "TFLOP/s", "rel.err",
             "vs bf16", cuda ? "" : fmt::format(" {:>10}", "vs fp32"), "pytorch ms", "TFLOP/s", "vs pytorch");
  for (const Row& r : rows) {
    const double pt_ms = get(pt, "gemm." + r.name + ".ms");
    // speed-ups: >1 means this row is faster
    const double vs_bf16 = r.ms > 0 && bf16_ms > 0 ? bf16_ms / r.ms : 0, vs_fp32 = r.ms > 0 && fp32_ms > 0 ? fp32_ms / r.ms : 0;
    const double vs_pt = r.ms > 0 && pt_ms > 0 ? pt_ms / r.ms : 0;
    fmt::print("{:<24} {:>10} {:>9} {:>9} {:>10}{} {:>11} {:>9} {:>10}{}\n", r.label, num(r.ms, 3),
               num(tflops(r.ms), cuda ? 1 : 3), r.err >= 0 ? fmt::format("{:.1e}", r.err) : "n/a", ratio_str(vs_bf16),
               cuda ? "" : fmt::format(" {:>10}", ratio_str(vs_fp32)), num(pt_ms, 3), num(tflops(pt_ms), cuda ? 1 : 3),
               ratio_str(vs_pt), r.err > kTol ? fmt::format("  WRONG RESULT (tolerance {:.0e})", kTol) : "");
    if (!r.error.empty()) fmt::print("  {}: error: {}\n", r.label, r.error);
  }
  fmt::print("(vs bf16, vs fp32: that GEMM's time over this row's, > 1 is faster; vs pytorch: PyTorch's time for "
             "the same op over ours)\n");
  if (!cuda) {
    const double e4 = ms_of("e4m3_e4m3");
    if (e4 > 0 && bf16_ms > 0 && fp32_ms > 0)
      fmt::print("CPU emulation cost: the e4m3 scaled_mm takes {:.2f}x the time of our float32 GEMM and {:.2f}x "
                 "that of our bf16 GEMM\n",
                 e4 / fp32_ms, e4 / bf16_ms);
  }

  for (const Row& r : rows) {
    if (r.name == "bfloat16" || r.name == "float32") continue;
    const bool correct = r.err >= 0 && r.err <= kTol;
    const std::string ours = !r.error.empty() ? "error" : !correct ? "WRONG" : num(tflops(r.ms), cuda ? 0 : 3);
    const double ratio = r.ms > 0 && bf16_ms > 0 ? bf16_ms / r.ms : 0;
    summary(fmt::format("fp8 GEMM {}^3 {}", n, r.name), "TFLOP/s vs our bf16 matmul", ours,
            num(tflops(bf16_ms), cuda ? 0 : 3), ratio, ">= 1.6x", correct && ratio >= 1.6, cuda,
            "n/a: CPU emulation");
    const double pt_ms = get(pt, "gemm." + r.name + ".ms");
    if (cuda)
      summary(fmt::format("fp8 GEMM {}^3 {}", n, r.name), "TFLOP/s vs torch._scaled_mm", ours,
              num(tflops(pt_ms), 0), r.ms > 0 && pt_ms > 0 ? pt_ms / r.ms : 0, ">= 0.95x",
              correct && r.ms > 0 && pt_ms / r.ms >= 0.95);
  }
  bool failed = false;
  for (const Row& r : rows) failed |= !r.error.empty() || r.err > kTol;
  return failed ? 1 : 0;
}
