#pragma once
// The global random generator: one seeded stream per device for rand, randn,
// randint and dropout masks; manual_seed seeds them all and makes a run
// reproducible. Every generator is Philox4x32-10 (core/philox.h) with state
// (seed, offset): a draw of n elements takes counters offset .. offset+n-1 and
// moves the offset on by n. The CPU's state lives here; a CUDA device's lives
// in device memory (kernels/cuda/random.cu), so drawing on the GPU never syncs and
// a graph replay moves it on like an eager call. Both start at offset 0 after a
// seed, so the same calls give the same numbers on either device.
#include <cstdint>

namespace halfgrad {

void manual_seed(uint64_t seed);
uint64_t initial_seed();  // the seed of the last manual_seed (a fixed default before)

namespace rng {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // first counter of the draw
  bool operator==(const PhiloxState&) const = default;
};

// Reserves n counters of the CPU generator (thread-safe).
PhiloxState cpu_reserve(uint64_t n);

// Bumped by every manual_seed: a device generator whose last seen generation
// differs re-seeds itself (to initial_seed(), offset 0) before its next draw.
uint64_t seed_generation();

}  // namespace rng

// PyTorch's torch.get_rng_state() / torch.set_rng_state() for the CPU
// generator, as its (seed, offset) rather than a byte tensor: a checkpoint
// saves it and a resumed run draws the numbers the uninterrupted one would
// have. set_rng_state changes initial_seed() to state.seed (as PyTorch's
// does) and leaves the CUDA generators alone (torch.cuda.set_rng_state is
// separate there too).
rng::PhiloxState get_rng_state();
void set_rng_state(const rng::PhiloxState& state);

namespace cuda {
// torch.cuda.get_rng_state(device) / torch.cuda.set_rng_state(state, device):
// the generator of cuda:<device>. Each call copies the state between host
// and device and waits for that copy (the state lives in device memory, and
// draws queued before are ordered before it on the current stream). Setting
// a state also counts as this device's seeding, so a later manual_seed still
// re-seeds it. An Error without CUDA, for a device that does not exist, or
// while the current stream is being captured into a graph.
rng::PhiloxState get_rng_state(int device = 0);
void set_rng_state(const rng::PhiloxState& state, int device = 0);
}  // namespace cuda
}  // namespace halfgrad
