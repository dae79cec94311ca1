#include <halfgrad/core/generator.h>

#include <mutex>
#include <random>

namespace halfgrad {

struct Generator::State {
  std::mutex mutex;
  rng::PhiloxState philox{kDefaultSeed, 0};
};

Generator::Generator(Device device) : state_(std::make_shared<State>()), device_(device) {}

Generator& Generator::manual_seed(uint64_t seed) { return set_state({seed, 0}); }

uint64_t Generator::seed() {
  std::random_device device;
  const uint64_t s = (static_cast<uint64_t>(device()) << 32) | device();
  manual_seed(s);
  return s;
}

uint64_t Generator::initial_seed() const { return get_state().seed; }

rng::PhiloxState Generator::get_state() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->philox;
}

Generator& Generator::set_state(const rng::PhiloxState& state) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->philox = state;
  return *this;
}

rng::PhiloxState Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const rng::PhiloxState s = state_->philox;
  state_->philox.offset += n;
  return s;
}

}  // namespace halfgrad
