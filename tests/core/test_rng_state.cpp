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
}
