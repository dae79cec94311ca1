// Elementwise bandwidth on the GPU: c = a + b over 2^28 float16 elements
// through the public hg::add on CUDA tensors, against a device-to-device
// cudaMemcpyAsync of one such tensor measured in the same process, which is
// the practical bandwidth ceiling. Target: add's GB/s >= 80% of the copy's.
// PyTorch's torch.add and Tensor.copy_ are measured too, for reference.
//
// The work, counted first (docs/performance.md): one add reads a and b and
// writes c: 3 x 2^28 x 2 B = 1.61 GB, and 2^28 additions (nothing, next to
// the bytes); the copy reads and writes 2 x 2^28 x 2 B = 1.07 GB. At the
// 4.3 TB/s copy rate measured in this workplace on an H200 that is 0.37 ms
// per add and 0.25 ms per copy: memory-bound, so GB/s (bytes read + written
// per second) is the measure. Each tensor is 512 MiB, far over the 60 MB L2.
//
// Method: inputs filled from random host draws (never zeros), the first
// result checked bit-exactly at both ends against float32 add + one
// rounding (docs/numerics.md), `--warmup` untimed runs, then `--iters`
// runs each between its own pair of CUDA events; medians.
//
//   build/benchmarks/gpu_elementwise [--log2n 28] [--iters 20] [--warmup 3]
#include "gpu_bench.h"

int main(int argc, char** argv) {
  using namespace gpu_bench;
  const int log2n = int_arg(argc, argv, "--log2n", 28);
  const int iters = int_arg(argc, argv, "--iters", 20);
  const int warmup = int_arg(argc, argv, "--warmup", 3);
  if (!hg::cuda::is_available()) {
    fmt::print("gpu_elementwise: no usable CUDA device here: skipped\n");
    return 77;
  }
  print_device();
  const int64_t n = int64_t{1} << log2n;
  const double elem = 2;  // bytes of a float16
  const double add_bytes = 3 * elem * n, copy_bytes = 2 * elem * n;
  fmt::print("float16 add of 2^{} elements: {:.3f} GB per add (read a, b; write c), {:.3f} GB per copy; "
             "median of {} runs (CUDA events) after {} warm-ups\n",
             log2n, add_bytes / 1e9, copy_bytes / 1e9, iters, warmup);

  double add_ms = 0, copy_ms = 0;
  int mismatches = -1;  // -1: the check could not run
  const int64_t block = std::min<int64_t>(n, int64_t{1} << 20);  // checked at each end
  std::string error, check_error;
  try {
    hg::manual_seed(0);
    const hg::Device dev = hg::Device::cuda();
    const hg::TensorOptions half(hg::float16, dev);
    // The host generator is slow for 2^28 draws: fill each input from a
    // block of 2^20 draws, copied block by block on the device.
    auto filled = [&](double scale) {
      hg::Tensor t = hg::empty({n}, half);
      const hg::Tensor src = hg::mul(hg::randn({block}, half), scale);
      for (int64_t off = 0; off < n; off += block) t.narrow(0, off, block).copy_(src);
      return t;
    };
    const hg::Tensor a = filled(1.0), b = filled(0.5);

    // The first result, checked where a wrong grid or tail would show.
    hg::Tensor c = hg::add(a, b);
    try {
      int wrong = 0;
      for (int64_t off : {int64_t{0}, n - block}) {
        const hg::Tensor ref =
            hg::add(a.narrow(0, off, block).to(hg::float32), b.narrow(0, off, block).to(hg::float32)).to(hg::float16);
        wrong += static_cast<int>(hg::ne(c.narrow(0, off, block), ref).to(hg::float32).sum().item<float>());
      }
      mismatches = wrong;
    } catch (const std::exception& e) {
      check_error = e.what();
    }

    add_ms = median(time_each(warmup, iters, [&] { c = hg::add(a, b); }));
    const hg::Tensor dst = hg::empty({n}, half);
    copy_ms = median(time_each(warmup, iters, [&] {
      BENCH_CUDA(cudaMemcpyAsync(dst.data_ptr(), a.data_ptr(), static_cast<size_t>(elem * n),
                                 cudaMemcpyDeviceToDevice, stream()));
    }));
  } catch (const std::exception& e) {
    error = e.what();
  }

  const auto pt = run_pytorch(fmt::format("add --log2n {} --iters {} --warmup {}", log2n, iters, warmup));
  const double pt_add = get(pt, "add.ms"), pt_copy = get(pt, "copy.ms");
  auto gbps = [](double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0; };

  fmt::print("\n{:<22} {:>10} {:>10} {:>16}\n", "", "median ms", "GB/s", "of copy's GB/s");
  auto row = [&](const char* name, double bytes, double ms, double copy_gbps) {
    const double g = gbps(bytes, ms);
    fmt::print("{:<22} {:>10} {:>10} {:>16}\n", name, num(ms, 4), num(g, 0),
               g > 0 && copy_gbps > 0 ? fmt::format("{:.1f}%", 100 * g / copy_gbps) : "n/a");
  };
  row("halfgrad add", add_bytes, add_ms, gbps(copy_bytes, copy_ms));
  row("cudaMemcpyAsync D2D", copy_bytes, copy_ms, gbps(copy_bytes, copy_ms));
  row("pytorch add", add_bytes, pt_add, gbps(copy_bytes, pt_copy));
  row("pytorch copy_", copy_bytes, pt_copy, gbps(copy_bytes, pt_copy));
  if (mismatches > 0)
    fmt::print("WRONG RESULT: {} of {} checked elements differ from float32 add + one rounding\n", mismatches, 2 * block);
  if (!check_error.empty()) fmt::print("the result check could not run: {}\n", check_error);
  if (!error.empty()) fmt::print("halfgrad: error: {}\n", error);

  const double ours = gbps(add_bytes, add_ms), ceiling = gbps(copy_bytes, copy_ms);
  const double frac = ours > 0 && ceiling > 0 ? ours / ceiling : 0;
  const bool correct = mismatches == 0;
  summary(fmt::format("add fp16 2^{}", log2n), "GB/s vs D2D copy GB/s",
          !error.empty() ? "error" : (mismatches > 0 ? "WRONG" : num(ours, 0) + (correct ? "" : "?")), num(ceiling, 0),
          frac * 100, ">= 80%",
          correct && frac >= 0.80, "%");
  return error.empty() ? 0 : 1;
}
