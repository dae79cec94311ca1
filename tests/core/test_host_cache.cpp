// The caching host allocator (core/host_cache.h): a freed block serves the next
// request of its size class; alignment; the counters; the limit; empty_cache;
// caching off; large blocks serving smaller requests and given back on a miss;
// and a training loop in steady state that asks the system for
// nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <unistd.h>

#include <halfgrad.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace hg = halfgrad;
namespace hm = halfgrad::host_memory;

namespace {
// Caching on (it is off by default under AddressSanitizer), restored after.
struct CachingOn {
  bool was = hm::caching();
  CachingOn() { hm::set_caching(true); }
  ~CachingOn() { hm::set_caching(was); }
};
}  // namespace

TEST_CASE("host cache: a freed block serves the next request of its class, 64-byte aligned", "[core][host_cache]") {
  CachingOn on;
  hm::empty_cache();
  for (size_t n : {size_t{1}, size_t{64}, size_t{65}, size_t{1000}, size_t{4096}, size_t{40000}, size_t{3} << 20}) {
    INFO(n);
    void* p = hm::allocate(n);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 1, n);  // all of it is ours
    const auto before = hm::stats();
    hm::release(p, n);
    CHECK(hm::stats().cached_bytes > before.cached_bytes);
    void* q = hm::allocate(n);  // the same class: the same block, from the cache
    CHECK(q == p);
    CHECK(hm::stats().cache_hits == before.cache_hits + 1);
    CHECK(hm::stats().system_allocations == before.system_allocations);
    hm::release(q, n);
  }
  // sizes in one class share blocks; the next class does not take them
  void* a = hm::allocate(1000);  // class 1024
  hm::release(a, 1000);
  void* b = hm::allocate(1024);
  CHECK(b == a);
  hm::release(b, 1024);
  void* c = hm::allocate(1025);  // class 1280
  CHECK(c != a);
  hm::release(c, 1025);
  // nor does a smaller class (only large blocks serve smaller requests)
  void* d = hm::allocate(700);  // class 768
  CHECK(d != a);
  hm::release(d, 700);
  hm::empty_cache();
  CHECK(hm::stats().cached_bytes == 0);
}

TEST_CASE("host cache: counters, peak, limit, caching off", "[core][host_cache]") {
  CachingOn on;
  hm::empty_cache();
  const auto s0 = hm::stats();
  {
    hg::Tensor t = hg::empty({1000}, hg::TensorOptions(hg::kFloat));
    CHECK(hm::stats().in_use_bytes == s0.in_use_bytes + 4000);
    hm::reset_peak();
    hg::Tensor u = hg::empty({2000}, hg::TensorOptions(hg::kFloat));
    CHECK(hm::stats().peak_in_use_bytes >= s0.in_use_bytes + 12000);
  }
  CHECK(hm::stats().in_use_bytes == s0.in_use_bytes);
  CHECK(hm::stats().cached_bytes >= 12000);
  // the default: a quarter of the memory the process may use (the machine's,
  // or less under a cgroup limit), at least 1 GiB: a large model's
  // activations are cached whole, no page faults a step
  const uint64_t quarter = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 4;
  CHECK(hm::limit() >= uint64_t{1} << 30);
  CHECK(hm::limit() <= std::max(quarter, uint64_t{1} << 30));
  // a limit below what is cached frees the excess; nothing is cached past it
  const uint64_t old_limit = hm::limit();
  hm::set_limit(0);
  CHECK(hm::stats().cached_bytes == 0);
  {
    hg::Tensor t = hg::empty({1000}, hg::TensorOptions(hg::kFloat));
  }
  CHECK(hm::stats().cached_bytes == 0);
  hm::set_limit(old_limit);
  // caching off: every free goes to the system
  hm::set_caching(false);
  const auto s1 = hm::stats();
  {
    hg::Tensor t = hg::empty({1000}, hg::TensorOptions(hg::kFloat));
  }
  CHECK(hm::stats().cached_bytes == 0);
  CHECK(hm::stats().system_frees == s1.system_frees + 1);
}

TEST_CASE("host cache: a training loop in steady state asks the system for nothing", "[core][host_cache]") {
  CachingOn on;
  hg::manual_seed(0);
  hg::nn::Sequential model(hg::nn::Linear(20, 64), hg::nn::ReLU(), hg::nn::Linear(64, 5));
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const hg::Tensor x = hg::randn({32, 20}), y = hg::randint(0, 5, {32});
  auto step = [&] {
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::kCPU);
      loss = hg::cross_entropy(model(x), y);
    }
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();
  const auto before = hm::stats();
  for (int i = 0; i < 5; ++i) step();
  const auto after = hm::stats();
  CHECK(after.allocations > before.allocations);               // the steps allocate...
  CHECK(after.system_allocations == before.system_allocations);  // ...all of it from the cache
  CHECK(after.in_use_bytes == before.in_use_bytes);              // and hold nothing more after a step
}

TEST_CASE("host cache: a large request takes a cached block of up to twice its size, which goes back to its class",
          "[core][host_cache]") {
  CachingOn on;
  hm::empty_cache();
  const size_t big = size_t{4} << 20;
  void* p = hm::allocate(big);
  hm::release(p, big);
  const auto before = hm::stats();
  void* q = hm::allocate(big / 2);  // its own class is empty: the cached 4 MiB block serves it
  CHECK(q == p);
  CHECK(hm::stats().system_allocations == before.system_allocations);
  CHECK(hm::stats().cached_bytes == 0);
  hm::release(q, big / 2);
  CHECK(hm::stats().cached_bytes == before.cached_bytes);  // back as the 4 MiB block it is
  void* r = hm::allocate(big);
  CHECK(r == p);
  hm::release(r, big);
  // more than twice: not taken (and this miss leaves the 4 MiB block, too big to be given back)
  void* s = hm::allocate(big / 2 - (big / 8));
  CHECK(s != p);
  hm::release(s, big / 2 - (big / 8));
  hm::empty_cache();
  CHECK(hm::stats().cached_bytes == 0);
}

TEST_CASE("host cache: a large miss gives back the cached blocks of half its size up to its size", "[core][host_cache]") {
  CachingOn on;
  hm::empty_cache();
  const size_t big = size_t{8} << 20;
  void* half = hm::allocate(big / 2);
  void* quarter = hm::allocate(big / 4);
  hm::release(half, big / 2);
  hm::release(quarter, big / 4);
  const auto before = hm::stats();
  void* p = hm::allocate(big);  // misses: the half block goes back to the system, the quarter stays
  const auto after = hm::stats();
  CHECK(after.system_allocations == before.system_allocations + 1);
  CHECK(after.system_frees == before.system_frees + 1);
  CHECK(after.cached_bytes < before.cached_bytes);
  CHECK(after.cached_bytes >= big / 4);
  hm::release(p, big);
  hm::empty_cache();
}

// What autocast does to a big Linear's memory, as the allocator sees it: each
// step zero_grad frees the float32 gradient, the forward makes the weight's
// bfloat16 copy (half its size), the backward frees the copy and then makes the
// gradient. After the first step the copy lives in the gradient's block of the
// step before: nothing more is cached than the gradient itself.
TEST_CASE("host cache: a weight copy and its gradient share one block in steady state", "[core][host_cache]") {
  CachingOn on;
  hm::empty_cache();
  const size_t grad_bytes = size_t{16} << 20, copy_bytes = grad_bytes / 2;
  void* grad = nullptr;
  auto step = [&] {
    if (grad) hm::release(grad, grad_bytes);  // zero_grad
    void* copy = hm::allocate(copy_bytes);    // forward
    hm::release(copy, copy_bytes);            // backward: the weight's last read...
    grad = hm::allocate(grad_bytes);          // ...then its gradient
  };
  step();
  const auto first = hm::stats();
  CHECK(first.cached_bytes == 0);  // the copy's block went back when the gradient's missed
  for (int i = 0; i < 4; ++i) step();
  const auto later = hm::stats();
  CHECK(later.system_allocations == first.system_allocations);
  CHECK(later.cached_bytes == 0);
  hm::release(grad, grad_bytes);
  hm::empty_cache();
}
