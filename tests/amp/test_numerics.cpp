// The log2|x| histogram (amp/numerics.h) against hand-counted values:
// zeros, subnormals of each dtype, the binade edges, float16's range limits,
// inf and NaN; the shares below float16's smallest subnormal and normal; CUDA
// against the CPU where a GPU is present.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Tensor;
using hg::amp::Log2Histogram;

namespace {

double p2(int k) { return std::ldexp(1.0, k); }

Log2Histogram histogram_of(const Tensor& t, bool with_max = false) {
  const Tensor counts = Log2Histogram::zeros(t.device(), with_max);
  hg::amp::accumulate_log2_histogram(t, counts);
  return Log2Histogram::read(counts);
}

}  // namespace

TEST_CASE("log2 histogram: hand-counted bins in every float dtype", "[amp][numerics]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // values every dtype holds exactly (float16: 2^-24 is its smallest subnormal)
  const std::vector<double> v{0.0, -0.0, 1.0, 1.5, -1.99, 2.0, 3.0, p2(-24), p2(-14), p2(-14) * 1.5, 65504.0,
                              p2(-20), inf, -inf, nan, 0.75};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    INFO(hgtest::dname(dt));
    const Log2Histogram h = histogram_of(hgtest::make(v, {4, 4}, dt));
    CHECK(h.total() == 16);
    CHECK(h.zeros_count() == 2);
    CHECK(h.non_finite() == 3);
    CHECK(h.binade(0) == 3);    // 1, 1.5, -1.99
    CHECK(h.binade(1) == 2);    // 2, 3
    CHECK(h.binade(-1) == 1);   // 0.75
    CHECK(h.binade(-24) == 1);  // float16's smallest subnormal
    CHECK(h.binade(-14) == 2);  // float16's smallest normal, and 1.5 of it
    CHECK(h.binade(-20) == 1);
    // 65504, float16's largest: binade 15; bfloat16 (8 significant bits) rounds it up to 2^16
    CHECK(h.binade(15) == (dt == DType::BFloat16 ? 0 : 1));
    CHECK(h.counts[58] == (dt == DType::BFloat16 ? 1 : 0));
    // below float16's smallest normal: 2^-24 and 2^-20; below its smallest subnormal: none
    CHECK(h.below(p2(-14)) == 2);
    CHECK(h.below(p2(-24)) == 0);
    CHECK(h.share_below(p2(-14)) == Approx(2.0 / 16));
  }
}

TEST_CASE("log2 histogram: the edges of the range and each dtype's own subnormals", "[amp][numerics]") {
  // float32 subnormals and values below 2^-40 fall in bin 1; finite values of
  // 2^16 and more (past float16's 65504) in bin 58
  const float denorm = std::numeric_limits<float>::denorm_min();
  const Log2Histogram f = histogram_of(hg::tensor(std::vector<float>{denorm, 1e-38f, std::ldexp(1.0f, -40),
                                                                     std::ldexp(1.0f, -41), 65536.0f, 3e38f,
                                                                     std::ldexp(1.0f, 15) * 1.99f}));
  CHECK(f.counts[1] == 3);      // the subnormal, 1e-38 (~2^-126), 2^-41
  CHECK(f.binade(-40) == 1);    // 2^-40 is the first binade
  CHECK(f.counts[58] == 2);     // 65536, 3e38
  CHECK(f.binade(15) == 1);     // just below 2^16
  CHECK(f.below(p2(-40)) == 3);
  CHECK(f.below(p2(-39)) == 4);
  // float64 beyond float32's range: still finite, not inf
  const Log2Histogram d = histogram_of(hg::tensor(std::vector<double>{1e300, -1e-300, p2(-30)}));
  CHECK(d.counts[58] == 1);
  CHECK(d.counts[1] == 1);
  CHECK(d.binade(-30) == 1);
  CHECK(d.non_finite() == 0);
  // float16's own subnormals: 2^-24 * 3 lies in binade -23
  const Log2Histogram h =
      histogram_of(hgtest::make({p2(-24) * 3, p2(-15), p2(-24) * 1023}, {3}, DType::Float16));
  CHECK(h.binade(-23) == 1);
  CHECK(h.binade(-15) == 2);  // 2^-15 (subnormal) and 1023 * 2^-24 (just below 2^-14)
  CHECK(h.below(p2(-14)) == 3);
}

TEST_CASE("log2 histogram: accumulation, layouts, and what it refuses", "[amp][numerics]") {
  const Tensor counts = Log2Histogram::zeros(hg::Device::cpu());
  const Tensor a = hgtest::uniform({6, 7}, DType::Float32, 0.5, 0.9);  // all in binade -1
  hg::amp::accumulate_log2_histogram(a, counts);
  hg::amp::accumulate_log2_histogram(a.transpose(0, 1), counts);                       // a view: the same values
  hg::amp::accumulate_log2_histogram(a.index({hg::indexing::Slice(), 0}), counts);  // a strided column
  const Log2Histogram h = Log2Histogram::read(counts);
  CHECK(h.total() == 42 + 42 + 6);
  CHECK(h.binade(-1) == 90);
  CHECK_FALSE(h.str().empty());
  // a large tensor split into chunks across threads
  const Tensor big = hg::full({300000}, 0.25);
  CHECK(histogram_of(big).binade(-2) == 300000);
  hgtest::expect_errors({
      {"integer tensor", [] { histogram_of(hg::tensor(std::vector<int64_t>{1, 2})); }, {"not floating"}},
      {"wrong counts", [] { hg::amp::accumulate_log2_histogram(hg::ones({3}), hg::zeros({5}, DType::Int64)); },
       {"int64", "60"}},
      {"threshold not a power of two", [] { Log2Histogram().below(0.3); }, {"power of two", "2^-24"}},
  });
}

TEST_CASE("CUDA log2 histogram matches the CPU", "[amp][numerics][cuda]") {
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    INFO(hgtest::dname(dt));
    // a wide spread of binades, zeros and non-finite values
    Tensor x = (hg::randn({1000, 37}) * hg::exp(hg::randn({1000, 37}) * 8.0)).to(dt);
    x.index_put_({hg::indexing::Slice(0, 10)}, 0.0);
    x.index_put_({10}, std::numeric_limits<double>::infinity());
    const Log2Histogram cpu = histogram_of(x, true), gpu = histogram_of(x.cuda(), true);
    CHECK(cpu.counts == gpu.counts);
    CHECK(cpu.max_abs == gpu.max_abs);
  }
}

TEST_CASE("log2 histogram with the max: the largest finite |x|, inf and NaN left out, across calls",
          "[amp][numerics]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor a = hg::tensor(std::vector<double>{0.5, -3.0, inf, std::nan(""), 0.0}).to(dt);
    const Tensor counts = Log2Histogram::zeros(hg::kCPU, true);
    CHECK(counts.numel() == Log2Histogram::kStatsSize);
    hg::amp::accumulate_log2_histogram(a, counts);
    Log2Histogram h = Log2Histogram::read(counts);
    CHECK(h.max_abs == 3.0);
    CHECK(h.total() == 5);
    CHECK(h.non_finite() == 2);
    hg::amp::accumulate_log2_histogram(hg::tensor(std::vector<double>{-1.0, 2.0}).to(dt), counts);
    CHECK(Log2Histogram::read(counts).max_abs == 3.0);  // a smaller max does not lower it
    hg::amp::accumulate_log2_histogram(hg::tensor(std::vector<double>{-6.5}).to(dt), counts);
    h = Log2Histogram::read(counts);
    CHECK(h.max_abs == 6.5);
    CHECK(h.total() == 8);
    CHECK(histogram_of(a).max_abs == 0.0);  // counts without the max slot
  }
  // a large tensor (several OpenMP chunks) and the max in the last chunk
  Tensor big = hg::full({300000}, 0.25);
  big.index_put_({299999}, -1e30);
  CHECK(histogram_of(big, true).max_abs == 1e30f);
}

TEST_CASE("non_finite_grads names the parameters whose gradients hold inf or NaN", "[amp][numerics]") {
  auto a = hg::ones({3}).requires_grad_(), b = hg::ones({2, 2}).requires_grad_(), c = hg::ones({1}).requires_grad_();
  // a's gradient finite, b's with an inf and a NaN, c without a gradient
  (a * 2.0).sum().backward();
  (b * hgtest::make({1.0, INFINITY, NAN, 1.0}, {2, 2}, DType::Float32)).sum().backward();
  const auto found = hg::amp::non_finite_grads({{"a", a}, {"b", b}, {"c", c}});
  REQUIRE(found.size() == 1);
  CHECK(found[0].name == "b");
  CHECK(found[0].inf == 1);
  CHECK(found[0].nan == 1);
  CHECK(hg::amp::describe(found) == "grad of b (float32[2, 2] cpu) holds 1 inf, 1 NaN");
  CHECK(hg::amp::describe({}) == "no gradient holds inf or NaN");
}
