#pragma once
// Shared pieces of the GPU benchmarks (gpu_gemm, gpu_elementwise,
// gpu_mlp_step): CUDA-event timing on the stream halfgrad queues its work on,
// medians, the PyTorch side (benchmarks/pytorch_gpu.py, run as a child
// process after our variants, so the two never share the GPU), and the
// `SUMMARY|...` lines that scripts/gpu-check gathers into its closing table.
//
// Only the benchmarks include cuda_runtime.h: halfgrad itself is used through
// halfgrad.h, plus core/cuda/runtime.h for the current stream (events must be
// recorded on the stream the work is queued on).
#include <halfgrad.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>

#include <halfgrad/core/cuda/runtime.h>

namespace gpu_bench {

namespace hg = halfgrad;

inline void check_cuda(cudaError_t e, const char* call, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("{} failed: {} ({}), benchmarks line {}", call, cudaGetErrorString(e),
                                         cudaGetErrorName(e), line));
}
#define BENCH_CUDA(call) ::gpu_bench::check_cuda((call), #call, __LINE__)

inline cudaStream_t stream() { return static_cast<cudaStream_t>(hg::cuda::current_stream()); }
inline void device_sync() { BENCH_CUDA(cudaDeviceSynchronize()); }

// A CUDA event recorded on halfgrad's current stream.
class Event {
 public:
  Event() { BENCH_CUDA(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  void record() { BENCH_CUDA(cudaEventRecord(e_, stream())); }
  // Milliseconds from `start` to this event; both must have completed.
  float since(const Event& start) const {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs f() `warmup` times, then `iters` times each between its own pair of
// events (no host sync in between, so the queue stays full); returns the
// milliseconds of each timed call.
template <typename F>
std::vector<double> time_each(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<Event> start(iters), stop(iters);
  for (int i = 0; i < iters; ++i) {
    start[i].record();
    f();
    stop[i].record();
  }
  device_sync();
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) ms[i] = stop[i].since(start[i]);
  return ms;
}

// `--name value` from argv, or `fallback`.
inline int int_arg(int argc, char** argv, std::string_view name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::atoi(argv[i + 1]);
  return fallback;
}
inline std::string str_arg(int argc, char** argv, std::string_view name, std::string fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return fallback;
}

// One line about the device (name, multiprocessors, memory, clocks).
inline void print_device() {
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  BENCH_CUDA(cudaGetDeviceProperties(&p, dev));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  fmt::print("device: {} (sm_{}{}), {} SMs, {:.0f} GiB, L2 {} MiB; driver {}.{}, runtime {}.{}\n", p.name, p.major,
             p.minor, p.multiProcessorCount, p.totalGlobalMem / double(1 << 30), p.l2CacheSize >> 20, driver / 1000,
             driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
}

// The PyTorch side: `python3 benchmarks/pytorch_gpu.py <args>` (the
// interpreter from $HALFGRAD_PYTHON, default python3). Its `RESULT key value`
// lines come back as a map; its other lines are echoed, indented. Empty on
// any failure (no torch, no GPU for torch, a crash): the caller prints "n/a".
inline std::map<std::string, double> run_pytorch(const std::string& args) {
  std::map<std::string, double> out;
  const char* py = std::getenv("HALFGRAD_PYTHON");
  const std::string cmd =
      fmt::format("{} {}/pytorch_gpu.py {}", py && *py ? py : "python3", HALFGRAD_BENCH_DIR, args);
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    fmt::print("  [pytorch] could not start: {}\n", cmd);
    return out;
  }
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    std::istringstream in(line);
    std::string tag, key;
    double value;
    if (in >> tag >> key >> value && tag == "RESULT") out[key] = value;
    else fmt::print("  [pytorch] {}\n", line);
  }
  const int status = pclose(pipe);
  if (status != 0)
    fmt::print("  [pytorch] {} ({})\n",
               WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                 : fmt::format("ended by signal {}", WTERMSIG(status)),
               cmd);
  return out;
}

inline double get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0.0 : it->second;
}

// "1.23" or "n/a" for a value that was not measured (<= 0).
inline std::string num(double v, int digits = 2) { return v > 0 ? fmt::format("{:.{}f}", v, digits) : "n/a"; }

// A row of scripts/gpu-check's closing table:
//   SUMMARY|benchmark|what is compared|ours|reference|ratio|target|PASS/MISS/n/a
// `ratio <= 0` means it could not be measured.
inline void summary(std::string_view bench, std::string_view what, const std::string& ours,
                    const std::string& reference, double ratio, std::string_view target, bool met,
                    std::string_view ratio_unit = "x") {
  const std::string r = ratio > 0 ? fmt::format("{:.2f}{}", ratio, ratio_unit) : "n/a";
  fmt::print("SUMMARY|{}|{}|{}|{}|{}|{}|{}\n", bench, what, ours, reference, r, target,
             ratio > 0 ? (met ? "PASS" : "MISS") : "n/a");
}

// ‖a − b‖ / ‖b‖ in float32 on the device (a sync).
inline double rel_err(const hg::Tensor& a, const hg::Tensor& b) {
  hg::NoGradGuard ng;
  const auto x = a.to(hg::float32), y = b.to(hg::float32);
  const double num = hg::sum(hg::mul(hg::sub(x, y), hg::sub(x, y))).item<float>();
  const double den = hg::sum(hg::mul(y, y)).item<float>();
  if (!(num == num) || !(den == den)) return 1e30;  // NaN never passes
  return den > 0 ? std::sqrt(num / den) : 1e30;
}

}  // namespace gpu_bench
