#pragma once
// hg::Generator: PyTorch's torch.Generator, a random stream of its own for
// rand, randn, randint, randperm and multinomial (their `generator` argument),
// independent of the global one that manual_seed seeds (core/random.h), so
// drawing from it neither moves nor depends on the global stream.
//
// Philox4x32-10 with state (seed, offset), as the global generator: a draw of
// n elements takes counters offset .. offset+n-1 and moves the offset on by n,
// so the same seed gives the same numbers on the CPU and on CUDA. The state is
// kept on the host for either device type: a CUDA draw receives its
// (seed, offset) as a kernel argument (PyTorch's CUDA generators do this too),
// which means a draw from a Generator cannot be captured into a CUDA graph (a
// replay would repeat its numbers); that is an Error.
//
// A Generator is a handle, as at::Generator: copies share one state. Its
// methods are thread-safe.
//
//   hg::Generator g;                       // torch.Generator()
//   g.manual_seed(42);                     // g.manual_seed(42)
//   auto x = hg::randn({2, 3}, g);         // torch.randn(2, 3, generator=g)
//   auto state = g.get_state();            // g.get_state() ... g.set_state(state)
#include <cstdint>
#include <memory>

#include <halfgrad/core/device.h>
#include <halfgrad/core/random.h>

namespace halfgrad {

class Generator {
 public:
  // PyTorch's default seed for a new generator (c10::default_rng_seed_val).
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;

  // torch.Generator(device="cpu"). The device type is checked against the
  // tensors it draws for (a CUDA generator for CUDA tensors, as PyTorch).
  explicit Generator(Device device = Device::cpu());

  Device device() const { return device_; }
  // Seeds the stream and restarts it (offset 0); returns *this, as PyTorch.
  Generator& manual_seed(uint64_t seed);
  // torch.Generator.seed(): a non-deterministic seed (std::random_device),
  // set as by manual_seed and returned.
  uint64_t seed();
  uint64_t initial_seed() const;
  // The whole state, as (seed, offset) rather than PyTorch's byte tensor:
  // set_state(get_state()) makes the next draws repeat. set_state sets
  // initial_seed() to state.seed, as the global set_rng_state does.
  rng::PhiloxState get_state() const;
  Generator& set_state(const rng::PhiloxState& state);

  // Reserves n counters for one draw (what the kernels call): the state
  // before, the offset moved on by n.
  rng::PhiloxState reserve(uint64_t n);

 private:
  struct State;
  std::shared_ptr<State> state_;
  Device device_;
};

}  // namespace halfgrad
