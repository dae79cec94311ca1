// softmax, log_softmax (last and non-last dims), nll_loss, cross_entropy
// (mean/sum/none, ignore_index), mse_loss and dropout against float64
// references, in every float dtype.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_util.h"

#include <halfgrad/kernels/kernels.h>

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
std::vector<double> ref_softmax(const std::vector<double>& v, const Shape& s, int64_t dim, bool log) {
  const int64_t d = dim < 0 ? dim + static_cast<int64_t>(s.size()) : dim;
  std::vector<double> out(v.size());
  const int64_t n = s[d];
  for (int64_t i = 0; i < hgtest::numel(s); ++i) {
    Shape idx = hgtest::unravel(i, s);
    if (idx[d] != 0) continue;
    std::vector<int64_t> pos(n);
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      idx[d] = j;
      pos[j] = hgtest::ravel(idx, s);
      mx = std::max(mx, v[pos[j]]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(v[pos[j]] - mx);
    for (int64_t j = 0; j < n; ++j)
      out[pos[j]] = log ? v[pos[j]] - mx - std::log(sum) : std::exp(v[pos[j]] - mx) / sum;
  }
  return out;
}

// Per-sample -logp[i, t[i]] (0 where ignored), then the reduction.
std::vector<double> ref_nll(const std::vector<double>& logp, int64_t c, const std::vector<double>& t,
                            Reduction r, int64_t ignore_index) {
  std::vector<double> per(t.size());
  double sum = 0, count = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const auto ti = static_cast<int64_t>(t[i]);
    per[i] = ti == ignore_index ? 0.0 : -logp[i * c + ti];
    sum += per[i];
    count += ti == ignore_index ? 0 : 1;
  }
  if (r == Reduction::None) return per;
  if (r == Reduction::Sum) return {sum};
  return {sum / count};
}

const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }

Tensor targets(int64_t n, int64_t c, int64_t ignore_index, int n_ignored) {
  Tensor t = hgtest::uniform({n}, int64, 0, static_cast<double>(c - 1));
  auto* p = static_cast<int64_t*>(t.data_ptr());
  for (int k = 0; k < n_ignored; ++k) p[(3 * k + 1) % n] = ignore_index;
  return t;
}
}  // namespace

TEST_CASE("softmax and log_softmax over last and non-last dims", "[ops][softmax]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (int64_t dim : {-1, 2, 1, 0, -3})
      for (bool log : {false, true})
        for (bool transposed : {false, true}) {
          INFO(hgtest::dname(dt) << (log ? " log_softmax" : " softmax") << " dim " << dim
                                 << (transposed ? " transposed input" : ""));
          const Tensor x = transposed ? hgtest::uniform({6, 5, 4}, dt, -4, 4).permute({2, 1, 0})
                                      : hgtest::uniform({4, 5, 6}, dt, -4, 4);
          const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          CHECK(y.dtype() == dt);
          CHECK(y.shape() == x.shape());
          HG_CHECK_CLOSE(y, ref_softmax(values(x), x.shape(), dim, log));
        }
}

// The CPU kernel works on blocks of ~4096 elements: many rows a block (their
// maxima and sums taken a column at a time), several blocks, and rows longer
// than a block (one row each). Backward against the float64 formula:
// softmax: gx = y * (w - sum(w * y)); log_softmax: gx = w - softmax * sum(w).
TEST_CASE("softmax and log_softmax forward and backward across row blocks", "[ops][softmax][backward]") {
  for (const Shape shape : {Shape{700, 13}, Shape{3, 5000}, Shape{1, 1}, Shape{5000, 1}})
    for (bool log : {false, true}) {
      INFO(shape_str(shape) << (log ? " log_softmax" : " softmax"));
      const Tensor x = hgtest::uniform(shape, float32, -6, 6).requires_grad_();
      const Tensor w = hgtest::uniform(shape, float32, -1, 1);
      const Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
      const std::vector<double> xv = values(x), wv = values(w);
      const std::vector<double> p = ref_softmax(xv, shape, 1, false);
      HG_CHECK_CLOSE(y, log ? ref_softmax(xv, shape, 1, true) : p);
      sum(y * w).backward();
      const int64_t rows = shape[0], c = shape[1];
      std::vector<double> gx(xv.size());
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < c; ++j) dot += log ? wv[r * c + j] : wv[r * c + j] * p[r * c + j];
        for (int64_t j = 0; j < c; ++j) {
          const int64_t i = r * c + j;
          gx[i] = log ? wv[i] - p[i] * dot : p[i] * (wv[i] - dot);
        }
      }
      HG_CHECK_CLOSE(x.grad(), gx);
    }
}

TEST_CASE("softmax is stable for large inputs and sums to one", "[ops][softmax]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const double big = dt == float16 ? 60000.0 : 1e30;
    const Tensor x = hgtest::make({big, big - 1, big - 2, -big}, {1, 4}, dt);
    const auto y = values(softmax(x, 1));
    for (double e : y) CHECK(std::isfinite(e));
    CHECK(y[3] == 0.0);
    const auto ly = values(log_softmax(x, 1));
    CHECK(std::isfinite(ly[0]));
    CHECK(ly[0] <= 0.0);
    const Tensor r = hgtest::uniform({8, 33}, dt, -5, 5);
    HG_CHECK_CLOSE_TOL(sum(softmax(r, 1).to(float64), {1}), std::vector<double>(8, 1.0), 2 * hgtest::tol(dt));
  }
}

TEST_CASE("nll_loss: reductions and ignore_index", "[ops][loss]") {
  const int64_t n = 10, c = 7;
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
        INFO(hgtest::dname(dt) << " reduction " << rname(r) << " ignore_index " << ignore);
        const Tensor lp = hgtest::uniform({n, c}, dt, -4, -0.1);
        const Tensor t = targets(n, c, ignore, 3);
        const Tensor y = nll_loss(lp, t, r, ignore);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == (r == Reduction::None ? Shape{n} : Shape{}));
        HG_CHECK_CLOSE(y, ref_nll(values(lp), c, values(t), r, ignore));
      }
  // default: mean, ignore_index -100; a transposed input
  const Tensor lp = hgtest::uniform({7, 10}, float32, -4, -0.1).t();
  const Tensor t = targets(10, 7, -100, 0);
  HG_CHECK_CLOSE(nll_loss(lp, t), ref_nll(values(lp), 7, values(t), Reduction::Mean, -100));
}

// kernels::nll_loss_reduced: the CPU's one loop and the path CUDA takes (the
// per-sample kernel and reductions, run here on CPU tensors) against the
// float64 reference, with some, none and all targets ignored.
TEST_CASE("nll_loss_reduced: the CPU loop and CUDA's kernel path agree with the reference", "[ops][loss]") {
  const int64_t n = 300, c = 9;
  for (DType dt : hgtest::kFloatDTypes)
    for (bool mean : {true, false})
      for (int n_ignored : {0, 7, static_cast<int>(n)})
        for (bool by_kernels : {false, true}) {
          INFO(hgtest::dname(dt) << (mean ? " mean" : " sum") << ", " << n_ignored << " ignored"
                                 << (by_kernels ? ", CUDA's path" : ", the CPU loop"));
          const Tensor lp = hgtest::uniform({n, c}, dt, -4, -0.1);
          Tensor t = targets(n, c, -100, 0);
          auto* tp = static_cast<int64_t*>(t.data_ptr());
          for (int k = 0; k < n_ignored; ++k) tp[n_ignored == n ? k : (11 * k + 3) % n] = -100;
          const Tensor out = zeros({}, dt), count = zeros({}, dt);
          if (by_kernels) kernels::nll_loss_reduced_by_kernels(lp, t, out, count, -100, mean);
          else kernels::nll_loss_reduced(lp, t, out, count, -100, mean);
          const Reduction r = mean ? Reduction::Mean : Reduction::Sum;
          const double want = ref_nll(values(lp), c, values(t), r, -100)[0];
          if (std::isnan(want)) CHECK(std::isnan(out.item()));
          else HG_CHECK_CLOSE(out, std::vector<double>{want});
          // the count in the loss's dtype (bfloat16 rounds 293 to 292)
          CHECK(count.item() == values(hgtest::make({static_cast<double>(n - n_ignored)}, {1}, dt))[0]);
        }
}

TEST_CASE("cross_entropy: reductions, ignore_index, strided logits", "[ops][loss]") {
  const int64_t n = 12, c = 5;
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (int64_t ignore : {int64_t{-100}, int64_t{3}})
        for (bool transposed : {false, true}) {
          INFO(hgtest::dname(dt) << " reduction " << rname(r) << " ignore_index " << ignore
                                 << (transposed ? " transposed logits" : ""));
          const Tensor x =
              transposed ? hgtest::uniform({c, n}, dt, -3, 3).t() : hgtest::uniform({n, c}, dt, -3, 3);
          const Tensor t = targets(n, c, ignore, 2);
          const Tensor y = cross_entropy(x, t, r, ignore);
          CHECK(y.dtype() == dt);
          CHECK(y.shape() == (r == Reduction::None ? Shape{n} : Shape{}));
          const auto lp = ref_softmax(values(x), {n, c}, 1, true);
          HG_CHECK_CLOSE(y, ref_nll(lp, c, values(t), r, ignore));
        }
  // all targets ignored: mean is NaN (0 / 0), as in PyTorch; sum is 0
  const Tensor x = hgtest::uniform({3, 4}, float32);
  const Tensor t = hgtest::make({-100, -100, -100}, {3}, int64);
  CHECK(std::isnan(cross_entropy(x, t).item<float>()));
  CHECK(cross_entropy(x, t, Reduction::Sum).item<float>() == 0.f);
}

// cross_entropy's backward is one kernel (softmax - one-hot, times each
// sample's gradient): against the float64 formula, over several of the CPU
// kernel's row blocks (1000 rows of 10 classes) and over wide rows, with
// ignored targets, in every dtype and reduction.
TEST_CASE("cross_entropy backward: softmax minus one-hot, per row block and dtype", "[ops][loss][backward]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (auto [n, c] : {std::pair<int64_t, int64_t>{1000, 10}, {7, 33}})
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        INFO(hgtest::dname(dt) << " [" << n << ", " << c << "] reduction " << rname(r));
        const Tensor x = hgtest::uniform({n, c}, dt, -4, 4).requires_grad_();
        const Tensor t = targets(n, c, -100, 3);
        const Tensor y = cross_entropy(x, t, r, -100);
        const Tensor gy = r == Reduction::None ? hgtest::uniform({n}, dt, 0.5, 2) : Tensor();
        y.backward(gy);
        const auto xv = values(x), tv = values(t);
        const auto p = ref_softmax(xv, {n, c}, 1, false);
        double kept = 0;
        for (double ti : tv) kept += ti == -100 ? 0 : 1;
        const std::vector<double> gv = r == Reduction::None ? values(gy) : std::vector<double>{};
        std::vector<double> ref(xv.size());
        for (int64_t i = 0; i < n; ++i) {
          const auto ti = static_cast<int64_t>(tv[i]);
          const double gi = ti == -100 ? 0 : r == Reduction::None ? gv[i] : r == Reduction::Sum ? 1 : 1 / kept;
          for (int64_t j = 0; j < c; ++j) ref[i * c + j] = gi * (p[i * c + j] - (j == ti ? 1 : 0));
        }
        REQUIRE(x.grad().defined());
        CHECK(x.grad().dtype() == dt);
        HG_CHECK_CLOSE(x.grad(), ref);
      }
}

TEST_CASE("mse_loss: reductions", "[ops][loss]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      INFO(hgtest::dname(dt) << " reduction " << rname(r));
      const Tensor a = hgtest::uniform({6, 7}, dt), b = hgtest::uniform({7, 6}, dt).t();
      const Tensor y = mse_loss(a, b, r);
      CHECK(y.dtype() == dt);
      const auto d = hgtest::map2(a, b, [](double x, double z) { return (x - z) * (x - z); });
      double s = 0;
      for (double e : d) s += e;
      if (r == Reduction::None) {
        CHECK(y.shape() == Shape{6, 7});
        HG_CHECK_CLOSE_TOL(y, d, 2 * hgtest::tol(dt));  // two roundings in the half dtypes
      } else {
        CHECK(y.dim() == 0);
        HG_CHECK_CLOSE_TOL(y, std::vector<double>{r == Reduction::Sum ? s : s / d.size()}, 2 * hgtest::tol(dt));
      }
    }
  // mixed dtypes promote
  const Tensor a = hgtest::uniform({5}, float16), b = hgtest::uniform({5}, float32);
  CHECK(mse_loss(a, b).dtype() == float32);
  REQUIRE_THROWS_WITH(mse_loss(ones({3}), ones({4})), Contains("mse_loss") && Contains("[3]") && Contains("[4]"));
}

TEST_CASE("dropout: training zeroes about p and scales by 1/(1-p) and eval is the identity", "[ops][dropout]") {
  manual_seed(5);
  for (DType dt : hgtest::kFloatDTypes)
    for (double p : {0.1, 0.3, 0.5}) {
      INFO(hgtest::dname(dt) << " p " << p);
      const Tensor x = hgtest::uniform({200, 500}, dt, 0.5, 2.0);  // no zeros in the input
      const Tensor y = dropout(x, p, true);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == x.shape());
      const auto vx = values(x), vy = values(y);
      int64_t zeros = 0;
      std::vector<double> kept_out, kept_ref;
      for (size_t i = 0; i < vx.size(); ++i) {
        if (vy[i] == 0) {
          ++zeros;
        } else {
          kept_out.push_back(vy[i]);
          kept_ref.push_back(vx[i] / (1 - p));
        }
      }
      const double frac = static_cast<double>(zeros) / vx.size();
      CHECK(frac == Approx(p).margin(0.01));
      // kept values are x / (1 - p)
      const Tensor kept = hgtest::make(kept_out, {static_cast<int64_t>(kept_out.size())}, float64);
      HG_CHECK_CLOSE_TOL(kept, kept_ref, 2 * hgtest::tol(dt));
      // eval: the identity
      CHECK(values(dropout(x, p, false)) == vx);
    }
  const Tensor x = hgtest::uniform({100}, float32, 0.5, 2.0);
  CHECK(values(dropout(x, 0.0, true)) == values(x));
  CHECK(values(dropout(x, 1.0, true)) == std::vector<double>(100, 0.0));
  // two calls draw different masks; manual_seed repeats them
  manual_seed(9);
  const auto m1 = values(dropout(x, 0.5, true));
  const auto m2 = values(dropout(x, 0.5, true));
  CHECK(m1 != m2);
  manual_seed(9);
  CHECK(values(dropout(x, 0.5, true)) == m1);
  REQUIRE_THROWS_WITH(dropout(x, 1.5, true), Contains("dropout") && Contains("1.5"));
  REQUIRE_THROWS_AS(dropout(x, -0.1, true), Error);
}

TEST_CASE("binary_cross_entropy(_with_logits): the target's gradient, as PyTorch", "[ops][loss]") {
  // PyTorch 1.13 (float64): d/dt BCE(p, t) = (log(1 - p) - log(p)) / n, d/dt BCE_logits(x, t) = -x / n
  const Tensor p = hgtest::make({0.2, 0.7, 0.5}, {3}, float64);
  Tensor t = hgtest::make({0.3, 0.9, 0.5}, {3}, float64).requires_grad_(true);
  binary_cross_entropy(p, t).backward();
  const auto gt = values(t.grad());
  for (size_t i = 0; i < 3; ++i) {
    const double pi = values(p)[i];
    CHECK(gt[i] == Approx((std::log(1 - pi) - std::log(pi)) / 3).epsilon(1e-12));
  }
  const Tensor x = hgtest::make({0.5, -2.0}, {2}, float64);
  Tensor t2 = hgtest::make({0.3, 0.9}, {2}, float64).requires_grad_(true);
  binary_cross_entropy_with_logits(x, t2).backward();
  CHECK(values(t2.grad()) == std::vector<double>{-0.25, 1.0});
  // both at once: the input's gradient is unchanged
  Tensor p2 = hgtest::make({0.2, 0.7}, {2}, float64).requires_grad_(true);
  Tensor t3 = hgtest::make({0.3, 0.9}, {2}, float64).requires_grad_(true);
  binary_cross_entropy(p2, t3, Reduction::Sum).backward();
  CHECK(values(p2.grad())[0] == Approx((0.2 - 0.3) / (0.2 * 0.8)).epsilon(1e-12));
  CHECK(values(t3.grad())[1] == Approx(std::log(0.3) - std::log(0.7)).epsilon(1e-12));
}

TEST_CASE("binary_cross_entropy refuses probabilities outside [0, 1] (CPU)", "[ops][loss][errors]") {
  const Tensor t = ones({2});
  REQUIRE_THROWS_WITH(binary_cross_entropy(hgtest::make({0.5, 1.5}, {2}, float32), t),
                      Contains("between 0 and 1") && Contains("with_logits"));
  REQUIRE_THROWS_AS(binary_cross_entropy(hgtest::make({-0.1, 0.5}, {2}, float32), t), Error);
  REQUIRE_THROWS_AS(binary_cross_entropy(hgtest::make({std::nan(""), 0.5}, {2}, float32), t), Error);
  CHECK_NOTHROW(binary_cross_entropy(hgtest::make({0.0, 1.0}, {2}, float32), t));
}

TEST_CASE("mse_loss in a half dtype computes in float32 and rounds once", "[ops][loss]") {
  // n = 30: 2/n rounded to bfloat16 would scale every gradient by 1.0034.
  std::vector<double> a, b;
  for (int i = 0; i < 30; ++i) {
    a.push_back(hgtest::round_to(0.1 * i - 1.3, bfloat16));
    b.push_back(hgtest::round_to(0.07 * i * i / 30.0, bfloat16));
  }
  Tensor x = hgtest::make(a, {30}, bfloat16).requires_grad_(true);
  const Tensor y = hgtest::make(b, {30}, bfloat16);
  const Tensor loss = mse_loss(x, y);
  double ref = 0;
  for (int i = 0; i < 30; ++i) ref += (a[i] - b[i]) * (a[i] - b[i]);
  CHECK(loss.item<double>() == hgtest::round_to(ref / 30, bfloat16));
  loss.backward();
  const auto g = values(x.grad());
  for (int i = 0; i < 30; ++i) {
    INFO("i = " << i);
    CHECK(g[i] == hgtest::round_to(static_cast<double>(2.0f / 30.0f * static_cast<float>(a[i] - b[i])), bfloat16));
  }
}
