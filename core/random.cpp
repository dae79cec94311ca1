#include "core/random.h"

namespace halfgrad {

namespace {
std::mt19937_64 g_generator(0x5eed);
}

void manual_seed(uint64_t seed) { g_generator.seed(seed); }
std::mt19937_64& default_generator() { return g_generator; }

}  // namespace halfgrad
