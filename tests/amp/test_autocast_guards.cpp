// Autocast guards destroyed out of order (held in std::optional or on the
// heap): the state always is what the guards still alive say, and once all
// are gone it is what it was before the first.
#include <catch2/catch.hpp>

#include <optional>

#include <halfgrad.h>

namespace hg = halfgrad;
using hg::DeviceType;
using hg::amp::autocast;
using hg::amp::autocast_dtype;
using hg::amp::is_autocast_enabled;

TEST_CASE("An outer autocast guard destroyed first leaves the inner one in charge", "[amp][autocast][guards]") {
  REQUIRE_FALSE(is_autocast_enabled(DeviceType::CPU));
  SECTION("both enabled, different dtypes") {
    std::optional<autocast> outer, inner;
    outer.emplace(DeviceType::CPU, hg::bfloat16);
    inner.emplace(DeviceType::CPU, hg::float16);
    outer.reset();
    CHECK(is_autocast_enabled(DeviceType::CPU));  // inner is still open
    CHECK(autocast_dtype(DeviceType::CPU) == hg::float16);
    inner.reset();
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
    CHECK(autocast_dtype(DeviceType::CPU) == hg::bfloat16);  // the default again
  }
  SECTION("inner turns autocast off") {
    std::optional<autocast> outer, inner;
    outer.emplace(DeviceType::CPU);
    inner.emplace(DeviceType::CPU, std::nullopt, /*enabled=*/false);
    outer.reset();
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
    inner.reset();
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
  }
  SECTION("the middle of three goes first") {
    // c, a CUDA region, is on where CUDA is available and off (PyTorch's
    // warning) where it is not: either way it is a region of its own, and
    // the CPU state must not leak into it nor its into the CPU's.
    const bool cuda = hg::cuda::is_available();
    std::optional<autocast> a, b, c;
    a.emplace(DeviceType::CPU, hg::bfloat16);
    b.emplace(DeviceType::CPU, std::nullopt, /*enabled=*/false, /*cache_enabled=*/false);
    c.emplace(DeviceType::CUDA);
    CHECK(c->enabled() == cuda);
    b.reset();
    CHECK(is_autocast_enabled(DeviceType::CPU));  // a's setting, b is gone
    CHECK(is_autocast_enabled(DeviceType::CUDA) == cuda);
    CHECK(hg::amp::is_autocast_cache_enabled());
    a.reset();
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
    CHECK(is_autocast_enabled(DeviceType::CUDA) == cuda);
    CHECK(hg::amp::autocast_disabled_by_region(DeviceType::CUDA) == !cuda);
    c.reset();
    CHECK_FALSE(is_autocast_enabled(DeviceType::CUDA));
    CHECK_FALSE(hg::amp::autocast_disabled_by_region(DeviceType::CUDA));
  }
  SECTION("the cast cache lives until the last guard goes") {
    auto w = hg::randn({4, 4}).requires_grad_();
    std::optional<autocast> outer, inner;
    outer.emplace(DeviceType::CPU);
    inner.emplace(DeviceType::CPU);
    (void)hg::matmul(w, w);
    outer.reset();
    CHECK(hg::amp::cast_cache_size() == 1);
    inner.reset();
    CHECK(hg::amp::cast_cache_size() == 0);
  }
  CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
  CHECK_FALSE(is_autocast_enabled(DeviceType::CUDA));
  CHECK(hg::amp::is_autocast_cache_enabled());
}
