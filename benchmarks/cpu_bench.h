#pragma once
// What the CPU benchmarks share: each variant runs in a child process of its
// own (two frameworks' OpenMP pools in one process, spinning between parallel
// regions, slow each other down by up to 3x), PyTorch runs as a Python child
// that prints one time per line, and blocks of steps of every variant are
// interleaved so all see the same machine load. Ratios, not absolute times.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

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

// Runs a Python benchmark script of this folder with PyTorch 1.13 (Debian's
// /usr/bin/python3) and reads one time in milliseconds per line.
inline std::vector<double> time_python(const std::string& script_and_args) {
  const std::string cmd = fmt::format("/usr/bin/python3 {}/{} 2>/dev/null", HALFGRAD_BENCH_DIR, script_and_args);
  std::vector<double> t;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return t;
  double ms;
  while (std::fscanf(pipe, " %lf", &ms) == 1) t.push_back(ms);
  pclose(pipe);
  return t;
}

}  // namespace bench
