// kernels::PlanCache, the one cache of library plans (cuBLASLt, cuDNN,
// oneDNN): one plan per key even when threads race, "nothing for this key"
// kept, the bound, and plans that outlive a reset of the map.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <halfgrad/kernels/plan_cache.h>

using halfgrad::kernels::PlanCache;

namespace {
struct Plan {
  int key;
};
}  // namespace

TEST_CASE("PlanCache makes a plan once per key and says which call made it", "[kernels][plan_cache]") {
  PlanCache<int, Plan> cache;
  int makes = 0;
  auto make = [&](int k) {
    ++makes;
    return std::make_shared<const Plan>(Plan{k * 10});
  };
  bool made = false;
  const auto a = cache.get(3, make, &made);
  CHECK(made);
  REQUIRE(a);
  CHECK(a->key == 30);
  const auto b = cache.get(3, make, &made);
  CHECK_FALSE(made);
  CHECK(b == a);  // the same plan, not an equal one
  cache.get(4, make);
  CHECK(makes == 2);
  CHECK(cache.size() == 2);
}

TEST_CASE("PlanCache keeps 'no plan' (nullptr) so the library is asked once", "[kernels][plan_cache]") {
  PlanCache<int, Plan> cache;
  int makes = 0;
  auto none = [&](int) -> std::shared_ptr<const Plan> {
    ++makes;
    return nullptr;
  };
  CHECK(cache.get(1, none) == nullptr);
  bool made = true;
  CHECK(cache.get(1, none, &made) == nullptr);
  CHECK_FALSE(made);
  CHECK(makes == 1);
}

TEST_CASE("PlanCache: a make that throws caches nothing, and the next request makes again", "[kernels][plan_cache]") {
  PlanCache<int, Plan> cache;
  int makes = 0;
  auto flaky = [&](int k) -> std::shared_ptr<const Plan> {
    if (++makes == 1) throw std::runtime_error("planning failed");
    return std::make_shared<const Plan>(Plan{k});
  };
  CHECK_THROWS_AS(cache.get(7, flaky), std::runtime_error);
  CHECK(cache.size() == 0);
  const auto p = cache.get(7, flaky);
  REQUIRE(p);
  CHECK(p->key == 7);
  CHECK(makes == 2);
}

TEST_CASE("PlanCache starts over past its bound; a held plan stays alive", "[kernels][plan_cache]") {
  PlanCache<int, Plan> cache(2);
  auto make = [](int k) { return std::make_shared<const Plan>(Plan{k}); };
  const auto first = cache.get(1, make);
  cache.get(2, make);
  CHECK(cache.size() == 2);
  cache.get(3, make);  // full: the map is cleared, then 3 goes in
  CHECK(cache.size() == 1);
  CHECK(first->key == 1);  // still valid: the caller holds it
  bool made = false;
  const auto again = cache.get(1, make, &made);
  CHECK(made);  // planned anew after the reset
  CHECK(again != first);
  CHECK(again->key == 1);
}

TEST_CASE("PlanCache: threads racing on one new key make one plan and all get it", "[kernels][plan_cache]") {
  PlanCache<int, Plan> cache;
  std::atomic<int> makes{0};
  std::atomic<bool> go{false};
  auto slow = [&](int k) {
    makes.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // widen the race
    return std::make_shared<const Plan>(Plan{k});
  };
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<const Plan>> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      got[static_cast<size_t>(i)] = cache.get(5, slow);
    });
  go.store(true);
  for (auto& t : threads) t.join();
  CHECK(makes.load() == 1);
  for (const auto& p : got) CHECK(p == got[0]);
  REQUIRE(got[0]);
  CHECK(got[0]->key == 5);
}
