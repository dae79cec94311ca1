// min/argmin, the (values, indices) forms of max/min over a dim, amax/amin,
// logsumexp, norm, all/any, isclose/allclose/equal and isnan/isinf/isfinite,
// against float64 references computed here, in every float dtype (and int64
// where meaningful), on contiguous and permuted inputs, with keepdim,
// negative dims, NaN and inf; gradients by finite differences; errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include <halfgrad/amp/policy.h>

#include "test_util.h"

using namespace halfgrad;
using hgtest::values;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The elements of each output of a reduction over `dims` (sorted, wrapped), in
// row-major order of the reduced indices; outputs in row-major order.
std::vector<std::vector<double>> groups(const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& dims) {
  Shape out_shape = s;
  for (int64_t d : dims) out_shape[d] = 1;
  std::vector<std::vector<double>> g(static_cast<size_t>(std::max<int64_t>(hgtest::numel(out_shape), 1)));
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    Shape idx(s.size());
    int64_t rest = i;
    for (size_t d = s.size(); d-- > 0;) {
      idx[d] = rest % s[d];
      rest /= s[d];
    }
    for (int64_t d : dims) idx[d] = 0;
    g[static_cast<size_t>(hgtest::ravel(idx, out_shape))].push_back(v[static_cast<size_t>(i)]);
  }
  return g;
}

std::vector<double> ref_reduce(const Tensor& x, const std::vector<int64_t>& dims,
                               const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& g : groups(values(x), x.shape(), dims)) out.push_back(f(g));
  return out;
}

double ref_min(const std::vector<double>& g) {
  double m = g[0];
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::min(m, v);
  }
  return m;
}
double ref_max(const std::vector<double>& g) {
  double m = g[0];
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}
double ref_argmin(const std::vector<double>& g) {
  size_t k = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<double>(i);
    if (g[i] < g[k]) k = i;
  }
  return static_cast<double>(k);
}
double ref_lse(const std::vector<double>& g) {
  long double s = 0;
  for (double v : g) s += std::exp(static_cast<long double>(v));
  return static_cast<double>(std::log(s));
}
double ref_norm(const std::vector<double>& g, double p) {
  if (std::isinf(p)) {
    double m = p > 0 ? 0 : kInf;
    for (double v : g) m = p > 0 ? std::max(m, std::fabs(v)) : std::min(m, std::fabs(v));
    return m;
  }
  long double s = 0;
  for (double v : g) s += p == 0 ? (v != 0) : std::pow(std::fabs(static_cast<long double>(v)), p);
  return p == 0 ? static_cast<double>(s) : static_cast<double>(std::pow(s, 1.0L / p));
}

// Logical shape [4, 5, 6]: contiguous and a permuted view.
std::vector<std::pair<std::string, Tensor>> inputs(DType dt, double lo = -2, double hi = 2) {
  return {{"contiguous", hgtest::uniform({4, 5, 6}, dt, lo, hi)},
          {"permuted", hgtest::uniform({6, 4, 5}, dt, lo, hi).permute({1, 2, 0})}};
}

std::vector<DType> float_and_int() {
  auto d = hgtest::kFloatDTypes;
  d.push_back(DType::Int64);
  return d;
}

const std::vector<Shape> kDimSets = {{0}, {1}, {-1}, {0, 1}, {1, 2}, {2, 0}, {0, 1, 2}, {}};

}  // namespace

TEST_CASE("min and argmin over a dim, and the (values, indices) tuples of max and min", "[ops][reduce][min]") {
  for (DType dt : float_and_int())
    // integers in [-3, 3]: many ties, the first index must win
    for (const auto& [layout, x] : inputs(dt, -3, 3))
      for (int64_t dim : {0, 1, 2, -1, -3})
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " " << layout << " dim " << dim << " keepdim " << keepdim);
          const std::vector<int64_t> d{dim < 0 ? dim + 3 : dim};
          const auto [mv, mi] = min(x, dim, keepdim);
          const auto [xv, xi] = max(x, dim, keepdim);
          CHECK(mv.dtype() == dt);
          CHECK(mi.dtype() == DType::Int64);
          CHECK(mv.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          CHECK(mi.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          HG_CHECK_EXACT(mv, ref_reduce(x, d, ref_min));
          HG_CHECK_EXACT(mi, ref_reduce(x, d, ref_argmin));
          HG_CHECK_EXACT(argmin(x, dim, keepdim), ref_reduce(x, d, ref_argmin));
          HG_CHECK_EXACT(xv, ref_reduce(x, d, ref_max));
          HG_CHECK_EXACT(xi, hgtest::reduce(values(x), x.shape(), d, hgtest::RefReduce::ArgMax));
          const auto [tv, ti] = x.min(dim, keepdim);  // the method
          HG_CHECK_EXACT(tv, ref_reduce(x, d, ref_min));
          HG_CHECK_EXACT(x.argmin(dim, keepdim), ref_reduce(x, d, ref_argmin));
        }
}

TEST_CASE("min and argmin of all elements, ties, NaN and inf", "[ops][reduce][min]") {
  for (DType dt : float_and_int()) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::uniform({6, 7}, dt, -30, 30).t();
    const auto v = values(x);
    const auto it = std::min_element(v.begin(), v.end());
    CHECK(min(x).dim() == 0);
    CHECK(min(x).dtype() == dt);
    CHECK(min(x).item<double>() == *it);
    CHECK(x.min().item<double>() == *it);
    CHECK(argmin(x).item<int64_t>() == it - v.begin());
    CHECK(x.argmin().item<int64_t>() == it - v.begin());
    const Tensor t = hgtest::make({5, 1, 2, 1, 1, 9}, {2, 3}, dt);
    CHECK(argmin(t).item<int64_t>() == 1);
    HG_CHECK_EXACT(argmin(t, 1), (std::vector<double>{1, 0}));
    HG_CHECK_EXACT(argmin(t, 0), (std::vector<double>{1, 0, 0}));  // column 1 ties: the first row
  }
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // NaN wins (the first NaN), as PyTorch; -inf is a value like any other
    const Tensor t = hgtest::make({3, -kInf, 1, kNaN, 2, kNaN, 4, 5, -kInf}, {3, 3}, dt);
    CHECK(std::isnan(min(t).item<double>()));
    CHECK(argmin(t).item<int64_t>() == 3);
    const auto [v, i] = min(t, 1);
    HG_CHECK_EXACT(v, (std::vector<double>{-kInf, kNaN, -kInf}));
    HG_CHECK_EXACT(i, (std::vector<double>{1, 0, 2}));
    const auto [v0, i0] = max(t, 0);
    HG_CHECK_EXACT(v0, (std::vector<double>{kNaN, 5, kNaN}));
    HG_CHECK_EXACT(i0, (std::vector<double>{1, 2, 1}));
    HG_CHECK_EXACT(argmin(t, 0), (std::vector<double>{1, 0, 1}));
  }
  // 0-d: the value itself and index 0
  const Tensor s = full({}, 2.5);
  const auto [v, i] = min(s, 0);
  CHECK(v.item<double>() == 2.5);
  CHECK(i.item<int64_t>() == 0);
  CHECK(argmin(s).item<int64_t>() == 0);
  // an empty result over a non-empty dim
  const auto [ev, ei] = min(ones({2, 0}), 0);
  CHECK(ev.shape() == Shape{0});
  CHECK(ei.shape() == Shape{0});
}

TEST_CASE("amax and amin over dims with keepdim", "[ops][reduce][amax]") {
  for (DType dt : float_and_int())
    for (const auto& [layout, x] : inputs(dt, -3, 3))
      for (const Shape& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " " << layout << " dims " << shape_str(dims) << " keepdim " << keepdim);
          const auto d = dims.empty() ? std::vector<int64_t>{0, 1, 2} : hgtest::wrap_dims(dims, 3);
          const Tensor hi = amax(x, dims, keepdim), lo = amin(x, dims, keepdim);
          CHECK(hi.dtype() == dt);
          CHECK(hi.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          CHECK(lo.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          HG_CHECK_EXACT(hi, ref_reduce(x, d, ref_max));
          HG_CHECK_EXACT(lo, ref_reduce(x, d, ref_min));
          HG_CHECK_EXACT(x.amax(dims, keepdim), ref_reduce(x, d, ref_max));
          HG_CHECK_EXACT(x.amin(dims, keepdim), ref_reduce(x, d, ref_min));
        }
  const Tensor t = hgtest::make({1, kNaN, 3, 4}, {2, 2}, DType::Float32);
  HG_CHECK_EXACT(amax(t, {1}), (std::vector<double>{kNaN, 4}));
  HG_CHECK_EXACT(amin(t, {0}), (std::vector<double>{1, kNaN}));
}

TEST_CASE("gradients of min, max(dim), amax and amin", "[ops][reduce][backward]") {
  // distinct values: max(dim)/min(dim) and amax/amin agree there
  for (int64_t dim : {0, 1, -1}) {
    INFO("dim " << dim);
    autograd::gradcheck([dim](const std::vector<Tensor>& in) { return std::get<0>(min(in[0], dim)); },
                        {hgtest::leaf_distinct({3, 4})});
    autograd::gradcheck([dim](const std::vector<Tensor>& in) { return std::get<0>(max(in[0], dim, true)); },
                        {hgtest::leaf_distinct({3, 4})});
  }
  for (const Shape& dims : {Shape{0}, Shape{1, 2}, Shape{-1, 0}, Shape{}}) {
    INFO("dims " << shape_str(dims));
    autograd::gradcheck([dims](const std::vector<Tensor>& in) { return amax(in[0], dims); },
                        {hgtest::leaf_distinct({3, 4, 2})});
    autograd::gradcheck([dims](const std::vector<Tensor>& in) { return amin(in[0].permute({2, 0, 1}), dims, true); },
                        {hgtest::leaf_distinct({3, 4, 2})});
  }
  autograd::gradcheck([](const std::vector<Tensor>& in) { return min(in[0]); }, {hgtest::leaf_distinct({5})});

  // ties: max(dim)/min(dim) send the gradient to the returned (first) index,
  // amax/amin and min() split it evenly, as PyTorch
  const Tensor x = hgtest::leaf_from({1, 3, 3, 2, 2, 5}, {2, 3});
  std::get<0>(max(x, 1)).sum().backward();
  HG_CHECK_EXACT(x.grad(), (std::vector<double>{0, 1, 0, 0, 0, 1}));
  const Tensor y = hgtest::leaf_from({1, 3, 3, 2, 2, 5}, {2, 3});
  amax(y, {1}).sum().backward();
  HG_CHECK_EXACT(y.grad(), (std::vector<double>{0, 0.5, 0.5, 0, 0, 1}));
  const Tensor z = hgtest::leaf_from({2, 3, 2, 2, 7, 5}, {2, 3});
  amin(z, {}).backward();
  HG_CHECK_EXACT(z.grad(), (std::vector<double>{1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 0, 0}));
  const Tensor w = hgtest::leaf_from({2, 1, 1, 1, 7, 1}, {2, 3});
  std::get<0>(min(w, 0)).sum().backward();
  HG_CHECK_EXACT(w.grad(), (std::vector<double>{0, 1, 1, 1, 0, 0}));
}

TEST_CASE("logsumexp over dims, every float dtype, stable for large values", "[ops][reduce][logsumexp]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (const auto& [layout, x] : inputs(dt, -4, 4))
      for (const Shape& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          INFO(hgtest::dname(dt) << " " << layout << " dims " << shape_str(dims) << " keepdim " << keepdim);
          const auto d = dims.empty() ? std::vector<int64_t>{0, 1, 2} : hgtest::wrap_dims(dims, 3);
          const Tensor r = logsumexp(x, dims, keepdim);
          CHECK(r.dtype() == dt);
          CHECK(r.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
          HG_CHECK_CLOSE(r, ref_reduce(x, d, ref_lse));
        }
}

TEST_CASE("logsumexp edge cases: large values, -inf rows, inf, NaN, integers, 0-d, empty", "[ops][reduce][logsumexp]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // 1000 would overflow exp in every dtype without the max shift
    const double big = dt == DType::Float16 ? 60000 : 1000;
    const Tensor x = hgtest::make({big, big, -kInf, -kInf, kInf, 1, kNaN, 1, -5, -4}, {5, 2}, dt);
    const Tensor r = logsumexp(x, {1});
    const double b = hgtest::round_to(big, dt);
    HG_CHECK_CLOSE(r, (std::vector<double>{b + std::log(2.0), -kInf, kInf, kNaN, -4 + std::log1p(std::exp(-1.0))}));
  }
  // integers give float32, as PyTorch
  const Tensor i = hgtest::make({1, 2, 3, 4}, {2, 2}, DType::Int64);
  const Tensor ri = logsumexp(i, {0});
  CHECK(ri.dtype() == DType::Float32);
  HG_CHECK_CLOSE(ri, (std::vector<double>{std::log(std::exp(1.0) + std::exp(3.0)), std::log(std::exp(2.0) + std::exp(4.0))}));
  // 0-d: the value; an empty reduction: log(0) = -inf
  CHECK(logsumexp(full({}, 1.5), {}).item<double>() == 1.5);
  HG_CHECK_EXACT(logsumexp(zeros({3, 0}), {1}), (std::vector<double>{-kInf, -kInf, -kInf}));
  CHECK(logsumexp(zeros({3, 0}), {1}, true).shape() == Shape{3, 1});
  const Tensor u = hgtest::uniform({3, 4}, DType::Float64);
  HG_CHECK_EXACT(u.logsumexp({-1}, true), values(logsumexp(u, {1}, true)));  // the method
}

TEST_CASE("logsumexp backward is the softmax over the reduced dims", "[ops][reduce][logsumexp][backward]") {
  for (const Shape& dims : {Shape{0}, Shape{1}, Shape{-1, 0}, Shape{}}) {
    INFO("dims " << shape_str(dims));
    autograd::gradcheck([dims](const std::vector<Tensor>& in) { return logsumexp(in[0], dims); }, {hgtest::leaf({3, 4})});
    autograd::gradcheck([dims](const std::vector<Tensor>& in) { return logsumexp(in[0], dims, true); },
                        {hgtest::strided_leaf({3, 4})});
  }
  // large inputs: the gradient stays finite and sums to 1 per row
  const Tensor x = hgtest::leaf_from({1000, 1001, -1000, -1001}, {2, 2});
  logsumexp(x, {1}).sum().backward();
  const double a = 1 / (1 + std::exp(1.0));
  HG_CHECK_CLOSE(x.grad(), (std::vector<double>{a, 1 - a, 1 - a, a}));
}

TEST_CASE("norm: p = 1, 2, inf, -inf, 0 and 3 over dims, every float dtype", "[ops][reduce][norm]") {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0})
    for (DType dt : hgtest::kFloatDTypes)
      for (const auto& [layout, x] : inputs(dt))
        for (const Shape& dims : kDimSets)
          for (bool keepdim : {false, true}) {
            INFO("p " << p << " " << hgtest::dname(dt) << " " << layout << " dims " << shape_str(dims) << " keepdim "
                      << keepdim);
            const auto d = dims.empty() ? std::vector<int64_t>{0, 1, 2} : hgtest::wrap_dims(dims, 3);
            const Tensor r = norm(x, p, dims, keepdim);
            CHECK(r.dtype() == dt);
            CHECK(r.shape() == hgtest::reduced_shape(x.shape(), d, keepdim));
            const auto ref = ref_reduce(x, d, [p](const std::vector<double>& g) { return ref_norm(g, p); });
            if (std::isinf(p)) HG_CHECK_EXACT(r, ref);  // max/min |x| are exact
            else HG_CHECK_CLOSE(r, hgtest::round_all(ref, dt));
          }
  // float16: 4096 values of 100 square to 4e7 (float16 overflows at 65504); one
  // float32 accumulation gives the exact 6400
  const Tensor h = full({4096}, 100.0, TensorOptions(DType::Float16));
  CHECK(norm(h).item<double>() == 6400.0);
  CHECK(h.norm(1).item<double>() == std::numeric_limits<double>::infinity());  // 409600 > 65504: inf, as PyTorch
  const Tensor t = hgtest::make({3, -4, 0, kNaN}, {2, 2}, DType::Float32);
  HG_CHECK_EXACT(norm(t, 2, {1}), (std::vector<double>{5, kNaN}));
  HG_CHECK_EXACT(norm(t, kInf, {1}), (std::vector<double>{4, kNaN}));
  HG_CHECK_EXACT(norm(t, 0, {0}), (std::vector<double>{1, 2}));  // NaN counts as nonzero
  HG_CHECK_EXACT(norm(hgtest::make({kInf, 1}, {2}, DType::Float32)), (std::vector<double>{kInf}));
  HG_CHECK_EXACT(norm(zeros({0, 3}), 2, {0}), (std::vector<double>{0, 0, 0}));
  CHECK(norm(full({}, -2.0)).item<double>() == 2.0);
}

TEST_CASE("norm backward: sign for p = 1, x / norm for p = 2, even split for inf", "[ops][reduce][norm][backward]") {
  for (double p : {1.0, 2.0, 3.0, 1.5, kInf, -kInf})
    for (const Shape& dims : {Shape{0}, Shape{1}, Shape{}}) {
      INFO("p " << p << " dims " << shape_str(dims));
      autograd::gradcheck([p, dims](const std::vector<Tensor>& in) { return norm(in[0], p, dims); },
                          {std::isinf(p) ? hgtest::leaf_distinct({3, 4}) : hgtest::leaf_away({3, 4})});
      autograd::gradcheck([p, dims](const std::vector<Tensor>& in) { return norm(in[0], p, dims, true); },
                          {std::isinf(p) ? hgtest::leaf_distinct({3, 4}) : hgtest::strided_leaf({3, 4}, 0.3, 2)});
    }
  // a zero norm: gradient 0 (p = 2), not NaN
  const Tensor z = hgtest::leaf_from({0, 0, 3, 4}, {2, 2});
  norm(z, 2, {1}).sum().backward();
  HG_CHECK_EXACT(z.grad(), (std::vector<double>{0, 0, 0.6, 0.8}));
  // inf: evenly between the elements of the largest |x|, with their signs
  const Tensor m = hgtest::leaf_from({-3, 3, 1, 2}, {4});
  norm(m, kInf).backward();
  HG_CHECK_EXACT(m.grad(), (std::vector<double>{-0.5, 0.5, 0, 0}));
  // p = 0: no gradient
  const Tensor c = hgtest::leaf_from({1, 0, 2}, {3});
  norm(c, 0).backward();
  HG_CHECK_EXACT(c.grad(), (std::vector<double>{0, 0, 0}));
}

TEST_CASE("all and any over all elements and over a dim", "[ops][reduce][logical]") {
  for (DType dt : hgtest::kAllDTypes)
    for (bool permuted : {false, true}) {
      INFO(hgtest::dname(dt) << (permuted ? " permuted" : ""));
      // rows: all nonzero, mixed, all zero; NaN is nonzero
      std::vector<double> v = {1, 2, 3, 0, 5, 0, 0, 0, 0};
      if (hgtest::dname(dt).find("float") != std::string::npos) v[1] = kNaN;
      if (dt == DType::Bool) v = {1, 1, 1, 0, 1, 0, 0, 0, 0};
      Tensor x = hgtest::make(v, {3, 3}, dt);
      if (permuted) x = hgtest::make(v, {3, 3}, dt).t().contiguous().t();
      CHECK(all(x).dtype() == DType::Bool);
      CHECK(all(x).dim() == 0);
      CHECK_FALSE(all(x).item<bool>());
      CHECK(any(x).item<bool>());
      HG_CHECK_EXACT(all(x, 1), (std::vector<double>{1, 0, 0}));
      HG_CHECK_EXACT(any(x, -1), (std::vector<double>{1, 1, 0}));
      HG_CHECK_EXACT(all(x, 0), (std::vector<double>{0, 0, 0}));
      HG_CHECK_EXACT(any(x, 0, true), (std::vector<double>{1, 1, 1}));
      CHECK(any(x, 0, true).shape() == Shape{1, 3});
      HG_CHECK_EXACT(x.all(1, true), (std::vector<double>{1, 0, 0}));
      CHECK(x.any().item<bool>());
      CHECK(all(x.narrow(0, 0, 1)).item<bool>());
    }
  CHECK(all(full({}, kNaN)).item<bool>());
  CHECK(all(zeros({0})).item<bool>());   // empty: true
  CHECK_FALSE(any(zeros({0})).item<bool>());  // empty: false
  HG_CHECK_EXACT(all(zeros({2, 0}), 1), (std::vector<double>{1, 1}));
  CHECK(any(full({}, 2.0), 0).dim() == 0);
}

TEST_CASE("isnan, isinf, isfinite, isclose, allclose and equal", "[ops][logical]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor x = hgtest::make({1, kNaN, kInf, -kInf, 0, -2}, {2, 3}, dt).t();
    HG_CHECK_EXACT(isnan(x), (std::vector<double>{0, 0, 1, 0, 0, 0}));
    // x is [[1, -inf], [NaN, 0], [inf, -2]]
    HG_CHECK_EXACT(isinf(x), (std::vector<double>{0, 1, 0, 0, 1, 0}));
    HG_CHECK_EXACT(isfinite(x), (std::vector<double>{1, 0, 0, 1, 0, 1}));
    HG_CHECK_EXACT(x.isnan(), (std::vector<double>{0, 0, 1, 0, 0, 0}));
  }
  const Tensor i = hgtest::make({1, -5}, {2}, DType::Int64);
  HG_CHECK_EXACT(isnan(i), (std::vector<double>{0, 0}));
  HG_CHECK_EXACT(isinf(i), (std::vector<double>{0, 0}));
  HG_CHECK_EXACT(isfinite(i), (std::vector<double>{1, 1}));

  // isclose: |a - b| <= atol + rtol |b| (not symmetric), inf == inf, NaN only with equal_nan
  const Tensor a = hgtest::make({1, 1, kInf, kInf, kNaN, 0, 100}, {7}, DType::Float64);
  const Tensor b = hgtest::make({1 + 1e-6, 1.1, kInf, -kInf, kNaN, 1e-9, 100.0009}, {7}, DType::Float64);
  HG_CHECK_EXACT(isclose(a, b), (std::vector<double>{1, 0, 1, 0, 0, 1, 1}));
  HG_CHECK_EXACT(isclose(a, b, 1e-5, 1e-8, true), (std::vector<double>{1, 0, 1, 0, 1, 1, 1}));
  HG_CHECK_EXACT(isclose(a, b, 0, 0.2), (std::vector<double>{1, 1, 1, 0, 0, 1, 1}));
  HG_CHECK_EXACT(a.isclose(b, 0, 0), (std::vector<double>{0, 0, 1, 0, 0, 0, 0}));
  CHECK_FALSE(allclose(a, b));
  CHECK(allclose(a.narrow(0, 0, 1), b.narrow(0, 0, 1)));
  CHECK(allclose(a, a, 0, 0, true));
  CHECK_FALSE(allclose(a, a));  // NaN
  // broadcasting and mixed dtypes
  const Tensor m = hgtest::uniform({3, 4}, DType::Float32);
  CHECK(allclose(m, mul(m.to(DType::Float64), 1 + 1e-7)));
  CHECK_FALSE(allclose(m, mul(m.to(DType::Float64), 1 + 1e-4)));
  CHECK(m.allclose(m.to(DType::Float16), 1e-3, 1e-5));
  HG_CHECK_EXACT(isclose(hgtest::make({1, 2}, {2}, DType::Int64), hgtest::make({1, 3}, {2}, DType::Int64)),
                 (std::vector<double>{1, 0}));
  HG_CHECK_EXACT(isclose(m, m.narrow(0, 1, 1)).narrow(0, 1, 1), std::vector<double>(4, 1.0));

  // equal: shape and values; NaN != NaN; promotion as eq
  CHECK(equal(m, m.clone()));
  CHECK(m.equal(m.t().contiguous().t()));
  CHECK_FALSE(equal(m, m.reshape({4, 3})));
  CHECK_FALSE(equal(m, add(m, 1e-3)));
  CHECK(equal(hgtest::make({1, 2}, {2}, DType::Int64), hgtest::make({1, 2}, {2}, DType::Float32)));
  CHECK_FALSE(equal(full({1}, kNaN), full({1}, kNaN)));
  CHECK(equal(zeros({0}), zeros({0})));
}

TEST_CASE("errors of the new reductions", "[ops][reduce][errors]") {
  using hgtest::ErrorCase;
  hgtest::expect_errors({
      {"min of an empty tensor", [] { (void)min(zeros({0})); }, {"min", "empty"}},
      {"min over an empty dim", [] { (void)min(zeros({2, 0}), 1); }, {"min", "empty"}},
      {"argmin out of range", [] { (void)argmin(ones({2, 3}), 2); }, {"argmin"}},
      {"argmin of bool", [] { (void)argmin(ones({2}, TensorOptions(DType::Bool))); }, {"argmin", "bool"}},
      {"max(dim) out of range", [] { (void)max(ones({2, 3}), -3); }, {"max"}},
      {"amax over an empty dim", [] { (void)amax(zeros({2, 0}), {1}); }, {"amax", "empty"}},
      {"amin with a repeated dim", [] { (void)amin(ones({2, 3}), {1, -1}); }, {"amin", "twice"}},
      {"norm of int64", [] { (void)norm(ones({2}, TensorOptions(DType::Int64))); }, {"norm", "int64", "floating"}},
      {"inf norm over an empty dim", [] { (void)norm(zeros({2, 0}), kInf, {1}); }, {"norm", "empty"}},
      {"norm with NaN p", [] { (void)norm(ones({2}), kNaN); }, {"norm", "NaN"}},
      {"logsumexp dim out of range", [] { (void)logsumexp(ones({2}), {1}); }, {"logsumexp"}},
      {"all dim out of range", [] { (void)all(ones({2}), 1); }, {"all"}},
      {"isclose with negative rtol", [] { (void)isclose(ones({2}), ones({2}), -1); }, {"isclose", "rtol"}},
      {"isclose shapes", [] { (void)isclose(ones({2}), ones({3})); }, {"isclose"}},
      {"undefined input", [] { (void)amax(Tensor(), {}); }, {"amax", "undefined"}},
  });
}

TEST_CASE("max(dim) saves its indices for backward: changing them in place is an Error", "[ops][reduce][backward]") {
  const Tensor x = hgtest::leaf_distinct({3, 4});
  auto [v, i] = max(x, 1);
  i.fill_(0);
  REQUIRE_THROWS_AS(v.sum().backward(), Error);
  // without a backward the indices are the caller's to change
  autograd::NoGradGuard no_grad;
  auto [v2, i2] = min(x, 0);
  REQUIRE_NOTHROW(i2.fill_(0));
}

TEST_CASE("autocast rows: logsumexp and norm are fp32 ops on CUDA, the others have none", "[ops][reduce][amp]") {
  using amp::CastPolicy;
  CHECK(amp::lookup_policy(DeviceType::CUDA, "logsumexp") == CastPolicy::Fp32);
  CHECK(amp::lookup_policy(DeviceType::CUDA, "norm") == CastPolicy::Fp32);
  for (const char* op : {"logsumexp", "norm", "min", "amax", "all", "isclose", "remainder", "fmod"})
    CHECK_FALSE(amp::lookup_policy(DeviceType::CPU, op).has_value());
  for (const char* op : {"min", "argmin", "amax", "amin", "all", "any", "isnan", "remainder", "fmod"})
    CHECK_FALSE(amp::lookup_policy(DeviceType::CUDA, op).has_value());
}
