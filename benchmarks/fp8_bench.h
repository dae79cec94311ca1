#pragma once
// What the fp8 benchmarks (fp8_gemm, mlp_fp8_step) share. Unlike the gpu_*
// benchmarks they run on both devices: on a CUDA device (when built with
// CUDA, HALFGRAD_BENCH_CUDA) they time with CUDA events on halfgrad's stream
// (gpu_bench.h: warm-ups, then each call between its own pair of events, no
// host sync inside the timed loop); on the CPU with the host clock, where
// every op has finished when it returns. On the CPU fp8 is an exact
// emulation (fp8 decoded to float32, a float32 GEMM), so there the numbers
// are the emulation's cost, not an fp8 speed.
#include <halfgrad.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#if HALFGRAD_BENCH_CUDA
#include "gpu_bench.h"
#endif

namespace fp8_bench {

namespace hg = halfgrad;

// "cuda" when this build has CUDA and a usable device, else "cpu".
inline std::string default_device() {
#if HALFGRAD_BENCH_CUDA
  if (hg::cuda::is_available()) return "cuda";
#endif
  return "cpu";
}

// Whether `device` ("cpu" or "cuda") can run here; says why not.
inline bool usable(const std::string& device, const char* bench) {
  if (device == "cpu") return true;
#if HALFGRAD_BENCH_CUDA
  if (device == "cuda" && hg::cuda::is_available()) return true;
  fmt::print("{}: no usable CUDA device here: skipped\n", bench);
#else
  fmt::print("{}: this build has no CUDA (HALFGRAD_CUDA=OFF): skipped\n", bench);
#endif
  return false;
}

inline void sync(bool cuda) {
#if HALFGRAD_BENCH_CUDA
  if (cuda) gpu_bench::device_sync();
#else
  (void)cuda;
#endif
}

// f() `warmup` times, then `iters` times, each timed on its own: CUDA events
// around each call on the GPU (one sync at the end), the host clock on the CPU.
template <typename F>
std::vector<double> time_each(bool cuda, int warmup, int iters, F&& f) {
#if HALFGRAD_BENCH_CUDA
  if (cuda) return gpu_bench::time_each(warmup, iters, f);
#else
  (void)cuda;
#endif
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

inline void print_device(bool cuda) {
#if HALFGRAD_BENCH_CUDA
  if (cuda) return gpu_bench::print_device();
#else
  (void)cuda;
#endif
  std::string model = "unknown CPU";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f))
      if (std::string_view(line).starts_with("model name")) {
        model = std::string(line);
        model = model.substr(model.find(':') + 2);
        while (!model.empty() && model.back() == '\n') model.pop_back();
        break;
      }
    std::fclose(f);
  }
  fmt::print("device: cpu ({}), {} threads\n", model, hg::get_num_threads());
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "1.23" or "n/a" for a value that was not measured (<= 0).
inline std::string num(double v, int digits = 2) { return v > 0 ? fmt::format("{:.{}f}", v, digits) : "n/a"; }
inline std::string ratio_str(double r) { return r > 0 ? fmt::format("{:.2f}x", r) : "n/a"; }

// A row of scripts/gpu-check's closing table (gpu_bench.h's format):
//   SUMMARY|benchmark|what is compared|ours|reference|ratio|target|result
// result: PASS/MISS against `target` where `judged`, else `why` (the CPU's
// emulation has no target), n/a when the ratio was not measured (<= 0).
inline void summary(std::string_view bench, std::string_view what, const std::string& ours,
                    const std::string& reference, double ratio, std::string_view target, bool met, bool judged = true,
                    std::string_view why = "") {
  const std::string result = ratio <= 0 ? "n/a" : !judged ? std::string(why) : met ? "PASS" : "MISS";
  fmt::print("SUMMARY|{}|{}|{}|{}|{}|{}|{}\n", bench, what, ours, reference, ratio_str(ratio), target, result);
}

// ‖a − b‖ / ‖b‖ in float32 (on the tensors' device).
inline double rel_err(const hg::Tensor& a, const hg::Tensor& b) {
  hg::NoGradGuard ng;
  const auto x = a.to(hg::float32), y = b.to(hg::float32);
  const double num = hg::sum(hg::mul(hg::sub(x, y), hg::sub(x, y))).item<float>();
  const double den = hg::sum(hg::mul(y, y)).item<float>();
  if (!(num == num) || !(den == den)) return 1e30;  // NaN never passes
  return den > 0 ? std::sqrt(num / den) : 1e30;
}

// Runs `python3 benchmarks/<script> <args>` after our own variants, so the
// two never share the device. The interpreter: $HALFGRAD_PYTHON, else on the
// CPU Debian's /usr/bin/python3 (PyTorch 1.13 from `scripts/setup --bench`, as
// the CPU benchmarks use) when it exists, else python3. Its `RESULT key value` lines come back as a map; its
// other lines are echoed, indented. Empty when it fails or has no numbers.
inline std::map<std::string, double> run_python(const std::string& script, const std::string& args, bool cuda) {
  std::map<std::string, double> out;
  const char* env = std::getenv("HALFGRAD_PYTHON");
  const std::string py = env && *env                                       ? env
                         : !cuda && access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3"
                                                                          : "python3";
  const std::string cmd = fmt::format("{} {}/{} {} 2>&1", py, HALFGRAD_BENCH_DIR, script, args);
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

}  // namespace fp8_bench
