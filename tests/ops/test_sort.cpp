// sort, argsort, topk, cumsum, randperm: forward against float64 references
// built here with std::stable_sort and plain sums (values exact, indices exact
// since every sort is stable, x[indices] == values), NaN/-0.0/inf/ties, every
// dtype, permuted and narrowed inputs, 0-d and empty tensors, k edge cases,
// gradcheck of the values, errors; randperm is a permutation, reproducible per
// seed and different across seeds. "[cuda]": CUDA against the CPU.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hg::TensorOptions;
using hgtest::values;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The lines of `shape` along `dim`: outer * inner lines of n elements each;
// element j of line (o, i) sits at flat index (o * n + j) * inner + i.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const Shape& s, int64_t dim) {
    if (s.empty()) return;
    for (int64_t a = 0; a < dim; ++a) outer *= s[a];
    n = s[dim];
    for (size_t a = static_cast<size_t>(dim) + 1; a < s.size(); ++a) inner *= s[a];
  }
  int64_t at(int64_t o, int64_t j, int64_t i, int64_t len) const { return (o * len + j) * inner + i; }
};

bool nan_last_less(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

struct RefSort {
  std::vector<double> values;
  std::vector<double> indices;
};

// The first k (k < 0: all) of each line, stably sorted (NaN largest).
RefSort ref_sort(const std::vector<double>& x, const Shape& shape, int64_t dim, bool descending, int64_t k = -1) {
  const Lines L(shape, dim);
  const int64_t kk = k < 0 ? L.n : k;
  RefSort r;
  r.values.assign(static_cast<size_t>(L.outer * kk * L.inner), 0);
  r.indices.assign(r.values.size(), 0);
  for (int64_t o = 0; o < L.outer; ++o)
    for (int64_t i = 0; i < L.inner; ++i) {
      std::vector<int64_t> p(static_cast<size_t>(L.n));
      std::iota(p.begin(), p.end(), int64_t{0});
      auto val = [&](int64_t j) { return x[static_cast<size_t>(L.at(o, j, i, L.n))]; };
      std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
        return descending ? nan_last_less(val(b), val(a)) : nan_last_less(val(a), val(b));
      });
      for (int64_t j = 0; j < kk; ++j) {
        r.values[static_cast<size_t>(L.at(o, j, i, kk))] = val(p[j]);
        r.indices[static_cast<size_t>(L.at(o, j, i, kk))] = static_cast<double>(p[j]);
      }
    }
  return r;
}

// values[.., j, ..] == x[.., indices[.., j, ..], ..] bit for bit (NaN payloads, the sign of zero).
void check_taken(const Tensor& x, const Tensor& v, const Tensor& idx, int64_t dim) {
  const auto xv = values(x), vv = values(v);
  const auto iv = hgtest::ivalues(idx);
  const Lines Lx(x.shape(), dim), Lv(v.shape(), dim);
  for (int64_t o = 0; o < Lv.outer; ++o)
    for (int64_t i = 0; i < Lv.inner; ++i)
      for (int64_t j = 0; j < Lv.n; ++j) {
        const int64_t at = Lv.at(o, j, i, Lv.n);
        const int64_t src = iv[static_cast<size_t>(at)];
        REQUIRE(src >= 0);
        REQUIRE(src < Lx.n);
        const double a = xv[static_cast<size_t>(Lx.at(o, src, i, Lx.n))], b = vv[static_cast<size_t>(at)];
        INFO("output element " << at << " index " << src);
        CHECK(((std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b))));
      }
}

// Values with many ties in every dtype: multiples of 0.5 in [-3, 3].
Tensor tie_heavy(const Shape& shape, DType dt) {
  std::vector<double> v(static_cast<size_t>(hgtest::numel(shape)));
  std::uniform_int_distribution<int> d(-6, 6);
  for (auto& x : v) x = 0.5 * d(hgtest::rng());
  if (!v.empty()) v[0] = 1.5;  // never all zero
  return hgtest::make(v, shape, dt);
}

void check_sort(const Tensor& x, int64_t dim, bool descending) {
  const int64_t d = dim < 0 ? dim + std::max<int64_t>(x.dim(), 1) : dim;
  INFO(x.describe() << " dim " << dim << (descending ? " descending" : " ascending"));
  auto [v, i] = hg::sort(x, dim, descending);
  CHECK(v.dtype() == x.dtype());
  CHECK(i.dtype() == DType::Int64);
  CHECK(v.shape() == x.shape());
  CHECK(i.shape() == x.shape());
  const RefSort r = ref_sort(values(x), x.shape(), d, descending);
  HG_CHECK_EXACT(v, r.values);
  HG_CHECK_EXACT(i, r.indices);
  check_taken(x, v, i, d);
  HG_CHECK_EXACT(hg::argsort(x, dim, descending), r.indices);
}

std::vector<DType> sortable() {
  auto d = hgtest::kFloatDTypes;
  d.push_back(DType::Int64);
  return d;
}

}  // namespace

TEST_CASE("sort matches a stable float64 reference in every dtype, dim and layout", "[ops][sort]") {
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({6, 37}, dt, -4, 4);
    const Tensor t = tie_heavy({5, 4, 9}, dt);
    for (bool desc : {false, true}) {
      for (int64_t dim : {0, 1, -1}) check_sort(x, dim, desc);
      for (int64_t dim : {0, 1, 2}) check_sort(t, dim, desc);
      check_sort(t.permute({2, 0, 1}), 1, desc);                // permuted input
      check_sort(t.permute({2, 0, 1}), -1, desc);
      check_sort(x.narrow(1, 3, 30).narrow(0, 1, 4), 1, desc);  // narrowed (offset, strided rows)
      check_sort(x.t(), 0, desc);
    }
  }
}

TEST_CASE("sort orders NaN as the largest, -0.0 equal to +0.0, ties stable", "[ops][sort]") {
  const std::vector<double> v = {3, kNaN, -kInf, 1, -kNaN, 1, -0.0, 0.0, kInf, -2};
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::make(v, {10}, dt);
    auto [a, ia] = hg::sort(x);
    HG_CHECK_EXACT(ia, (std::vector<double>{2, 9, 6, 7, 3, 5, 0, 8, 1, 4}));  // as torch.sort(stable=True)
    HG_CHECK_EXACT(a, (std::vector<double>{-kInf, -2, 0, 0, 1, 1, 3, kInf, kNaN, kNaN}));
    CHECK(std::signbit(values(a)[2]));   // the -0.0 stays -0.0 and first (it came first)
    CHECK(!std::signbit(values(a)[3]));
    auto [d, id] = hg::sort(x, 0, true);
    HG_CHECK_EXACT(id, (std::vector<double>{1, 4, 8, 0, 3, 5, 6, 7, 9, 2}));
    check_taken(x, d, id, 0);
    check_sort(x, 0, false);
    check_sort(x, 0, true);
    // stable=true is the same order
    auto [s, is] = hg::sort(x, 0, false, true);
    CHECK(hgtest::same_bits(is, ia));
  }
}

TEST_CASE("sort of bool, 0-d and empty tensors", "[ops][sort]") {
  const Tensor b = hgtest::random_bool({3, 8});
  check_sort(b, 1, false);
  check_sort(b, 0, true);

  const Tensor s = hgtest::make({2.5}, {}, DType::Float32);
  for (int64_t dim : {0, -1}) {
    auto [v, i] = hg::sort(s, dim);
    CHECK(v.dim() == 0);
    CHECK(i.dim() == 0);
    CHECK(v.item() == 2.5);
    CHECK(i.item<int64_t>() == 0);
  }
  for (const Shape& shape : {Shape{0}, Shape{3, 0}, Shape{0, 4}}) {
    const Tensor e = hg::zeros(shape);
    for (int64_t dim = 0; dim < e.dim(); ++dim) {
      auto [v, i] = hg::sort(e, dim, true);
      CHECK(v.shape() == shape);
      CHECK(i.shape() == shape);
      CHECK(i.dtype() == DType::Int64);
      auto [tv, ti] = hg::topk(e, 0, dim);
      CHECK(tv.numel() == 0);
      CHECK(ti.numel() == 0);
    }
  }
  // Tensor methods
  const Tensor x = hgtest::uniform({4, 5}, DType::Float32);
  auto [mv, mi] = x.sort(0, true);
  auto [fv, fi] = hg::sort(x, 0, true);
  CHECK(hgtest::same_bits(mv, fv));
  CHECK(hgtest::same_bits(mi, fi));
  CHECK(hgtest::same_bits(x.argsort(0, true), fi));
}

TEST_CASE("topk matches the first k of a stable sort, largest and smallest", "[ops][sort][topk]") {
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({7, 13}, dt, -4, 4);
    const Tensor t = tie_heavy({4, 11, 3}, dt).permute({0, 2, 1});  // non-contiguous, ties
    for (bool largest : {true, false})
      for (const auto& [in, dim] : std::vector<std::pair<Tensor, int64_t>>{{x, 1}, {x, 0}, {t, 2}, {t, 0}, {x.t(), -1}}) {
        const int64_t n = in.shape()[dim < 0 ? dim + in.dim() : dim];
        const int64_t d = dim < 0 ? dim + in.dim() : dim;
        for (int64_t k : {int64_t{0}, int64_t{1}, n / 2, n - 1, n}) {
          INFO(in.describe() << " dim " << dim << " k " << k << (largest ? " largest" : " smallest"));
          auto [v, i] = hg::topk(in, k, dim, largest);
          Shape want = in.shape();
          want[d] = k;
          CHECK(v.shape() == want);
          CHECK(i.shape() == want);
          const RefSort r = ref_sort(values(in), in.shape(), d, largest, k);
          HG_CHECK_EXACT(v, r.values);
          HG_CHECK_EXACT(i, r.indices);
          check_taken(in, v, i, d);
          auto [uv, ui] = hg::topk(in, k, dim, largest, false);  // sorted=false: the same (sorted) answer
          CHECK(hgtest::same_bits(ui, i));
        }
      }
  }
  // NaN counts as the largest
  const Tensor nanx = hgtest::make({1, kNaN, 5, -1, 2}, {5}, DType::Float32);
  auto [lv, li] = hg::topk(nanx, 2);
  HG_CHECK_EXACT(lv, (std::vector<double>{kNaN, 5}));
  HG_CHECK_EXACT(li, (std::vector<double>{1, 2}));
  auto [sv, si] = nanx.topk(2, 0, false);
  HG_CHECK_EXACT(sv, (std::vector<double>{-1, 1}));
  HG_CHECK_EXACT(si, (std::vector<double>{3, 0}));
  // 0-d: k of 0 or 1
  const Tensor s = hgtest::make({-3.0}, {}, DType::Float64);
  auto [s1, i1] = hg::topk(s, 1);
  CHECK(s1.dim() == 0);
  CHECK(s1.item() == -3.0);
  CHECK(i1.item<int64_t>() == 0);
  auto [s0, i0] = hg::topk(s, 0);  // as PyTorch: the element itself, 0-d
  CHECK(s0.dim() == 0);
  CHECK(s0.item() == -3.0);
  CHECK(i0.item<int64_t>() == 0);
}

TEST_CASE("sort and topk backward scatter the gradient to the source positions", "[ops][sort][topk][autograd]") {
  const Tensor x = hgtest::leaf_distinct({4, 6});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::sort(in[0], 1)); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::sort(in[0], 0, true)); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::topk(in[0], 3, 1)); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::topk(in[0], 2, 0, false)); }, {x});
  // a permuted leaf-derived input and a 0-d one
  const Tensor y = hgtest::leaf_distinct({3, 4, 5}, 0.05);
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::sort(in[0].permute({2, 0, 1}), 1)); }, {y});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::topk(in[0], 1, -1)); }, {y});
  const Tensor s = hgtest::leaf_from({0.7}, {});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return std::get<0>(hg::sort(in[0])); }, {s});

  // the gradient lands exactly where the values came from
  Tensor z = hgtest::leaf_from({3, 1, 2, 5}, {4});
  auto [v, i] = hg::topk(z, 2);
  hg::mul(v, hgtest::make({10, 20}, {2}, DType::Float64)).sum().backward();
  HG_CHECK_EXACT(z.grad(), (std::vector<double>{20, 0, 0, 10}));
  CHECK(!i.requires_grad());
  CHECK(v.requires_grad());
}

TEST_CASE("cumsum matches a float64 reference in every dtype, dim and layout", "[ops][cumsum]") {
  auto ref_cumsum = [](const std::vector<double>& x, const Shape& shape, int64_t dim) {
    const Lines L(shape, dim);
    std::vector<double> out(x.size());
    for (int64_t o = 0; o < L.outer; ++o)
      for (int64_t i = 0; i < L.inner; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < L.n; ++j) {
          acc += x[static_cast<size_t>(L.at(o, j, i, L.n))];
          out[static_cast<size_t>(L.at(o, j, i, L.n))] = acc;
        }
      }
    return out;
  };
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({5, 300}, dt, -3, 3);
    const Tensor t = hgtest::uniform({4, 6, 7}, dt, -3, 3);
    for (const auto& [in, dim] : std::vector<std::pair<Tensor, int64_t>>{{x, 1}, {x, 0}, {x, -1}, {t, 1}, {t.permute({2, 0, 1}), 0},
                                  {t.permute({2, 0, 1}), 2}, {x.narrow(1, 7, 250), 1}, {x.t(), 0}}) {
      const int64_t d = dim < 0 ? dim + in.dim() : dim;
      INFO(in.describe() << " dim " << dim);
      const Tensor c = hg::cumsum(in, dim);
      CHECK(c.dtype() == dt);
      CHECK(c.shape() == in.shape());
      const auto ref = ref_cumsum(values(in), in.shape(), d);
      if (dt == DType::Int64) HG_CHECK_EXACT(c, ref);
      else HG_CHECK_CLOSE(c, ref);
      CHECK(hgtest::same_bits(in.cumsum(dim), c));
    }
  }
  // half types: float32 accumulation, one rounding per output (a float16
  // running sum would stall at 2048 + 1)
  const Tensor ones = hg::ones({5000}, DType::Float16);
  const auto cv = values(hg::cumsum(ones, 0));
  CHECK(cv[2049] == 2050);  // a float16 running sum stalls at 2048 (2048 + 1 rounds to even)
  CHECK(cv[4999] == 5000);
  std::vector<double> want(5000);
  for (size_t i = 0; i < want.size(); ++i) want[i] = hgtest::round_to(static_cast<double>(i + 1), DType::Float16);
  HG_CHECK_EXACT(hg::cumsum(ones, 0), want);
  // bool and int64 give int64; an explicit dtype casts first
  const Tensor b = hgtest::make({1, 0, 1, 1}, {4}, DType::Bool);
  const Tensor cb = hg::cumsum(b, 0);
  CHECK(cb.dtype() == DType::Int64);
  HG_CHECK_EXACT(cb, (std::vector<double>{1, 1, 2, 3}));
  const Tensor ci = hg::cumsum(hgtest::make({3, -1, 4}, {3}, DType::Int64), 0, DType::Float32);
  CHECK(ci.dtype() == DType::Float32);
  HG_CHECK_EXACT(ci, (std::vector<double>{3, 2, 6}));
  const Tensor ch = hg::cumsum(hgtest::make({0.5, 0.25}, {2}, DType::Float16), 0, DType::Float64);
  CHECK(ch.dtype() == DType::Float64);
  HG_CHECK_EXACT(ch, (std::vector<double>{0.5, 0.75}));
  // 0-d and empty
  const Tensor s = hgtest::make({4.5}, {}, DType::Float32);
  CHECK(hg::cumsum(s, 0).dim() == 0);
  CHECK(hg::cumsum(s, -1).item() == 4.5);
  CHECK(hg::cumsum(hg::zeros({3, 0}), 1).shape() == Shape{3, 0});
  CHECK(hg::cumsum(hg::zeros({0, 3}), 1).shape() == Shape{0, 3});
  // CPU autocast has no cumsum row: the dtype is kept
  {
    const Tensor h = hgtest::uniform({3, 4}, DType::BFloat16);
    hg::amp::autocast region(hg::DeviceType::CPU);
    CHECK(hg::cumsum(h, 1).dtype() == DType::BFloat16);
    CHECK(hg::cumsum(h.to(DType::Float32), 1).dtype() == DType::Float32);
  }
  // NaN propagates from its position on
  HG_CHECK_EXACT(hg::cumsum(hgtest::make({1, kNaN, 2}, {3}, DType::Float32), 0), (std::vector<double>{1, kNaN, kNaN}));
}

TEST_CASE("cumsum backward is the reversed cumsum of the gradient", "[ops][cumsum][autograd]") {
  const Tensor x = hgtest::leaf({4, 6});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::cumsum(in[0], 1); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::cumsum(in[0], 0); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::cumsum(in[0].t(), -1); }, {x});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::cumsum(hg::cumsum(in[0], 1), 0); }, {x});
  const Tensor s = hgtest::leaf_from({1.5}, {});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return hg::cumsum(in[0], 0); }, {s});
  Tensor z = hgtest::leaf_from({1, 2, 3}, {3});
  hg::cumsum(z, 0).sum().backward();
  HG_CHECK_EXACT(z.grad(), (std::vector<double>{3, 2, 1}));
}

TEST_CASE("randperm is a permutation, reproducible per seed and different across seeds", "[ops][randperm]") {
  auto is_perm = [](const Tensor& p, int64_t n) {
    std::vector<double> v = values(p);
    std::sort(v.begin(), v.end());
    for (int64_t i = 0; i < n; ++i)
      if (v[static_cast<size_t>(i)] != static_cast<double>(i)) return false;
    return static_cast<int64_t>(v.size()) == n;
  };
  for (int64_t n : {0, 1, 2, 7, 1000, 100000}) {
    INFO("n " << n);
    hg::manual_seed(5);
    const Tensor a = hg::randperm(n);
    CHECK(a.dtype() == DType::Int64);
    CHECK(a.shape() == Shape{n});
    CHECK(is_perm(a, n));
    hg::manual_seed(5);
    CHECK(hgtest::same_bits(hg::randperm(n), a));
    if (n >= 7) {
      hg::manual_seed(6);
      CHECK(!hgtest::same_bits(hg::randperm(n), a));
      CHECK(!hgtest::same_bits(hg::randperm(n), hg::randperm(n)));  // the stream moves on
      CHECK(!hgtest::same_bits(a, hg::arange(n)));
    }
  }
  // roughly uniform: each of the 6 orders of 3 elements appears
  hg::manual_seed(1);
  std::set<std::vector<double>> seen;
  for (int r = 0; r < 200; ++r) seen.insert(values(hg::randperm(3)));
  CHECK(seen.size() == 6);
  // other dtypes
  const Tensor f = hg::randperm(50, DType::Float32);
  CHECK(f.dtype() == DType::Float32);
  CHECK(is_perm(f, 50));
  CHECK(hg::randperm(2049, DType::Float16).numel() == 2049);
}

TEST_CASE("sort, topk, cumsum, randperm errors", "[ops][sort][errors]") {
  hgtest::expect_errors({
      {"sort dim out of range", [] { hg::sort(hg::zeros({2, 3}), 2); }, {"sort", "dimension 2 is out of range"}},
      {"argsort dim out of range", [] { hg::argsort(hg::zeros({2}), -2); }, {"argsort", "out of range"}},
      {"sort undefined", [] { hg::sort(Tensor()); }, {"sort", "input"}},
      {"topk k too large", [] { hg::topk(hg::zeros({2, 3}), 4); }, {"topk", "k (4)", "size 3", "0 <= k <= 3"}},
      {"topk k negative", [] { hg::topk(hg::zeros({2, 3}), -1, 0); }, {"topk", "k (-1)", "size 2"}},
      {"topk 0-d k 2", [] { hg::topk(hg::zeros({}), 2); }, {"topk", "k (2)"}},
      {"cumsum dim", [] { hg::cumsum(hg::zeros({2, 3}), 3); }, {"cumsum", "out of range"}},
      {"cumsum bool dtype", [] { hg::cumsum(hg::zeros({2}), 0, DType::Bool); }, {"cumsum", "bool"}},
      {"randperm negative", [] { hg::randperm(-1); }, {"randperm", "non-negative", "-1"}},
      {"randperm float16 too large", [] { hg::randperm(2050, DType::Float16); }, {"randperm", "float16", "int64"}},
      {"randperm bool", [] { hg::randperm(3, DType::Bool); }, {"randperm", "bool"}},
  });
}

// ---- CUDA against the CPU --------------------------------------------------------------------------

namespace {
const hg::Device kCuda = hg::Device::cuda();

void expect_same_sort(const Tensor& x, int64_t dim, bool descending) {
  INFO(x.describe() << " dim " << dim << (descending ? " descending" : ""));
  auto [cv, ci] = hg::sort(x, dim, descending);
  auto [gv, gi] = hg::sort(x.to(kCuda), dim, descending);
  CHECK(gv.device().is_cuda());
  CHECK(hgtest::same_bits(gi, ci));  // stable on both: the same indices
  HG_CHECK_EXACT(gv.cpu(), values(cv));
  CHECK(hgtest::same_bits(hg::argsort(x.to(kCuda), dim, descending), ci));
}
}  // namespace

TEST_CASE("CUDA sort and argsort match the CPU exactly (values and indices)", "[cuda][ops][sort]") {
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({33, 130}, dt, -4, 4);
    const Tensor t = tie_heavy({6, 5, 300}, dt);
    for (bool desc : {false, true}) {
      expect_same_sort(x, 1, desc);
      expect_same_sort(x, 0, desc);
      expect_same_sort(t, 2, desc);
      expect_same_sort(t.permute({2, 0, 1}), 0, desc);
      expect_same_sort(t.narrow(2, 1, 250), 1, desc);
      expect_same_sort(tie_heavy({200003}, dt), 0, desc);  // one long row: DeviceRadixSort
      expect_same_sort(hgtest::uniform({1, 5000}, dt), 1, desc);
      expect_same_sort(hgtest::uniform({4000, 3}, dt), 1, desc);  // many short rows
    }
  }
  const std::vector<double> v = {3, kNaN, -kInf, 1, -kNaN, 1, -0.0, 0.0, kInf, -2};
  for (DType dt : hgtest::kFloatDTypes)
    for (bool desc : {false, true}) {
      const Tensor x = hgtest::make(v, {10}, dt);
      expect_same_sort(x, 0, desc);
      expect_same_sort(hg::stack({x, x, x}), 1, desc);
      auto [gv, gi] = hg::sort(x.to(kCuda), 0, desc);
      check_taken(x, gv.cpu(), gi.cpu(), 0);  // -0.0 kept bit for bit
    }
  expect_same_sort(hgtest::random_bool({7, 40}), 1, false);
  expect_same_sort(hgtest::random_bool({7, 40}), 1, true);
  // 0-d and empty
  auto [sv, si] = hg::sort(hg::full({}, 2.0).to(kCuda));
  CHECK(sv.dim() == 0);
  CHECK(sv.item() == 2.0);
  CHECK(si.item<int64_t>() == 0);
  auto [ev, ei] = hg::sort(hg::zeros({3, 0}).to(kCuda), 1);
  CHECK(ev.shape() == Shape{3, 0});
  CHECK(ei.device().is_cuda());
}

TEST_CASE("CUDA topk and the sort/topk backward match the CPU", "[cuda][ops][sort][topk]") {
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    const Tensor x = tie_heavy({9, 70}, dt);
    for (bool largest : {true, false})
      for (int64_t k : {0, 1, 5, 70}) {
        auto [cv, ci] = hg::topk(x, k, 1, largest);
        auto [gv, gi] = hg::topk(x.to(kCuda), k, 1, largest);
        CHECK(hgtest::same_bits(gi, ci));
        CHECK(hgtest::same_bits(gv, cv));
        auto [cv0, ci0] = hg::topk(x, std::min<int64_t>(k, 9), 0, largest);
        auto [gv0, gi0] = hg::topk(x.to(kCuda), std::min<int64_t>(k, 9), 0, largest);
        CHECK(hgtest::same_bits(gi0, ci0));
        CHECK(hgtest::same_bits(gv0, cv0));
      }
  }
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor base = hgtest::uniform({8, 50}, dt);
    const Tensor w = hgtest::uniform({8, 7}, dt);
    auto grad_of = [&](hg::Device dev) {
      Tensor l = base.to(dev).detach();
      l.requires_grad_(true);
      hg::mul(std::get<0>(hg::topk(l, 7, 1)), w.to(dev)).sum().backward();
      Tensor l2 = base.to(dev).detach();
      l2.requires_grad_(true);
      hg::mul(std::get<0>(hg::sort(l2, 0, true)), base.to(dev)).sum().backward();
      return std::make_pair(l.grad().cpu(), l2.grad().cpu());
    };
    const auto [c1, c2] = grad_of(hg::Device::cpu());
    const auto [g1, g2] = grad_of(kCuda);
    CHECK(hgtest::same_bits(g1, c1));
    CHECK(hgtest::same_bits(g2, c2));
  }
}

TEST_CASE("CUDA cumsum matches the CPU, forward and backward", "[cuda][ops][cumsum]") {
  for (DType dt : sortable()) {
    INFO(hgtest::dname(dt));
    for (const Shape& shape : {Shape{7, 300}, Shape{3, 100000}, Shape{1, 3000}, Shape{5000, 3}, Shape{17}}) {
      const Tensor x = hgtest::uniform(shape, dt, -2, 2);
      for (int64_t dim = 0; dim < x.dim(); ++dim) {
        INFO(x.describe() << " dim " << dim);
        const Tensor c = hg::cumsum(x, dim);
        const Tensor g = hg::cumsum(x.to(kCuda), dim);
        CHECK(g.device().is_cuda());
        CHECK(g.dtype() == c.dtype());
        if (dt == DType::Int64) HG_CHECK_EXACT(g.cpu(), values(c));
        else HG_CHECK_CLOSE_TOL(g.cpu(), values(c), hgtest::tol(dt));
      }
    }
    const Tensor p = hgtest::uniform({6, 5, 40}, dt).permute({2, 0, 1});
    const Tensor c = hg::cumsum(p, 0), g = hg::cumsum(p.to(kCuda), 0);
    if (dt == DType::Int64) HG_CHECK_EXACT(g.cpu(), values(c));
    else HG_CHECK_CLOSE_TOL(g.cpu(), values(c), hgtest::tol(dt));
  }
  const Tensor b = hgtest::random_bool({4, 33});
  HG_CHECK_EXACT(hg::cumsum(b.to(kCuda), 1).cpu(), values(hg::cumsum(b, 1)));
  CHECK(hg::cumsum(hg::zeros({0, 4}).to(kCuda), 1).shape() == Shape{0, 4});
  CHECK(hg::cumsum(hg::full({}, 3.0).to(kCuda), 0).item() == 3.0);
  // the float16 running sum accumulates in float32 (exactly as the CPU here)
  const Tensor ones = hg::ones({5000}, DType::Float16);
  CHECK(hgtest::same_bits(hg::cumsum(ones.to(kCuda), 0), hg::cumsum(ones, 0)));
  // autocast: float32 (PyTorch's CUDA fp32 list) unless a dtype is given
  {
    const Tensor h = hgtest::uniform({3, 40}, DType::Float16).to(kCuda);
    hg::amp::autocast region(hg::DeviceType::CUDA);
    const Tensor c32 = hg::cumsum(h, 1);
    CHECK(c32.dtype() == DType::Float32);
    HG_CHECK_CLOSE_TOL(c32.cpu(), values(hg::cumsum(h.cpu().to(DType::Float32), 1)), 1e-6);
    CHECK(hg::cumsum(h, 1, DType::Float16).dtype() == DType::Float16);
    CHECK(hg::cumsum(h, 1, DType::Float64).dtype() == DType::Float64);
  }
  // backward
  const Tensor base = hgtest::uniform({6, 900}, DType::Float32);
  auto grad_of = [&](hg::Device dev, int64_t dim) {
    Tensor l = base.to(dev).detach();
    l.requires_grad_(true);
    hg::mul(hg::cumsum(l, dim), base.to(dev)).sum().backward();
    return l.grad().cpu();
  };
  for (int64_t dim : {0, 1}) HG_CHECK_CLOSE_TOL(grad_of(kCuda, dim), values(grad_of(hg::Device::cpu(), dim)), 1e-5);
}

TEST_CASE("CUDA randperm is a permutation and reproducible per seed", "[cuda][ops][randperm]") {
  for (int64_t n : {1, 2, 10, 1000, 300001}) {
    INFO("n " << n);
    hg::manual_seed(9);
    const Tensor a = hg::randperm(n, kCuda);
    CHECK(a.device().is_cuda());
    CHECK(a.dtype() == DType::Int64);
    std::vector<double> v = values(a.cpu());
    std::sort(v.begin(), v.end());
    bool perm = static_cast<int64_t>(v.size()) == n;
    for (int64_t i = 0; perm && i < n; ++i) perm = v[static_cast<size_t>(i)] == static_cast<double>(i);
    CHECK(perm);
    hg::manual_seed(9);
    CHECK(hgtest::same_bits(hg::randperm(n, kCuda), a));
    if (n >= 10) {
      hg::manual_seed(10);
      CHECK(!hgtest::same_bits(hg::randperm(n, kCuda), a));
    }
  }
  CHECK(hg::randperm(0, kCuda).numel() == 0);
  const Tensor f = hg::randperm(100, TensorOptions(DType::Float32, kCuda));
  CHECK(f.dtype() == DType::Float32);
  CHECK(f.device().is_cuda());
}
