// set_num_threads / get_num_threads (kernels/threads.h). OpenMP's thread count
// is per thread (an ICV each thread carries), so setting it on the caller is
// not enough: the setting is a process-wide number plus an epoch, and every CPU
// kernel call (kernels/router.cpp) brings its own thread up to date when the
// epoch moved: one thread-local compare on the fast path.
#include <halfgrad/kernels/threads.h>

#include <atomic>
#include <cstdint>

#include <omp.h>

#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cpu/parallel.h>

namespace halfgrad {

namespace {
std::atomic<int> g_threads{0};  // 0: never set (OpenMP's default)
}  // namespace

namespace kernels::cpu {
void apply_num_threads_slow() {
  t_threads_epoch = g_threads_epoch.load(std::memory_order_acquire);
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) omp_set_num_threads(n);
}
}  // namespace kernels::cpu

void set_num_threads(int n) {
  HG_CHECK(n >= 1, "set_num_threads: the number of threads must be at least 1, got {}", n);
  g_threads.store(n, std::memory_order_relaxed);
  kernels::cpu::g_threads_epoch.fetch_add(1, std::memory_order_release);
  kernels::cpu::apply_num_threads_slow();  // the caller at once (and get_num_threads agrees)
}

int get_num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace halfgrad
