// get_rng_state / set_rng_state: restoring a saved state replays the same
// draws, whatever was drawn in between; manual_seed still resets everything.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;

TEST_CASE("set_rng_state replays the draws after get_rng_state", "[core][random]") {
  hg::manual_seed(42);
  (void)hg::randn({7});
  const hg::rng::PhiloxState saved = hg::get_rng_state();
  CHECK(saved.seed == 42);
  CHECK(saved.offset == 7);
  const hg::Tensor a = hg::randn({5, 3}), b = hg::rand({4}, hg::float64), c = hg::randint(0, 100, {6});
  (void)hg::randn({1000});  // moves on
  hg::set_rng_state(saved);
  CHECK(hg::get_rng_state() == saved);
  CHECK(hgtest::same_bits(hg::randn({5, 3}), a));
  CHECK(hgtest::same_bits(hg::rand({4}, hg::float64), b));
  CHECK(hgtest::same_bits(hg::randint(0, 100, {6}), c));
  // Another seed's state restores that stream, and initial_seed follows it.
  hg::manual_seed(7);
  const hg::Tensor d = hg::randn({3});
  hg::manual_seed(1);
  hg::set_rng_state({7, 0});
  CHECK(hg::initial_seed() == 7);
  CHECK(hgtest::same_bits(hg::randn({3}), d));
  CHECK(!hgtest::same_bits(hg::randn({3}), d));
  if (!hg::cuda::is_available())
    hgtest::expect_errors({{"no CUDA generator", [] { hg::cuda::get_rng_state(0); }, {"cuda:0"}},
                           {"no CUDA generator", [] { hg::cuda::set_rng_state({1, 2}, 0); }, {"cuda:0"}}});
}

TEST_CASE("cuda::set_rng_state replays the draws after cuda::get_rng_state", "[core][random][cuda]") {
  hg::manual_seed(42);
  (void)hg::randn({7}, hg::Device::cuda());
  const hg::rng::PhiloxState saved = hg::cuda::get_rng_state(0);
  CHECK(saved.seed == 42);
  CHECK(saved.offset == 7);
  const hg::Tensor a = hg::randn({5, 3}, hg::Device::cuda());
  (void)hg::rand({1000}, hg::Device::cuda());
  hg::cuda::set_rng_state(saved, 0);
  CHECK(hg::cuda::get_rng_state(0) == saved);
  CHECK(hgtest::same_bits(hg::randn({5, 3}, hg::Device::cuda()), a));
  // The CPU generator is separate.
  const auto cpu = hg::get_rng_state();
  hg::cuda::set_rng_state({1, 2}, 0);
  CHECK(hg::get_rng_state() == cpu);
  hgtest::expect_errors({{"no such device", [] { hg::cuda::get_rng_state(1000); }, {"no device cuda:1000"}}});
}
