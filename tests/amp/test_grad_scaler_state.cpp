// GradScaler settings: the constructor, load_state_dict and update(new_scale)
// accept the same values, and nothing is changed by a rejected one.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;
using hg::amp::GradScaler;

namespace {
std::map<std::string, double> good_state() {
  return {{"scale", 1024.0}, {"growth_factor", 2.0}, {"backoff_factor", 0.5}, {"growth_interval", 100.0},
          {"_growth_tracker", 7.0}};
}
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("GradScaler load_state_dict rejects what the constructor rejects", "[amp][scaler][state]") {
  struct Bad {
    const char* key;
    double value;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"scale", 0.0, "scale"},           {"scale", -1.0, "scale"},         {"scale", kNaN, "scale"},
      {"scale", kInf, "scale"},          {"scale", 1e-50, "float32"},      {"scale", 1e39, "float32"},
      {"growth_factor", 1.0, "growth_factor"}, {"growth_factor", 0.5, "growth_factor"},
      {"growth_factor", kNaN, "growth_factor"}, {"growth_factor", kInf, "growth_factor"},
      {"backoff_factor", 1.0, "backoff_factor"}, {"backoff_factor", 2.0, "backoff_factor"},
      {"backoff_factor", 0.0, "backoff_factor"}, {"backoff_factor", kNaN, "backoff_factor"},
      {"growth_interval", 0.0, "growth_interval"}, {"growth_interval", -3.0, "growth_interval"},
      {"growth_interval", kNaN, "growth_interval"}, {"growth_interval", 2.5, "growth_interval"},
      {"growth_interval", 1e300, "growth_interval"}, {"_growth_tracker", 1e300, "_growth_tracker"},
      {"_growth_tracker", -1.0, "_growth_tracker"}, {"_growth_tracker", kNaN, "_growth_tracker"},
      {"_growth_tracker", 0.5, "_growth_tracker"}, {"_growth_tracker", 100.0, "_growth_tracker"},
  };
  for (bool initialised : {false, true}) {
    for (const auto& b : bad) {
      INFO(b.key << " = " << b.value << (initialised ? " (after a first scale())" : ""));
      GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
      if (initialised) (void)scaler.scale(hg::ones({}));
      auto st = good_state();
      st[b.key] = b.value;
      CHECK_THROWS_WITH(scaler.load_state_dict(st), Contains("load_state_dict") && Contains(b.says));
      // nothing changed
      CHECK(scaler.get_scale() == 8.0);
      CHECK(scaler.options().growth_interval == 3);
      CHECK(scaler.growth_tracker() == 0);
    }
  }
  GradScaler ok;
  ok.load_state_dict(good_state());
  CHECK(ok.state_dict() == good_state());
}

TEST_CASE("A state dict with scale 0 can no longer turn the parameters into NaN", "[amp][scaler][state]") {
  auto w = hg::ones({2}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 0.1});
  GradScaler scaler;
  auto st = good_state();
  st["scale"] = 0.0;
  CHECK_THROWS_AS(scaler.load_state_dict(st), hg::Error);
  scaler.scale(hg::sum(w)).backward();
  CHECK(scaler.step(opt).applied());
  HG_CHECK_CLOSE(w, (std::vector<double>{0.9, 0.9}));
}

TEST_CASE("GradScaler constructor and update(new_scale) take only positive finite float32 scales",
          "[amp][scaler][state]") {
  CHECK_THROWS_WITH(GradScaler({.init_scale = 1e-50}), Contains("float32"));
  CHECK_THROWS_WITH(GradScaler({.init_scale = kNaN}), Contains("init_scale"));
  CHECK_THROWS_WITH(GradScaler({.growth_factor = kNaN}), Contains("growth_factor"));
  CHECK_THROWS_WITH(GradScaler({.backoff_factor = 0.0}), Contains("backoff_factor"));
  for (bool initialised : {false, true}) {
    GradScaler scaler({.init_scale = 8.0});
    if (initialised) (void)scaler.scale(hg::ones({}));
    for (double s : {0.0, -2.0, kNaN, kInf, 1e-50, 1e39}) {
      INFO(s);
      CHECK_THROWS_WITH(scaler.update(s), Contains("update") && Contains("new_scale"));
      CHECK(scaler.get_scale() == 8.0);
    }
    scaler.update(1e-30);  // tiny, but a normal float32
    CHECK(static_cast<float>(scaler.get_scale()) == 1e-30f);
  }
}
