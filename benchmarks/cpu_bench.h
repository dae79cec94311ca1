#pragma once
// What the CPU benchmarks share: each variant runs in a child process of its
// own (two frameworks' OpenMP pools in one process, spinning between parallel
// regions, slow each other down by up to 3x), PyTorch runs as a Python child
// that prints one time per line, and blocks of steps of every variant are
// interleaved so all see the same machine load. Ratios, not absolute times.
//
// Two ways to get a child: fork (in_child, time_in_child: the child inherits
// everything this process has loaded and set up), or exec (run_child: a fresh
// process with its own environment, for libraries that read theirs when they
// load: OpenBLAS's OPENBLAS_CORETYPE, OpenMP's OMP_WAIT_POLICY). An exec'd
// child reports with report_timed_steps: one step time in ms per line, then
// '#key value' metadata lines.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double time_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `body` in a child process and returns the numbers it produced (empty
// when the child failed): each variant gets a process of its own.
inline std::vector<double> in_child(const std::function<std::vector<double>()>& body) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    const std::vector<double> t = body();
    const uint64_t n = t.size();
    bool ok = write(fd[1], &n, sizeof n) == static_cast<ssize_t>(sizeof n);
    const auto bytes = static_cast<ssize_t>(t.size() * sizeof(double));
    ok = ok && write(fd[1], t.data(), t.size() * sizeof(double)) == bytes;
    _exit(ok ? 0 : 1);
  }
  close(fd[1]);
  auto read_all = [&](void* dst, size_t bytes) {
    size_t got = 0;
    while (got < bytes) {
      const ssize_t r = read(fd[0], static_cast<char*>(dst) + got, bytes - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  uint64_t n = 0;
  std::vector<double> t;
  if (read_all(&n, sizeof n) && n < (uint64_t(1) << 32)) {
    t.resize(n);
    if (!read_all(t.data(), n * sizeof(double))) t.clear();
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) t.clear();
  return t;
}

// Builds a step with `make` in a child process, warms it up, times `steps`
// calls and returns the milliseconds of each (empty when the child failed).
inline std::vector<double> time_in_child(const std::function<std::function<void()>()>& make, int steps,
                                         int warmup = 8) {
  return in_child([&] {
    auto step = make();
    for (int i = 0; i < warmup; ++i) step();  // primitive caches, allocator, page faults
    std::vector<double> t;
    for (int i = 0; i < steps; ++i) t.push_back(time_ms(step));
    return t;
  });
}

// The system's library folder (where libc is), for the libraries a
// benchmark preloads or points a child at.
inline std::string system_lib_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&std::printf), &info) && info.dli_fname) {
    const std::string path = info.dli_fname;
    return path.substr(0, path.rfind('/'));
  }
  return "/usr/lib/x86_64-linux-gnu";
}

// `name` in the system's library folder, or under /usr where /lib is not
// merged into it; "" where it is in neither.
inline std::string system_lib(const std::string& name) {
  const std::string dir = system_lib_dir();
  for (const std::string& d : {dir, "/usr" + dir})
    if (access((d + "/" + name).c_str(), R_OK) == 0) return d + "/" + name;
  return "";
}

// The caching malloc PyTorch's CPU performance guide recommends, preloaded
// into its process when installed (`scripts/setup --bench` adds it): with
// glibc's malloc PyTorch frees and re-faults its activations every step,
// which on a 2-core Zen 5 VM made its MobileNetV3 step 1.5x slower (32x32,
// batch 256, AMP channels-last: 257 against 165 ms). halfgrad has its own
// caching host allocator. "" when not installed.
inline std::string python_malloc() { return system_lib("libtcmalloc_minimal.so.4"); }

// The environment a PyTorch command line starts with: python_malloc() put in
// front of any LD_PRELOAD the caller set ("" when there is nothing to preload).
inline std::string python_env_prefix() {
  const std::string lib = python_malloc();
  if (lib.empty()) return "";
  const char* inherited = std::getenv("LD_PRELOAD");
  return "LD_PRELOAD=" + lib + (inherited && *inherited ? std::string(":") + inherited : std::string()) + " ";
}

// Runs a Python benchmark script of this folder with PyTorch 1.13 (Debian's
// /usr/bin/python3), with python_malloc() preloaded, and reads one time in
// milliseconds per line.
inline std::vector<double> time_python(const std::string& script_and_args) {
  const std::string cmd =
      fmt::format("{}/usr/bin/python3 {}/{} 2>/dev/null", python_env_prefix(), HALFGRAD_BENCH_DIR, script_and_args);
  std::vector<double> t;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return t;
  double ms;
  while (std::fscanf(pipe, " %lf", &ms) == 1) t.push_back(ms);
  pclose(pipe);
  return t;
}

// ---- exec'd children ------------------------------------------------------

// In an exec'd child: `warmup` untimed steps, then `steps` timed ones; prints
// each time in ms on a line of its own, then the child's peak RSS and its minor
// page faults per timed step as '#' lines (pytorch_cpu_step.py prints the same).
inline void report_timed_steps(const std::function<void()>& step, int steps, int warmup) {
  for (int i = 0; i < warmup; ++i) step();
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::vector<double> t;
  t.reserve(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) t.push_back(time_ms(step));
  getrusage(RUSAGE_SELF, &after);
  for (double ms : t) std::printf("%.4f\n", ms);
  std::printf("#peak_rss_kb %ld\n", after.ru_maxrss);
  std::printf("#minflt_per_step %.2f\n", double(after.ru_minflt - before.ru_minflt) / std::max(1, steps));
  std::fflush(stdout);
}

// Seconds of CPU time the whole machine spent busy (everything but idle and
// iowait; steal counts as busy: a VM's host took it) since boot, /proc/stat.
inline double machine_busy_s() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double v[8] = {};
  f >> cpu;
  for (double& x : v) f >> x;
  const double busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Cores busy with other work (other processes, a VM's steal) over `seconds`
// while this process idles.
inline double machine_load(double seconds) {
  const double b0 = machine_busy_s();
  usleep(static_cast<useconds_t>(seconds * 1e6));
  return (machine_busy_s() - b0) / seconds;
}

struct ChildRun {
  bool ok = false;
  std::vector<double> ms;                    // one per timed step
  std::map<std::string, std::string> meta;  // '#key value' lines
  std::string err;                           // what it wrote to stderr
  double other_load = 0;                     // cores busy with other work while it ran
  double wall_s = 0;                         // how long it ran
};

// Environment changes for a child: name -> value; an empty value unsets it.
using Env = std::map<std::string, std::string>;

// Runs argv[0] (a path) with our environment changed by `env`, reads its
// stdout (step times, '#' lines) and its stderr.
inline ChildRun run_child(const std::vector<std::string>& argv, const Env& env) {
  ChildRun r;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env)
    if (!v.empty()) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  char err_path[] = "/tmp/cpu_bench_stderr_XXXXXX";
  const int err_fd = mkostemp(err_path, O_CLOEXEC);  // CLOEXEC: the child keeps only its dup2'd copies
  int out[2];
  if (err_fd < 0 || pipe2(out, O_CLOEXEC) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err_fd, STDERR_FILENO);
  pid_t pid = 0;
  const double busy0 = machine_busy_s();
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err_fd);
  if (rc == 0) {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    const double child_cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    r.other_load = std::max(0.0, (machine_busy_s() - busy0 - child_cpu) / std::max(wall, 1e-3));
    r.wall_s = wall;
    r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      if (line[0] == '#') {
        const auto sp = line.find(' ');
        r.meta[line.substr(1, sp - 1)] = sp == std::string::npos ? "" : line.substr(sp + 1);
      } else {
        r.ms.push_back(std::atof(line.c_str()));
      }
    }
  }
  close(out[0]);
  std::ifstream err_file(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err_file), {});
  unlink(err_path);
  if (r.ms.empty()) r.ok = false;
  return r;
}

}  // namespace bench
