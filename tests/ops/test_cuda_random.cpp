// Random draws on a CUDA device: the same numbers as the CPU backend for the
// same seed and calls (both run core/philox.h), drawn without the host (a
// captured draw replays with new numbers, as eager calls would). Dropout masks:
// tests/ops/test_cuda_ops.cpp. Run only where a GPU is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cstring>
#include <vector>

#include "test_util.h"
#if HALFGRAD_WITH_CUDA
#include "cuda_graph.h"
#endif

namespace hg = halfgrad;
using hg::DType;
using hg::Tensor;
using hg::TensorOptions;
using hgtest::values;

namespace {
const hg::Device kCuda = hg::Device::cuda();

using hgtest::same_bits;
}  // namespace

TEST_CASE("CUDA rand, randn and randint give the CPU's numbers for the same seed", "[cuda][random]") {
  const hg::Shape shape = {1000, 37};  // > one block, odd size
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    hg::manual_seed(9);
    const Tensor u_cpu = hg::rand(shape, dt), n_cpu = hg::randn(shape, dt), i_cpu = hg::randint(-50, 50, shape, dt);
    hg::manual_seed(9);
    const Tensor u = hg::rand(shape, TensorOptions(dt, kCuda)), n = hg::randn(shape, TensorOptions(dt, kCuda)),
                 i = hg::randint(-50, 50, shape, TensorOptions(dt, kCuda));
    CHECK(u.device() == kCuda);
    CHECK(same_bits(u, u_cpu));
    CHECK(same_bits(i, i_cpu));
    // randn's log and cos are libm's on the CPU and CUDA's on the device: equal
    // to within an ulp of double, which the narrower dtypes round away.
    if (dt == DType::Float64) {
      const auto a = values(n.cpu()), b = values(n_cpu);
      for (size_t k = 0; k < a.size(); ++k) REQUIRE(a[k] == Approx(b[k]).epsilon(1e-14).margin(1e-14));
    } else {
      CHECK(same_bits(n, n_cpu));
    }
  }
  hg::manual_seed(10);
  const Tensor big_cpu = hg::randint(0, int64_t{1} << 40, {4096});
  hg::manual_seed(10);
  CHECK(same_bits(hg::randint(0, int64_t{1} << 40, {4096}, kCuda), big_cpu));
}

#if HALFGRAD_WITH_CUDA
TEST_CASE("A CUDA random draw captured in a graph draws new numbers on each replay", "[cuda][random][graph]") {
  hgtest::TestStream stream;
  const int64_t n = 5000;
  hg::manual_seed(11);
  Tensor out = hg::empty({n}, kCuda);
  auto draw = [&] { out.copy_(hg::rand({n}, kCuda)); };
  draw();  // eager: counters [0, n); also seeds the device generator outside the graph
  const Tensor first = out.clone();
  hgtest::Graph graph(stream.get(), draw);  // captured, not run
  graph.replay();                           // [n, 2n)
  const Tensor second = out.clone();
  graph.replay();  // [2n, 3n)
  const Tensor third = out.clone();
  stream.sync();

  hg::manual_seed(11);
  const Tensor cpu = hg::rand({3 * n});
  CHECK(same_bits(first, cpu.narrow(0, 0, n)));
  CHECK(same_bits(second, cpu.narrow(0, n, n)));
  CHECK(same_bits(third, cpu.narrow(0, 2 * n, n)));
}
TEST_CASE("The first CUDA draw after manual_seed cannot be captured: an Error says to draw once first",
          "[cuda][random][graph]") {
  hgtest::TestStream stream;
  hg::manual_seed(21);
  Tensor out = hg::empty({16}, kCuda);
  auto draw = [&] { out.copy_(hg::rand({16}, kCuda)); };
  REQUIRE_THROWS_WITH(hgtest::Graph(stream.get(), draw), Catch::Contains("Draw once before capturing"));
  draw();  // eager: seeds the device generator
  hgtest::Graph graph(stream.get(), draw);
  graph.replay();
  stream.sync();
  hg::manual_seed(21);
  CHECK(same_bits(out, hg::rand({32}).narrow(0, 16, 16)));
}

TEST_CASE("CUDA draws on two streams continue one sequence", "[cuda][random]") {
  hg::manual_seed(22);
  Tensor a, b;
  {
    hgtest::TestStream first;
    a = hg::rand({1000}, kCuda);
  }
  {
    hgtest::TestStream second;  // waits for the first stream's draw, then takes the next counters
    b = hg::rand({1000}, kCuda);
    second.sync();
  }
  hg::manual_seed(22);
  const Tensor cpu = hg::rand({2000});
  CHECK(same_bits(a, cpu.narrow(0, 0, 1000)));
  CHECK(same_bits(b, cpu.narrow(0, 1000, 1000)));
}
#endif
