// CPU training-step benchmark: an MLP trained with SGD (lr 0.01) and
// CrossEntropyLoss, float32 and bfloat16 AMP, side by side in one run in
// halfgrad, LibTorch 1.13 (C++), PyTorch 1.13 eager (pytorch_cpu_step.py) and
// the oneDNN floor (the step's 8 GEMMs alone, onednn_floor.h: the time the step
// cannot beat).
//
//   build/benchmarks/cpu_train_step [--cases seed,w256,w512,w1024,w2048,w4096] [--steps N]
//       [--rounds 4] [--threads T] [--frameworks halfgrad,libtorch,pytorch,floor] [--max-wait 300]
//       [--calib-passes 2]
//
// Cases: "seed", the MLP of PyTorch's AMP tutorial seed (Linear(10, 100), ReLU,
// Linear(100, 10), batch 100: overhead-bound), and "wW", MLP 784-W-W-10 at
// batch 256 (GEMM-bound). The step: zero_grad(set_to_none), forward + loss
// (AMP: under bf16 autocast), backward, SGD step. AMP in halfgrad adds a
// GradScaler; PyTorch 1.13 has no CPU GradScaler, so LibTorch's and PyTorch's
// AMP step is plain bf16 autocast.
//
// Fairness rules:
// - Every block of steps runs in a fresh process started by exec: this binary
//   in its hidden child mode (`--child halfgrad|libtorch|floor --case C --mode
//   float32|amp --steps N --warmup W --threads T`, LibTorch loaded only there)
//   or /usr/bin/python3 for PyTorch. So each framework's libraries read the
//   environment chosen for it when they load (OpenBLAS's OPENBLAS_CORETYPE,
//   OpenMP's OMP_WAIT_POLICY), and no two OpenMP pools share a process.
// - Each framework gets its best configuration, from a calibration in two
//   stages. Stage 1: halfgrad and the floor try OMP_WAIT_POLICY in {unset,
//   ACTIVE, PASSIVE}; the OpenBLAS-based LibTorch and PyTorch try the
//   allocator (glibc's, or jemalloc or tcmalloc through LD_PRELOAD, as
//   PyTorch's CPU tuning guide recommends) x OpenBLAS's build (Debian's
//   default pthread one, or its OpenMP one through LD_LIBRARY_PATH, which
//   runs on the framework's own OpenMP threads instead of beside them).
//   Stage 2, for those two, with the allocator and build chosen:
//   OPENBLAS_CORETYPE in {unset (detected), the value our own environment
//   has (if any), SkylakeX (if the CPU has avx512f), Cooperlake (if
//   avx512_bf16)} x the wait policies. Each stage runs on the w1024 step (the
//   width cases use its result) and on the seed step, twice (the lower median
//   counts), stage 1's choice measured again in stage 2; it keeps the fastest
//   per framework and mode and prints the table and the core OpenBLAS
//   reported (OPENBLAS_VERBOSE=2). halfgrad and the floor have their own
//   allocator and no OpenBLAS.
// - Same threads for all: --threads, and OMP_NUM_THREADS = OPENBLAS_NUM_THREADS.
// - Rounds interleave the variants (order reversed every other round), so all
//   see the same machine load; warm-up steps are not timed; steps per block
//   scale with the case's work (~60 GFLOP of GEMMs, 5 to 2000 steps).
// - A shared machine: a block that ran while other work kept CPUs busy
//   (/proc/stat less the child's own CPU time) runs again once the machine is
//   quiet, within a waiting budget (--max-wait seconds for the whole run); the
//   load that remained is reported per variant.
// - Reported: the median over all timed steps [min-max of the per-round
//   medians]; ratios: the median [min-max] of the same-round ratios (round r's
//   median over round r's median). Per variant also the child's peak RSS and
//   its minor page faults per timed step.
#include <halfgrad.h>

#include <algorithm>
#include <chrono>
#include <compare>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>

#include <dlfcn.h>
#include <omp.h>

#include "cpu_bench.h"
#ifdef HALFGRAD_BENCH_LIBTORCH
#include "libtorch_step.h"
#endif
#ifdef HALFGRAD_BENCH_ONEDNN
#include "onednn_floor.h"
#endif

namespace hg = halfgrad;

namespace {

constexpr float kLr = 0.01f;

// The median, as the mean of the two middle values for an even count
// (bench::median takes the upper one: with 4 rounds that matters).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* const kModes[] = {"float32", "amp"};

// ---- cases ---------------------------------------------------------------

struct Case {
  std::string name;
  int batch;
  std::vector<int> sizes;  // in, hidden..., classes
};

std::vector<Case> all_cases() {
  std::vector<Case> cases{{"seed", 100, {10, 100, 10}}};
  for (int w : {256, 512, 1024, 2048, 4096}) cases.push_back({fmt::format("w{}", w), 256, {784, w, w, 10}});
  return cases;
}

std::optional<Case> find_case(const std::string& name) {
  for (auto& c : all_cases())
    if (c.name == name) return c;
  return std::nullopt;
}

// The FLOPs of the step's GEMMs: forward, weight grad, input grad but the first layer's.
double gemm_flops(const Case& c) {
  double f = 0;
  for (size_t l = 0; l + 1 < c.sizes.size(); ++l) f += 2.0 * c.batch * c.sizes[l] * c.sizes[l + 1] * (l == 0 ? 2 : 3);
  return f;
}

int default_steps(const Case& c) { return std::clamp(static_cast<int>(60e9 / gemm_flops(c) + 0.5), 5, 2000); }
int warmup_steps(int steps) { return std::clamp(steps / 2, 2, 50); }

std::string describe(const Case& c) {
  std::string s = "MLP " + std::to_string(c.sizes[0]);
  for (size_t i = 1; i < c.sizes.size(); ++i) s += "-" + std::to_string(c.sizes[i]);
  return fmt::format("{}, batch {}", s, c.batch);
}

// ---- the children: one framework's step, timed ------------------------------

// amp: the forward and loss under bfloat16 autocast, with a GradScaler.
std::function<void()> make_halfgrad_step(const Case& c, bool amp) {
  hg::manual_seed(0);
  auto model = std::make_shared<hg::nn::Sequential>();
  for (size_t i = 0; i + 1 < c.sizes.size(); ++i) {
    if (i > 0) model->emplace_back<hg::nn::ReLU>();
    model->emplace_back<hg::nn::Linear>(c.sizes[i], c.sizes[i + 1]);
  }
  auto optimizer = std::make_shared<hg::optim::SGD>(model->parameters(), hg::optim::SGDOptions{.lr = kLr});
  auto criterion = std::make_shared<hg::nn::CrossEntropyLoss>();
  auto scaler = std::make_shared<hg::amp::GradScaler>(hg::amp::GradScalerOptions{.enabled = amp});
  auto x = hg::randn({c.batch, c.sizes.front()});
  auto y = hg::randint(0, c.sizes.back(), {c.batch});
  return [=] {
    optimizer->zero_grad(/*set_to_none=*/true);
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16, /*enabled=*/amp);
      loss = (*criterion)(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*optimizer);
    scaler->update();
  };
}

std::function<void()> make_libtorch_step(const Case& c, bool amp, int threads) {
#ifdef HALFGRAD_BENCH_LIBTORCH
  void* lib = dlopen(HALFGRAD_BENCH_LIBTORCH_MODULE, RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(fmt::format("dlopen {}: {}", HALFGRAD_BENCH_LIBTORCH_MODULE, dlerror()));
  auto make = reinterpret_cast<bench_make_libtorch_step_fn>(dlsym(lib, "bench_make_libtorch_step"));
  if (!make) throw std::runtime_error("bench_make_libtorch_step not found");
  std::function<void()> step;
  char error[512] = "";
  if (!make(c.sizes.data(), static_cast<int>(c.sizes.size()), c.batch, kLr, threads, amp, &step, error, sizeof error))
    throw std::runtime_error(error);
  return step;
#else
  (void)c, (void)amp, (void)threads;
  throw std::runtime_error("built without LibTorch");
#endif
}

std::function<void()> make_floor(const Case& c, bool amp) {
#ifdef HALFGRAD_BENCH_ONEDNN
  return bench::make_onednn_floor(c.sizes, c.batch, /*bf16=*/amp);
#else
  (void)c, (void)amp;
  throw std::runtime_error("built without oneDNN");
#endif
}

// The command line (CLI11: --help lists it; an unknown option or a bad
// number is an error, not a silent default).
struct Options {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int rounds = 4, calib_passes = 2, steps = 0;  // steps 0: scaled with each case's work
  double max_wait = 300;
  std::vector<std::string> cases{"seed", "w256", "w512", "w1024", "w2048", "w4096"};
  std::vector<std::string> frameworks{"halfgrad", "libtorch", "pytorch", "floor"};
  std::string child, case_name, mode;  // the hidden child mode
  int warmup = 0;
};

// `--child FW --case C --mode M --steps N --warmup W --threads T`: prints the
// step times and '#' lines (bench::report_timed_steps).
int child_main(const Options& o) {
  const auto c = find_case(o.case_name);
  if (!c) return fmt::print(stderr, "unknown case {}\n", o.case_name), 2;
  const bool amp = o.mode == "amp";
  omp_set_num_threads(o.threads);
  try {
    std::function<void()> step = o.child == "halfgrad" ? make_halfgrad_step(*c, amp)
                                 : o.child == "libtorch" ? make_libtorch_step(*c, amp, o.threads)
                                 : o.child == "floor"    ? make_floor(*c, amp)
                                                         : throw std::runtime_error("unknown framework " + o.child);
    bench::report_timed_steps(step, o.steps, o.warmup);
  } catch (const std::exception& e) {
    fmt::print(stderr, "child failed: {}\n", e.what());
    return 1;
  }
  return 0;
}

// ---- the parent: configurations, runs ---------------------------------------

const char* const kFrameworks[] = {"halfgrad", "libtorch", "pytorch", "floor"};

bool uses_openblas(const std::string& fw) { return fw == "libtorch" || fw == "pytorch"; }

// The environment a child gets (an empty value: unset, or Debian's default).
struct Config {
  std::string coretype, wait;  // OPENBLAS_CORETYPE, OMP_WAIT_POLICY
  std::string malloc;          // "": glibc's; "jemalloc" or "tcmalloc" through LD_PRELOAD
  std::string blas;            // "": Debian's pthread OpenBLAS; "openmp": its OpenMP build (LD_LIBRARY_PATH)
  std::string label() const {
    auto or_dash = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
    return fmt::format("CORETYPE={:<10} WAIT={:<7} malloc={:<8} blas={}", or_dash(coretype), or_dash(wait),
                       malloc.empty() ? "glibc" : malloc, blas.empty() ? "pthread" : blas);
  }
  std::string short_label(const std::string& fw) const {
    std::string s = "OMP_WAIT_POLICY=" + (wait.empty() ? std::string("unset") : wait);
    if (uses_openblas(fw))
      s += ", OPENBLAS_CORETYPE=" + (coretype.empty() ? std::string("unset") : coretype) + ", " +
           (malloc.empty() ? "glibc malloc" : malloc) + ", OpenBLAS " + (blas.empty() ? "pthread" : blas);
    return s;
  }
  auto operator<=>(const Config&) const = default;
};

// The folder of the system's shared libraries (the one libc was loaded from:
// /lib/x86_64-linux-gnu on Debian), where the allocators and OpenBLAS's builds are.
// LD_PRELOAD for Config::malloc ("" for glibc's, or where the library is missing).
std::string malloc_library(const std::string& name) {
  if (name.empty()) return "";
  return bench::system_lib(name == "jemalloc" ? "libjemalloc.so.2" : "libtcmalloc_minimal.so.4");
}

// jemalloc's settings in PyTorch's CPU launcher (torch.backends.xeon.run_cpu).
// By default jemalloc 5 hands freed pages back to the OS over time (and at
// once for an allocation of 8 MB or more): at w2048 and w4096 the LibTorch
// float32 step took 7.8k and 24.5k page faults a step with it, 3x its time,
// while the calibration at w1024 had picked jemalloc. Decay -1 keeps the pages
// (the launcher's older 9000000000 ms still faulted 8.1k times a step here).
// Our own environment's MALLOC_CONF, if set, wins.
std::string jemalloc_conf() {
  const char* inherited = std::getenv("MALLOC_CONF");
  return inherited && *inherited
             ? inherited
             : "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1";
}

// The folder of OpenBLAS's OpenMP build (Debian's libopenblas0-openmp), "" if missing.
std::string openblas_openmp_dir() {
  const std::string lib = bench::system_lib("openblas-openmp/libopenblas.so.0");
  return lib.empty() ? "" : lib.substr(0, lib.rfind('/'));
}

// `var`'s value in our environment with `first` put in front (sep-separated).
std::string prepend_env(const char* var, const std::string& first, char sep) {
  if (first.empty()) return "";
  const char* now = std::getenv(var);
  return now && *now ? first + sep + now : first;
}

std::set<std::string> cpu_flags() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      return {std::istream_iterator<std::string>(words), {}};
    }
  return {};
}

// OPENBLAS_CORETYPE candidates: unset (OpenBLAS detects), the one our own
// environment sets (if any), SkylakeX and Cooperlake where the CPU has them.
std::vector<std::string> coretypes() {
  const auto flags = cpu_flags();
  std::vector<std::string> c{""};
  if (const char* inherited = std::getenv("OPENBLAS_CORETYPE"); inherited && *inherited) c.push_back(inherited);
  if (flags.count("avx512f")) c.push_back("SkylakeX");
  if (flags.count("avx512_bf16")) c.push_back("Cooperlake");
  std::sort(c.begin() + 1, c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// The threading and BLAS settings this process was given (the children get them too, but for the ones we set).
std::string inherited_env() {
  std::string out;
  for (char** e = environ; *e; ++e)
    for (const char* prefix : {"OMP_", "GOMP_", "OPENBLAS_", "DNNL_", "ONEDNN_", "KMP_", "LD_PRELOAD=", "LD_LIBRARY_PATH=",
                               "MALLOC_CONF="})
      if (std::strncmp(*e, prefix, std::strlen(prefix)) == 0) out += std::string(out.empty() ? "" : " ") + *e;
  return out.empty() ? "none" : out;
}

// What the OpenBLAS-based anchors may be given beyond the wait policy, where installed.
std::vector<std::string> mallocs() {
  std::vector<std::string> m{""};
  for (const char* name : {"jemalloc", "tcmalloc"})
    if (!malloc_library(name).empty()) m.push_back(name);
  return m;
}
std::vector<std::string> blas_builds() {
  std::vector<std::string> b{""};
  if (!openblas_openmp_dir().empty()) b.push_back("openmp");
  return b;
}

// The calibration's configurations for `fw`. Stage 1: halfgrad and the floor
// try the wait policies (all they have); LibTorch and PyTorch the allocators x
// OpenBLAS's builds, at the default core type and wait policy. Stage 2 (the
// anchors only), from their stage-1 choice `b`: core types x wait policies.
// Allocator and build go first: with glibc's malloc the anchors' width steps
// are dominated by page faults (docs/performance.md), which would hide the
// core type's and the wait policy's effect.
std::vector<Config> configs_for(const std::string& fw, int stage, const Config& b = {}) {
  std::vector<Config> out;
  if (!uses_openblas(fw)) {
    if (stage == 1)
      for (const char* wait : {"", "ACTIVE", "PASSIVE"}) out.push_back({"", wait});
  } else if (stage == 1) {
    for (const auto& m : mallocs())
      for (const auto& bl : blas_builds()) out.push_back({"", "", m, bl});
  } else {
    for (const auto& core : coretypes())
      for (const char* wait : {"", "ACTIVE", "PASSIVE"}) out.push_back({core, wait, b.malloc, b.blas});
  }
  return out;
}

// A shared machine: a block that ran while other work kept more than
// kQuietLoad cores busy (0.03 s of /proc/stat's 10 ms ticks of slack over the
// block) is run again once the machine is quiet, twice at most, while the
// run's waiting budget (--max-wait seconds) lasts.
constexpr double kQuietLoad = 0.25;

struct Runner {
  std::string self;  // this binary
  int threads;
  double wait_budget_s;
  double waited_s = 0;
  int reruns = 0, loaded = 0;  // runs repeated, runs kept though other work ran beside them

  // Waits (while the budget lasts) until other work keeps under kQuietLoad cores busy.
  void wait_for_quiet() {
    while (waited_s < wait_budget_s) {
      if (bench::machine_load(1.0) < kQuietLoad) return;
      waited_s += 1.0;
    }
  }

  bench::ChildRun run(const std::string& fw, const std::string& mode, const Case& c, int steps, int warmup,
                      const Config& cfg, bool blas_verbose = false) {
    bench::ChildRun r;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (attempt > 0) ++reruns, wait_for_quiet();
      r = run_once(fw, mode, c, steps, warmup, cfg, blas_verbose);
      if (!r.ok || r.other_load < kQuietLoad + 0.03 / std::max(r.wall_s, 0.05) || waited_s >= wait_budget_s) break;
    }
    if (r.ok && r.other_load >= kQuietLoad) ++loaded;
    return r;
  }

  bench::ChildRun run_once(const std::string& fw, const std::string& mode, const Case& c, int steps, int warmup,
                           const Config& cfg, bool blas_verbose) const {
    std::vector<std::string> argv;
    if (fw == "pytorch") {
      std::string sizes;
      for (int s : c.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
      argv = {"/usr/bin/python3", std::string(HALFGRAD_BENCH_DIR) + "/pytorch_cpu_step.py", "--sizes", sizes,
              "--batch", std::to_string(c.batch)};
    } else {
      argv = {self, "--child", fw, "--case", c.name};
    }
    argv.insert(argv.end(), {"--mode", mode, "--steps", std::to_string(steps), "--warmup", std::to_string(warmup),
                             "--threads", std::to_string(threads)});
    bench::Env env{{"OPENBLAS_CORETYPE", cfg.coretype},
                   {"OMP_WAIT_POLICY", cfg.wait},
                         {"OMP_NUM_THREADS", std::to_string(threads)},
                   {"OPENBLAS_NUM_THREADS", std::to_string(threads)},
                   {"OPENBLAS_VERBOSE", blas_verbose ? "2" : ""}};
    // only where the library is there (the configurations are made only then): an empty
    // value would unset what our environment has
    if (const std::string lib = malloc_library(cfg.malloc); !lib.empty()) {
      env["LD_PRELOAD"] = prepend_env("LD_PRELOAD", lib, ':');
      if (cfg.malloc == "jemalloc") env["MALLOC_CONF"] = jemalloc_conf();
    }
    if (const std::string dir = cfg.blas == "openmp" ? openblas_openmp_dir() : ""; !dir.empty())
      env["LD_LIBRARY_PATH"] = prepend_env("LD_LIBRARY_PATH", dir, ':');
    auto r = bench::run_child(argv, env);
    if (!r.ok) {
      const std::string tail = r.err.size() > 400 ? r.err.substr(r.err.size() - 400) : r.err;
      fmt::print("  ! {} {} {} failed: {}\n", fw, mode, c.name, tail.empty() ? "(no output)" : tail);
    }
    return r;
  }
};

// What OpenBLAS said about its core on stderr: "Core: X", after "Core not found: Y" when it fell back.
std::string openblas_core(const std::string& err) {
  std::istringstream lines(err);
  std::string core, missing;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Core not found: ", 0) == 0) missing = line.substr(16);
    else if (line.rfind("Core: ", 0) == 0) core = line.substr(6);
  }
  if (core.empty()) return "?";
  return missing.empty() ? core : fmt::format("{} (after \"Core not found: {}\": a fallback)", core, missing);
}

// ---- calibration -----------------------------------------------------------

using Key = std::tuple<std::string, std::string, std::string>;  // regime case, framework, mode

struct Calibration {
  std::map<Key, Config> best;
  std::string regime(const Case& c) const { return c.name == "seed" ? "seed" : "w1024"; }
  Config config(const Case& c, const std::string& fw, const std::string& mode) const {
    auto it = best.find({regime(c), fw, mode});
    return it == best.end() ? Config{} : it->second;
  }
};

using CalTable = std::map<Config, std::map<std::pair<std::string, std::string>, double>>;  // -> (fw, mode) -> ms
using Tries = std::map<std::pair<std::string, std::string>, std::vector<Config>>;      // (fw, mode) -> configs

// One pass over the configurations to try (outermost: each framework's tries
// spread over the pass) on case c; notes what OpenBLAS reported per core type in `cores`.
CalTable calibration_pass(Runner& runner, const Case& c, const Tries& tries, int steps, int warmup,
                          std::map<std::string, std::string>& cores) {
  std::set<Config> all;
  for (const auto& [key, cfgs] : tries) all.insert(cfgs.begin(), cfgs.end());
  CalTable table;
  for (const auto& cfg : all)
    for (const auto& [key, cfgs] : tries) {
      if (std::find(cfgs.begin(), cfgs.end(), cfg) == cfgs.end()) continue;
      const auto& [fw, mode] = key;
      const bool verbose = uses_openblas(fw);
      const auto r = runner.run(fw, mode, c, steps, warmup, cfg, verbose);
      if (verbose && !cores.count(cfg.coretype) && !r.err.empty()) cores[cfg.coretype] = openblas_core(r.err);
      table[cfg];  // a row even when the run failed
      if (r.ok) table[cfg][key] = median(r.ms);
    }
  return table;
}

// For every framework and mode the stage tried: the fastest of the stage's own
// measurements (a configuration kept from an earlier stage is measured again
// in the next, so every choice compares runs made at about the same time).
void keep_fastest(const CalTable& stage_table, const Tries& tries, const std::string& regime, Calibration& cal) {
  for (const auto& [key, cfgs] : tries) {
    double best = 1e300;
    for (const auto& [cfg, row] : stage_table)
      if (auto it = row.find(key); it != row.end() && it->second < best)
        best = it->second, cal.best[{regime, key.first, key.second}] = cfg;
  }
}

void print_calibration(const CalTable& table, const Case& c, const std::vector<std::string>& fws,
                       const Calibration& cal) {
  fmt::print("  {:<62}", "");
  for (const auto& fw : fws) fmt::print(" {:>9} {:>9}", fw.substr(0, 8), fw.substr(0, 8));
  fmt::print("\n  {:<62}", "");
  for (size_t i = 0; i < fws.size(); ++i) fmt::print(" {:>9} {:>9}", kModes[0], kModes[1]);
  fmt::print("\n");
  for (const auto& [cfg, row] : table) {
    fmt::print("  {:<62}", cfg.label());
    for (const auto& fw : fws)
      for (const char* mode : kModes) {
        auto it = row.find({fw, mode});
        if (it == row.end()) fmt::print(" {:>9}", "");
        else fmt::print(" {:>8.3f}{}", it->second, cal.config(c, fw, mode) == cfg ? "*" : " ");
      }
    fmt::print("\n");
  }
}

// Tries every configuration on the w1024 step (for the width cases) and the
// seed step (for seed), `passes` times, keeps the fastest per framework and mode.
Calibration calibrate(Runner& runner, const std::vector<Case>& cases, const std::vector<std::string>& fws,
                      int passes) {
  Calibration cal;
  std::set<std::string> regimes;
  for (auto& c : cases) regimes.insert(cal.regime(c));
  std::map<std::string, std::string> cores;  // OPENBLAS_CORETYPE -> what OpenBLAS reported
  for (const auto& regime : regimes) {
    const Case c = *find_case(regime);
    const int steps = std::max(12, default_steps(c) / 4), warmup = warmup_steps(default_steps(c));
    fmt::print("\ncalibration on {} ({}): {} steps after {} warm-up, median ms/step, the lower of {} passes; -: unset; * = kept\n",
               regime, describe(c), steps, warmup, passes);
    CalTable table;  // what is printed: each configuration's latest stage
    for (int stage = 1; stage <= 2; ++stage) {
      Tries tries;
      for (const auto& fw : fws)
        for (const char* mode : kModes)
          if (auto cfgs = configs_for(fw, stage, cal.config(c, fw, mode)); !cfgs.empty()) tries[{fw, mode}] = cfgs;
      if (tries.empty()) break;
      CalTable stage_table;
      for (int p = 0; p < passes; ++p)  // a burst of other work can only slow a pass down: keep the faster
        for (const auto& [cfg, row] : calibration_pass(runner, c, tries, steps, warmup, cores))
          for (const auto& [key, ms] : row) {
            auto [it, fresh] = stage_table[cfg].try_emplace(key, ms);
            if (!fresh) it->second = std::min(it->second, ms);
          }
      keep_fastest(stage_table, tries, regime, cal);
      for (const auto& [cfg, row] : stage_table)
        for (const auto& [key, ms] : row) table[cfg][key] = ms;
    }
    print_calibration(table, c, fws, cal);
  }
  if (!cores.empty()) {
    fmt::print("OpenBLAS's core (OPENBLAS_VERBOSE=2):\n");
    for (auto& [type, core] : cores) fmt::print("  OPENBLAS_CORETYPE={}: {}\n", type.empty() ? "unset" : type, core);
  }
  return cal;
}

// ---- measured rounds and the report -------------------------------------------

struct Series {  // one variant of one case over the rounds
  std::vector<double> all, rss_kb, minflt, other_load;
  std::map<int, double> round_median;  // round -> its median (a failed run leaves a gap)
  Config config;
  bool ok() const { return !all.empty(); }
  double ms() const { return median(all); }  // the median step time
};

using Results = std::map<std::tuple<std::string, std::string, std::string>, Series>;  // case, framework, mode

struct Ratio {
  double value = 0, lo = 0, hi = 0;
  bool ok = false;
};

// a / b round by round (each round's medians: the same machine load), and
// the median, min and max of those ratios.
Ratio ratio(const Series& a, const Series& b) {
  Ratio r;
  std::vector<double> q;
  for (const auto& [round, ms] : a.round_median)
    if (auto it = b.round_median.find(round); it != b.round_median.end()) q.push_back(ms / it->second);
  if (q.empty()) return r;
  const auto [lo, hi] = std::minmax_element(q.begin(), q.end());
  r.lo = *lo, r.hi = *hi, r.value = median(q), r.ok = true;
  return r;
}

std::string show(const Ratio& r) { return r.ok ? fmt::format("{:.2f}x [{:.2f}-{:.2f}]", r.value, r.lo, r.hi) : "n/a"; }

const Series& series(const Results& res, const std::string& c, const std::string& fw, const std::string& mode) {
  static const Series none;
  auto it = res.find({c, fw, mode});
  return it == res.end() ? none : it->second;
}

// Minor page faults per step above which a variant re-faults its memory every step.
constexpr double kFaultyStep = 1000;

void print_case(const Results& res, const Calibration& cal, const Case& c, const std::vector<std::string>& fws,
                int steps) {
  const double gflop = gemm_flops(c) / 1e9;
  fmt::print("\n{}: {}; {:.3f} GFLOP of GEMMs per step; {} timed steps per round, {} warm-up\n", c.name, describe(c),
             gflop, steps, warmup_steps(steps));
  fmt::print("  {:<17} {:>9} {:>19} {:>8} {:>9} {:>11} {:>5}  {}\n", "variant", "ms/step", "[round min-max]",
             "GFLOP/s", "peak RSS", "minflt/step", "load", "configuration");
  for (const char* mode : kModes)
    for (const auto& fw : fws) {
      const Series& s = series(res, c.name, fw, mode);
      const std::string name = fmt::format("{} {}", fw, mode);
      if (!s.ok()) {
        fmt::print("  {:<17} {:>9}\n", name, "n/a");
        continue;
      }
      std::vector<double> rounds;
      for (const auto& [round, ms] : s.round_median) rounds.push_back(ms);
      const auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end());
      fmt::print("  {:<17} {:>9.3f} {:>19} {:>8.1f} {:>6.0f} MB {:>11.1f} {:>5.2f}  {}\n", name, s.ms(),
                 fmt::format("[{:.3f}-{:.3f}]", *lo, *hi), gflop / s.ms() * 1e3, median(s.rss_kb) / 1024,
                 median(s.minflt), median(s.other_load), s.config.short_label(fw));
      // re-faulting its memory every step: likely not its best time (the width
      // cases run the configuration calibrated at w1024)
      if (median(s.minflt) > kFaultyStep)
        fmt::print("  ! {} took {:.0f} page faults a step{}\n", name, median(s.minflt),
                   cal.regime(c) != c.name
                       ? fmt::format(" here, with the configuration calibrated on {}: not a fair time", cal.regime(c))
                       : "");
    }
}

struct Target {
  std::string case_name, what, mode_a, fw_a, mode_b, fw_b;  // a / b
  bool at_most;                                             // a / b <= bound, else >=
  double bound;
};

std::vector<Target> targets() {
  return {
      {"w1024", "float32: halfgrad / oneDNN floor", "float32", "halfgrad", "float32", "floor", true, 1.10},
      {"w1024", "AMP: halfgrad / bf16 oneDNN floor", "amp", "halfgrad", "amp", "floor", true, 1.30},
      {"w1024", "halfgrad AMP speed-up over float32", "float32", "halfgrad", "amp", "halfgrad", false, 2.5},
      {"w1024", "float32: halfgrad / libtorch", "float32", "halfgrad", "float32", "libtorch", true, 1.00},
      {"w1024", "AMP: halfgrad / pytorch eager", "amp", "halfgrad", "amp", "pytorch", true, 1.00},
      {"seed", "float32: halfgrad / pytorch eager", "float32", "halfgrad", "float32", "pytorch", true, 0.20},
      {"seed", "float32: halfgrad / libtorch", "float32", "halfgrad", "float32", "libtorch", true, 0.35},
      {"seed", "AMP: halfgrad / pytorch eager", "amp", "halfgrad", "amp", "pytorch", true, 0.15},
  };
}

void print_summary(const Results& res, const std::vector<Case>& cases, const std::vector<std::string>& fws) {
  fmt::print("\nsummary: median ms/step (all timed steps); ratios: median [min-max] of the same-round ratios\n");
  fmt::print("AMP: halfgrad = bf16 autocast + GradScaler; LibTorch, PyTorch = bf16 autocast only (1.13 has no CPU "
             "GradScaler); floor = bf16 GEMMs\n");
  fmt::print("{:<6} {:<8}", "case", "mode");
  for (const auto& fw : fws) fmt::print(" {:>9}", fw);
  const bool has_hg = std::find(fws.begin(), fws.end(), "halfgrad") != fws.end();
  std::vector<std::string> anchors;  // the ratio columns: halfgrad / each other framework run
  for (const auto& fw : fws)
    if (has_hg && fw != "halfgrad") anchors.push_back(fw);
  for (const auto& fw : anchors) fmt::print(" {:>20}", "halfgrad/" + fw);
  const bool has_floor = std::find(fws.begin(), fws.end(), "floor") != fws.end();
  fmt::print(" {:>20} {:>20}\n", has_hg ? "AMP speed-up" : "", has_floor ? "floor AMP speed-up" : "");
  for (const auto& c : cases)
    for (const char* mode : kModes) {
      fmt::print("{:<6} {:<8}", c.name, mode);
      for (const auto& fw : fws) {
        const Series& s = series(res, c.name, fw, mode);
        if (s.ok()) fmt::print(" {:>9.3f}", s.ms());
        else fmt::print(" {:>9}", "n/a");
      }
      const Series& hg = series(res, c.name, "halfgrad", mode);
      for (const auto& fw : anchors) fmt::print(" {:>20}", show(ratio(hg, series(res, c.name, fw, mode))));
      if (std::string(mode) == "amp") {
        if (has_hg) fmt::print(" {:>20}", show(ratio(series(res, c.name, "halfgrad", "float32"), hg)));
        else fmt::print(" {:>20}", "");
        if (has_floor)  // bf16 over float32 GEMMs alone: the most AMP can give here
          fmt::print(" {:>20}", show(ratio(series(res, c.name, "floor", "float32"), series(res, c.name, "floor", "amp"))));
      }
      fmt::print("\n");
    }
  auto selected = [&](const std::string& name) {
    return std::find_if(cases.begin(), cases.end(), [&](auto& c) { return c.name == name; }) != cases.end();
  };
  if (selected("seed") || selected("w1024")) fmt::print("\ntargets\n");
  const Ratio ceiling = ratio(series(res, "w1024", "floor", "float32"), series(res, "w1024", "floor", "amp"));
  for (const auto& t : targets()) {
    if (!selected(t.case_name)) continue;
    const Ratio r = ratio(series(res, t.case_name, t.fw_a, t.mode_a), series(res, t.case_name, t.fw_b, t.mode_b));
    std::string verdict = !r.ok ? "n/a" : (t.at_most ? r.value <= t.bound : r.value >= t.bound) ? "PASS" : "MISS";
    // AMP's speed-up cannot pass where the GEMMs' own (the floors') is below
    // the bound in every round: a CPU without AMX, whose bf16 dot products
    // gain ~1.9x over float32 FMAs (docs/performance.md)
    if (verdict == "MISS" && t.mode_a != t.mode_b && ceiling.ok && ceiling.hi < t.bound)
      verdict += fmt::format(" (out of reach on this CPU: its floors gain {:.2f}x at most)", ceiling.hi);
    fmt::print("  {:<6} {:<36} {:>20}  {} {:.2f}x  {}\n", t.case_name, t.what, show(r), t.at_most ? "<=" : ">=",
               t.bound, verdict);
  }
  if (ceiling.ok)
    fmt::print("  (w1024: the floor's own bf16 speed-up over float32, the most AMP can give on this CPU: {})\n",
               show(ceiling));
}

// The measured rounds: every variant of every case once a round, the order
// reversed every other round.
Results run_rounds(Runner& runner, const Calibration& cal, const std::vector<Case>& cases,
                   const std::vector<std::string>& fws, int rounds, const std::function<int(const Case&)>& steps_of,
                   std::chrono::steady_clock::time_point t0) {
  Results res;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::tuple<const Case*, std::string, std::string>> order;
    for (const auto& c : cases)
      for (const char* mode : kModes)
        for (const auto& fw : fws) order.emplace_back(&c, fw, mode);
    if (r % 2) std::reverse(order.begin(), order.end());
    for (const auto& [c, fw, mode] : order) {
      const int steps = steps_of(*c);
      Series& s = res[{c->name, fw, mode}];
      s.config = cal.config(*c, fw, mode);
      const auto run = runner.run(fw, mode, *c, steps, warmup_steps(steps), s.config);
      if (!run.ok) continue;
      s.all.insert(s.all.end(), run.ms.begin(), run.ms.end());
      s.round_median[r] = median(run.ms);
      if (run.meta.count("peak_rss_kb")) s.rss_kb.push_back(std::stod(run.meta.at("peak_rss_kb")));
      if (run.meta.count("minflt_per_step")) s.minflt.push_back(std::stod(run.meta.at("minflt_per_step")));
      s.other_load.push_back(run.other_load);
    }
    fmt::print("round {}/{} done ({:.0f} s)\n", r + 1, rounds,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
  return res;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("/proc/self/exe");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"CPU training-step benchmark: halfgrad, LibTorch, PyTorch and the oneDNN floor side by side, "
               "float32 and bf16 AMP (docs/performance.md)"};
  app.add_option("--cases", o.cases, "seed, w256, w512, w1024, w2048, w4096")->delimiter(',')->capture_default_str();
  app.add_option("--frameworks", o.frameworks, "halfgrad, libtorch, pytorch, floor")->delimiter(',')
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps per block (default: ~60 GFLOP of GEMMs, 5 to 2000)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "interleaved rounds")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o.threads, "threads for every framework")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-wait", o.max_wait, "seconds to wait in all for other work to stop")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--calib-passes", o.calib_passes, "passes of each calibration (the lower median counts)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  // the child mode, which the parent execs for every block of steps
  app.add_option("--child", o.child)->group("");
  app.add_option("--case", o.case_name)->group("");
  app.add_option("--mode", o.mode)->group("");
  app.add_option("--warmup", o.warmup)->group("");
  CLI11_PARSE(app, argc, argv);
  if (!o.child.empty()) return child_main(o);

  const auto t0 = std::chrono::steady_clock::now();
  const int threads = o.threads, rounds = o.rounds;
  std::vector<Case> cases;
  for (const auto& name : o.cases) {
    if (auto c = find_case(name)) cases.push_back(*c);
    else return fmt::print(stderr, "unknown case {} (seed, w256, w512, w1024, w2048, w4096)\n", name), 2;
  }
  std::vector<std::string> fws;
  for (const auto& fw : o.frameworks) {
    if (std::find(std::begin(kFrameworks), std::end(kFrameworks), fw) == std::end(kFrameworks))
      return fmt::print(stderr, "unknown framework {} (halfgrad, libtorch, pytorch, floor)\n", fw), 2;
#ifndef HALFGRAD_BENCH_LIBTORCH
    if (fw == "libtorch") { fmt::print("(LibTorch not found at build time: scripts/setup --bench installs it)\n"); continue; }
#endif
#ifndef HALFGRAD_BENCH_ONEDNN
    if (fw == "floor") { fmt::print("(built without oneDNN: no floor)\n"); continue; }
#endif
    fws.push_back(fw);
  }
  auto steps_of = [&](const Case& c) { return o.steps > 0 ? o.steps : default_steps(c); };

  fmt::print("cpu_train_step: {} threads (OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = {}), {} rounds; cases {}; "
             "frameworks {}\n", threads, threads, rounds, fmt::join(o.cases, ","),
             fmt::join(fws, ","));
  fmt::print("every block of steps in a fresh exec'd process with its framework's calibrated environment; rounds "
             "interleave the variants\n");
  fmt::print("inherited environment: {}\n", inherited_env());
  if (!malloc_library("jemalloc").empty()) fmt::print("jemalloc runs with MALLOC_CONF={}\n", jemalloc_conf());
  Runner runner{self_path(), threads, o.max_wait};
  fmt::print("other work keeps {:.2f} cores busy now; ", bench::machine_load(1.0));
  runner.wait_for_quiet();
  fmt::print("waited {:.0f} s for under {:.2f}\n", runner.waited_s, kQuietLoad);
  const Calibration cal = calibrate(runner, cases, fws, o.calib_passes);

  const Results res = run_rounds(runner, cal, cases, fws, rounds, steps_of, t0);
  fmt::print("\nper case: ms/step = median of all timed steps [min-max of the per-round medians]; peak RSS, minor "
             "page faults per timed step and load (cores busy with other work while the child ran): medians over the "
             "rounds\n");
  for (const auto& c : cases) print_case(res, cal, c, fws, steps_of(c));
  print_summary(res, cases, fws);
  fmt::print("\nshared machine: waited {:.0f} s (of --max-wait {:.0f}) for other work to stop, re-ran {} runs; "
             "{} runs still ran beside other work (the load column: median cores busy with it)\n",
             runner.waited_s, runner.wait_budget_s, runner.reruns, runner.loaded);
  fmt::print("total {:.0f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}
