// hg::Generator (torch.Generator): a stream of its own for rand, randn,
// randint, randperm (and multinomial: tests/ops/test_multinomial.cpp), the
// global generator's numbers for the same seed, untouched by and not touching
// the global stream; manual_seed, seed(), get_state/set_state, shared copies,
// the device check. [cuda]: a CUDA generator gives the CPU's numbers.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;
using hgtest::same_bits;

namespace {
// One draw of each factory that takes a generator (nullopt: the global one).
std::vector<Tensor> draws(std::optional<hg::Generator> g, hg::Device device = hg::Device::cpu()) {
  return {hg::rand({3, 5}, g, device), hg::randn({17}, g, hg::TensorOptions(hg::kDouble, device)),
          hg::randint(-4, 9, {2, 6}, g, device), hg::randperm(40, g, device)};
}
void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("draw " << i);
    CHECK(same_bits(a[i].cpu(), b[i].cpu()));
  }
}
}  // namespace

TEST_CASE("A Generator draws the global generator's numbers for the same seed, on a stream of its own",
          "[core][random][generator]") {
  hg::manual_seed(21);
  const std::vector<Tensor> global = draws(std::nullopt);
  const hg::rng::PhiloxState global_after = hg::get_rng_state();

  hg::manual_seed(5);  // the global stream elsewhere: the generator does not read it
  const hg::rng::PhiloxState before = hg::get_rng_state();
  hg::Generator g;
  g.manual_seed(21);
  check_same(draws(g), global);
  CHECK(g.get_state() == global_after);  // the same counters used
  CHECK(hg::get_rng_state() == before);  // the global stream did not move

  // Interleaving generator draws leaves the global draws bit-identical.
  hg::manual_seed(21);
  const Tensor first = hg::randn({10});
  (void)hg::randn({1000}, g);
  const Tensor second = hg::randn({10});
  hg::manual_seed(21);
  CHECK(same_bits(hg::randn({10}), first));
  CHECK(same_bits(hg::randn({10}), second));
}

TEST_CASE("Generator: default seed, manual_seed, seed(), get_state/set_state, shared copies",
          "[core][random][generator]") {
  hg::Generator g;
  CHECK(g.initial_seed() == 67280421310721ull);  // PyTorch's default
  CHECK(g.device() == hg::Device::cpu());
  CHECK(&g.manual_seed(8) == &g);  // chains, as PyTorch's returns the generator
  CHECK(g.get_state() == hg::rng::PhiloxState{8, 0});
  (void)hg::rand({4}, g);
  const hg::rng::PhiloxState saved = g.get_state();
  CHECK(saved == hg::rng::PhiloxState{8, 4});
  const Tensor a = hg::randn({6}, g);
  (void)hg::rand({100}, g);
  g.set_state(saved);
  CHECK(same_bits(hg::randn({6}, g), a));
  // A copy is the same generator (at::Generator's handle semantics): its draws move both.
  hg::Generator copy = g;
  (void)hg::rand({10}, copy);
  CHECK(g.get_state() == copy.get_state());
  CHECK(g.get_state().offset == saved.offset + 6 + 10);
  // seed(): a fresh seed, set and returned; two in a row differ (64 random bits)
  const uint64_t s1 = g.seed();
  CHECK(g.get_state() == hg::rng::PhiloxState{s1, 0});
  CHECK(g.initial_seed() == s1);
  CHECK(g.seed() != s1);
  // set_state sets initial_seed, as the global set_rng_state does
  g.set_state({77, 12});
  CHECK(g.initial_seed() == 77);
}

TEST_CASE("A Generator of another device type is an Error naming both", "[core][random][generator][errors]") {
  const hg::Generator cuda_gen(hg::kCUDA);
  CHECK(cuda_gen.device().is_cuda());
  hgtest::expect_errors({
      {"rand", [&] { hg::rand({2}, cuda_gen); }, {"rand", "expected a 'cpu' device type for generator but found 'cuda'"}},
      {"randn", [&] { hg::randn({2}, cuda_gen); }, {"randn", "hg::Generator(cpu)"}},
      {"randint", [&] { hg::randint(0, 3, {2}, cuda_gen); }, {"randint", "found 'cuda'"}},
      {"randperm", [&] { hg::randperm(5, cuda_gen); }, {"randperm", "found 'cuda'"}},
  });
}

TEST_CASE("A CUDA Generator draws the CPU's numbers for the same seed", "[cuda][random][generator]") {
  const hg::Device cuda = hg::Device::cuda();
  hg::Generator cpu_gen, cuda_gen(cuda);
  cpu_gen.manual_seed(31);
  cuda_gen.manual_seed(31);
  const std::vector<Tensor> on_cpu = draws(cpu_gen), on_cuda = draws(cuda_gen, cuda);
  CHECK(on_cuda[0].device() == cuda);
  CHECK(same_bits(on_cuda[0].cpu(), on_cpu[0]));  // rand
  CHECK(same_bits(on_cuda[2].cpu(), on_cpu[2]));  // randint
  // randn: libm's log and cos against CUDA's (within an ulp of double, tests/ops/test_cuda_random.cpp)
  const auto a = hgtest::values(on_cuda[1].cpu()), b = hgtest::values(on_cpu[1]);
  for (size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).epsilon(1e-14).margin(1e-14));
  // randperm is another algorithm on CUDA (a sort of random keys): a permutation all the same
  auto p = hgtest::ivalues(on_cuda[3]);
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 40; ++i) CHECK(p[static_cast<size_t>(i)] == i);
  CHECK(cuda_gen.get_state() == cpu_gen.get_state());
  // the device's global generator did not move
  hg::manual_seed(3);
  const Tensor x = hg::rand({8}, cuda);
  hg::manual_seed(3);
  (void)hg::rand({8}, cuda_gen);
  CHECK(same_bits(hg::rand({8}, cuda).cpu(), x.cpu()));
}
