#pragma once
// The global random generator: one seeded stream for rand, randn, randint
// and dropout masks. manual_seed makes a run reproducible.
#include <cstdint>
#include <random>

namespace halfgrad {

void manual_seed(uint64_t seed);
// The generator itself (CPU; CUDA tensors are filled on the host and copied).
std::mt19937_64& default_generator();

}  // namespace halfgrad
