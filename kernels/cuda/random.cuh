#pragma once
// How a CUDA kernel draws random numbers (internal; kernels/cuda/random.cu):
// the caller reserves n Philox counters for its draw and its kernel reads
// their (seed, offset) from a PhiloxSource.
#include <cstdint>
#include <functional>

#include <halfgrad/core/generator.h>
#include <halfgrad/core/macros.h>
#include <halfgrad/core/random.h>

namespace halfgrad::kernels::cuda {

// The draw's (seed, offset): the device's global generator, read from device
// memory when the kernel runs (so a captured graph draws new numbers on each
// replay), or a fixed state reserved on the host from a Generator object.
struct PhiloxSource {
  const rng::PhiloxState* device_state = nullptr;
  rng::PhiloxState fixed;
  HG_INLINE rng::PhiloxState get() const { return device_state != nullptr ? *device_state : fixed; }
};

// Calls launch(source) to queue the kernels of one draw of n counters on the
// current stream of `device`, then moves the generator on by n: the device's
// global one (a one-thread kernel after them, ordered after earlier draws on
// other streams) or `generator` (on the host). Draws are serialised. `op`
// names the draw in errors (a Generator's draw being captured into a graph).
void draw_counters(const char* op, int device, uint64_t n, Generator* generator,
                   const std::function<void(const PhiloxSource&)>& launch);

}  // namespace halfgrad::kernels::cuda
