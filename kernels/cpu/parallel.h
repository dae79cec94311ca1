#pragma once
// When a CPU loop runs on the OpenMP team: one rule for every kernel.
//
// Waking the team, splitting the range and joining costs a few microseconds,
// which is what a loop over ~2^16 floats takes on one core; below that one
// thread is faster (measured on the seed MLP, docs/performance.md, "The
// small-op path"). And a serial loop must not be written as
// `#pragma omp parallel for if (small)`: GCC's libgomp still builds a
// one-thread team for it, a malloc and a free per loop, which was 5% of a
// small training step. parallel_for runs the plain loop instead.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include <omp.h>

namespace halfgrad::kernels::cpu {

// hg::set_num_threads on this thread (kernels/cpu/threads.cpp): the router
// calls it before every CPU kernel; it does something only after a change.
// (inline variables, constant-initialised: the fast path is a TLS load and a
// relaxed load, no wrapper call)
inline std::atomic<uint32_t> g_threads_epoch{0};
inline thread_local uint32_t t_threads_epoch = 0;
void apply_num_threads_slow();
inline void apply_num_threads() {
  if (t_threads_epoch != g_threads_epoch.load(std::memory_order_relaxed)) apply_num_threads_slow();
}

// Work (elements touched, or multiply-adds) below which a loop stays on the calling thread.
constexpr int64_t kParallelWork = int64_t{1} << 16;

inline bool worth_threads(int64_t work) { return work >= kParallelWork; }

// Below this many multiply-adds a oneDNN GEMM runs on the calling thread alone
// (about 10 us of work on one core; threads pay off from there on 2 cores).
// benchmarks/onednn_floor.cpp states the same number: keep them together.
constexpr int64_t kSerialGemmMacs = int64_t{1} << 19;

// f(i) for i in [0, n): on the OpenMP team (static schedule) when `parallel`
// and there is more than one iteration, else a plain loop on this thread.
template <typename F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  if (parallel && n > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// run(begin, count) over [0, n) in chunks of `chunk` elements, the chunks on
// the team when `parallel`: the shape of every flat loop over a tensor's
// elements (casts, ReLU backward on bits, the fused optimizers).
template <typename F>
void for_chunks(int64_t n, int64_t chunk, bool parallel, F&& run) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  parallel_for(chunks, parallel, [&](int64_t c) { run(c * chunk, std::min(chunk, n - c * chunk)); });
}

// omp_set_num_threads(1) for a scope, on this thread only (the setting is per
// thread), and back: for a library call (oneDNN) that picks its own thread
// count from the OpenMP setting.
struct SerialScope {
  int prev = 0;
  explicit SerialScope(bool on) {
    if (on && omp_get_max_threads() > 1) {
      prev = omp_get_max_threads();
      omp_set_num_threads(1);
    }
  }
  ~SerialScope() {
    if (prev > 0) omp_set_num_threads(prev);
  }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;
};

}  // namespace halfgrad::kernels::cpu
