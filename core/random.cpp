#include <halfgrad/core/random.h>

#include <mutex>

#include <halfgrad/core/error.h>

namespace halfgrad {

namespace {
std::mutex g_mutex;
uint64_t g_seed = 0x5eed;
uint64_t g_offset = 0;
uint64_t g_generation = 0;
}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_seed = seed;
  g_offset = 0;
  ++g_generation;
}

uint64_t initial_seed() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_seed;
}

rng::PhiloxState get_rng_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_seed, g_offset};
}

void set_rng_state(const rng::PhiloxState& state) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_seed = state.seed;
  g_offset = state.offset;
}

namespace rng {

PhiloxState cpu_reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const PhiloxState s{g_seed, g_offset};
  g_offset += n;
  return s;
}

uint64_t seed_generation() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_generation;
}

}  // namespace rng
#ifndef HALFGRAD_WITH_CUDA
// Without CUDA there is no device generator (kernels/cuda/random.cu has the real ones).
namespace cuda {
rng::PhiloxState get_rng_state(int device) {
  fail("cuda::get_rng_state(cuda:{}): this halfgrad was built without CUDA; there is no CUDA generator", device);
}
void set_rng_state(const rng::PhiloxState&, int device) {
  fail("cuda::set_rng_state(cuda:{}): this halfgrad was built without CUDA; there is no CUDA generator", device);
}
}  // namespace cuda
#endif

}  // namespace halfgrad
