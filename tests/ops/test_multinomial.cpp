// multinomial (torch.multinomial): the distribution of the samples (Pearson's
// chi-square against the normalised weights), with and without replacement,
// every floating dtype, 1-d and 2-d, reproducibility from manual_seed and from
// a Generator, and PyTorch's errors. [cuda]: the CPU's samples for the same seed.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Tensor;

namespace {
// Chi-square critical values at p = 1e-6 (the upper tail of the chi-square
// distribution with df degrees of freedom; even df: sf(x) = e^{-x/2} sum_{i<df/2}
// (x/2)^i / i!). A correct sampler exceeds them once in a million seeds; the
// seeds are fixed, so the tests are deterministic.
constexpr double kChi2Df4 = 33.38;

// Pearson's statistic of the counts of `samples` against the probabilities p
// (categories with p = 0 must have no sample at all).
double chi_square(const std::vector<int64_t>& samples, const std::vector<double>& p) {
  std::vector<double> count(p.size(), 0.0);
  for (int64_t s : samples) {
    REQUIRE(s >= 0);
    REQUIRE(s < static_cast<int64_t>(p.size()));
    count[static_cast<size_t>(s)] += 1;
  }
  const double n = static_cast<double>(samples.size());
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      CHECK(count[i] == 0);  // a zero weight is never drawn
      continue;
    }
    const double expected = n * p[i];
    x2 += (count[i] - expected) * (count[i] - expected) / expected;
  }
  return x2;
}

const std::vector<double> kWeights = {1, 2, 3, 4, 0, 10};  // 5 positive: 4 degrees of freedom

std::vector<double> normalised(const std::vector<double>& w) {
  double total = 0;
  for (double x : w) total += x;
  std::vector<double> p;
  for (double x : w) p.push_back(x / total);
  return p;
}

std::vector<int64_t> column(const std::vector<int64_t>& v, int64_t cols, int64_t c) {
  std::vector<int64_t> out;
  for (size_t i = static_cast<size_t>(c); i < v.size(); i += static_cast<size_t>(cols)) out.push_back(v[i]);
  return out;
}
}  // namespace

TEST_CASE("multinomial with replacement draws each category with its weight's share", "[ops][multinomial]") {
  const std::vector<double> p = normalised(kWeights);
  // One row, many samples; a batch of identical rows gives the same distribution.
  hg::manual_seed(1);
  const Tensor one = hg::multinomial(hg::tensor(kWeights, {}, hg::kFloat), 60000, /*replacement=*/true);
  CHECK(one.dtype() == DType::Int64);
  CHECK(one.shape() == hg::Shape{60000});
  const double x2 = chi_square(hgtest::ivalues(one), p);
  INFO("chi-square " << x2);
  CHECK(x2 < kChi2Df4);
  const Tensor rows = hg::tensor(kWeights, {1, 6}, hg::kFloat).expand({300, 6});
  const Tensor batch = hg::multinomial(rows, 200, true);
  CHECK(batch.shape() == hg::Shape{300, 200});
  CHECK(chi_square(hgtest::ivalues(batch), p) < kChi2Df4);
  // The test has power: the same samples against the uniform distribution on the positive weights fail it.
  CHECK(chi_square(hgtest::ivalues(one), normalised({1, 1, 1, 1, 0, 1})) > 1000 * kChi2Df4);
}

TEST_CASE("multinomial without replacement draws distinct indices, first and second in the right shares",
          "[ops][multinomial]") {
  const std::vector<double> p = normalised(kWeights);
  const int64_t rows = 40000;
  hg::manual_seed(2);
  const Tensor s = hg::multinomial(hg::tensor(kWeights, {1, 6}, hg::kFloat).expand({rows, 6}), 2);
  const std::vector<int64_t> v = hgtest::ivalues(s);
  for (int64_t r = 0; r < rows; ++r) REQUIRE(v[2 * r] != v[2 * r + 1]);
  // P(first = i) = p_i; P(second = j) = sum over i != j of p_i p_j / (1 - p_i).
  std::vector<double> second(p.size(), 0.0);
  for (size_t j = 0; j < p.size(); ++j)
    for (size_t i = 0; i < p.size(); ++i)
      if (i != j) second[j] += p[i] * p[j] / (1 - p[i]);
  const double x2_first = chi_square(column(v, 2, 0), p), x2_second = chi_square(column(v, 2, 1), second);
  INFO("chi-square of the first " << x2_first << ", of the second " << x2_second);
  CHECK(x2_first < kChi2Df4);
  CHECK(x2_second < kChi2Df4);
  // Asking for every positive category gives each of them once.
  const Tensor all = hg::multinomial(hg::tensor(kWeights, {1, 6}, hg::kFloat).expand({50, 6}), 5);
  const std::vector<int64_t> a = hgtest::ivalues(all);
  for (int64_t r = 0; r < 50; ++r) {
    std::set<int64_t> seen(a.begin() + 5 * r, a.begin() + 5 * r + 5);
    CHECK(seen == std::set<int64_t>{0, 1, 2, 3, 5});
  }
}

TEST_CASE("multinomial gives the same samples in every floating dtype for weights they hold exactly",
          "[ops][multinomial]") {
  // The kernels read each weight into double, so exactly held weights give the same sums and samples.
  for (bool replacement : {true, false}) {
    INFO("replacement " << replacement);
    hg::manual_seed(3);
    const std::vector<int64_t> ref =
        hgtest::ivalues(hg::multinomial(hg::tensor(kWeights, {1, 6}, hg::kFloat).expand({64, 6}), 3, replacement));
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(hgtest::dname(dt));
      hg::manual_seed(3);
      const Tensor w = hg::tensor(kWeights, {1, 6}, hg::kFloat).to(dt).expand({64, 6});
      CHECK(hgtest::ivalues(hg::multinomial(w, 3, replacement)) == ref);
    }
  }
}

TEST_CASE("multinomial is reproducible from manual_seed and from a Generator", "[ops][multinomial][random]") {
  const Tensor w = hg::rand({8, 100});  // positive weights, rows of another scale each
  hg::manual_seed(4);
  const Tensor a = hg::multinomial(w, 50, true), b = hg::multinomial(w, 20);
  hg::manual_seed(4);
  CHECK(hgtest::same_bits(hg::multinomial(w, 50, true), a));
  CHECK(hgtest::same_bits(hg::multinomial(w, 20), b));
  CHECK_FALSE(hgtest::same_bits(hg::multinomial(w, 50, true), a));  // the stream moved on
  // A Generator gives the global generator's samples for the same seed, and leaves the global one alone.
  hg::manual_seed(99);
  const hg::rng::PhiloxState global = hg::get_rng_state();
  hg::Generator g;
  g.manual_seed(4);
  CHECK(hgtest::same_bits(hg::multinomial(w, 50, true, g), a));
  CHECK(hgtest::same_bits(hg::multinomial(w, 20, false, g), b));
  CHECK(g.get_state().offset == 8 * 50 + 8 * 100);  // one counter per sample, or per weight without replacement
  CHECK(hg::get_rng_state() == global);
}

TEST_CASE("multinomial: 1-d input, empty batch, weights in a view, under autocast", "[ops][multinomial]") {
  const Tensor one_hot = hg::tensor({0.0, 0.0, 5.0, 0.0});
  CHECK(hgtest::ivalues(hg::multinomial(one_hot, 7, true)) == std::vector<int64_t>(7, 2));
  CHECK(hgtest::ivalues(hg::multinomial(one_hot, 1)) == std::vector<int64_t>{2});
  CHECK(hg::multinomial(hg::ones({0, 5}), 3).shape() == hg::Shape{0, 3});
  // A transposed (non-contiguous) view samples as its contiguous copy does.
  const Tensor w = hg::rand({6, 3}).t();
  hg::manual_seed(5);
  const Tensor s = hg::multinomial(w, 4, true);
  hg::manual_seed(5);
  CHECK(hgtest::same_bits(hg::multinomial(w.contiguous(), 4, true), s));
  // No autocast row (as in PyTorch): it runs on its input as it is, and records no graph.
  const Tensor leaf = hg::rand({2, 5}).requires_grad_(true);
  hg::amp::autocast region(hg::DeviceType::CPU);
  const Tensor under = hg::multinomial(leaf, 2);
  CHECK(under.dtype() == DType::Int64);
  CHECK_FALSE(under.requires_grad());
}

TEST_CASE("multinomial refuses what PyTorch refuses, naming the input", "[ops][multinomial][errors]") {
  hgtest::expect_errors({
      {"negative", [] { hg::multinomial(hg::tensor({1.0, -0.5, 2.0}), 1); }, {"element < 0", "float32"}},
      {"inf", [] { hg::multinomial(hg::tensor({1.0, INFINITY}), 1, true); }, {"`inf`, `nan`"}},
      {"nan", [] { hg::multinomial(hg::tensor({NAN, 1.0}), 1); }, {"`inf`, `nan`"}},
      {"zero row",
       [] { hg::multinomial(hg::tensor({1.0, 2.0, 0.0, 0.0}, {2, 2}), 1, true); },
       {"sum of probabilities <= 0", "(row 1)", "[2, 2]"}},
      {"too many without replacement",
       [] { hg::multinomial(hg::tensor({1.0, 2.0, 3.0}), 4); },
       {"cannot sample n_sample > prob_dist.size(-1) samples without replacement", "replacement=true"}},
      {"not enough positive",
       [] { hg::multinomial(hg::tensor({1.0, 0.0, 3.0}), 3); },
       {"not enough non-negative category", "2 positive weights for 3 samples"}},
      {"zero samples", [] { hg::multinomial(hg::tensor({1.0, 2.0}), 0); }, {"n_sample <= 0"}},
      {"3-d", [] { hg::multinomial(hg::ones({2, 2, 2}), 1); }, {"must be 1 or 2 dim", "[2, 2, 2]"}},
      {"integer", [] { hg::multinomial(hg::ones({3}, hg::kLong), 1); }, {"floating-point", "int64"}},
      {"no categories", [] { hg::multinomial(hg::ones({2, 0}), 1, true); }, {"no categories"}},
      {"generator of another device",
       [] { hg::multinomial(hg::ones({3}), 1, false, hg::Generator(hg::kCUDA)); },
       {"expected a 'cpu' device type for generator but found 'cuda'"}},
  });
}

TEST_CASE("CUDA multinomial gives the CPU's samples for the same seed", "[cuda][multinomial]") {
  const hg::Device cuda = hg::Device::cuda();
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // 3000 categories: lanes of 12, so the CUDA block's lane order is exercised; some zero weights.
    const Tensor w = hg::relu(hg::rand({5, 3000}, hg::kDouble) - 0.2).to(dt);
    for (bool replacement : {true, false}) {
      INFO("replacement " << replacement);
      hg::manual_seed(6);
      const Tensor on_cpu = hg::multinomial(w, 700, replacement);
      hg::manual_seed(6);
      const Tensor on_cuda = hg::multinomial(w.to(cuda), 700, replacement);
      CHECK(on_cuda.device() == cuda);
      CHECK(hgtest::ivalues(on_cuda) == hgtest::ivalues(on_cpu));
      hg::Generator g(cuda);
      g.manual_seed(6);
      CHECK(hgtest::ivalues(hg::multinomial(w.to(cuda), 700, replacement, g)) == hgtest::ivalues(on_cpu));
    }
  }
  hgtest::expect_errors({{"zero row on CUDA",
                          [&] { hg::multinomial(hg::zeros({2, 3}, cuda), 1, true); },
                          {"sum of probabilities <= 0", "(row 0)"}},
                         {"CPU generator for CUDA",
                          [&] { hg::multinomial(hg::ones({3}, cuda), 1, false, hg::Generator()); },
                          {"expected a 'cuda' device type for generator but found 'cpu'"}}});
}
