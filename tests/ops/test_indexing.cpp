// Indexing and gathering ops (ops/indexing_ops.h, ops/indexing.cpp) on the
// CPU: index_select, gather, scatter, scatter_add, masked_fill, where with
// scalars, one_hot, x.index({...}) with tensor indices and x.index_put_.
// Forward against references computed here with plain loops in float64 (on
// the values the inputs hold), in every dtype, on contiguous, transposed and
// narrowed inputs, 0-d and empty; backward by gradcheck in float64; errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hg::TensorOptions;
using hgtest::values;
using namespace hg::indexing;

namespace {

Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

std::vector<double> ivals(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i : t.to_vector<int64_t>()) v.push_back(static_cast<double>(i));
  return v;
}

Shape shape1(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.shape(); }

// out[p] = x[p with p[dim] = index[p]]
std::vector<double> ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const auto xv = values(x), iv = ivals(index);
  const Shape xs = shape1(x), is = shape1(index);
  std::vector<double> out(iv.size());
  for (size_t i = 0; i < iv.size(); ++i) {
    Shape p = unravel(static_cast<int64_t>(i), is);
    p[dim] = static_cast<int64_t>(iv[i]);
    out[i] = xv[static_cast<size_t>(hgtest::ravel(p, xs))];
  }
  return out;
}

// x with x[p with p[dim] = index[p]] = (or +=) src[p], p over index's shape
std::vector<double> ref_scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  auto out = values(x);
  const auto sv = values(src), iv = ivals(index);
  const Shape xs = shape1(x), is = shape1(index), ss = shape1(src);
  for (size_t i = 0; i < iv.size(); ++i) {
    const Shape q = unravel(static_cast<int64_t>(i), is);
    Shape p = q;
    p[dim] = static_cast<int64_t>(iv[i]);
    const double s = sv[static_cast<size_t>(hgtest::ravel(q, ss))];
    auto& o = out[static_cast<size_t>(hgtest::ravel(p, xs))];
    o = add ? o + s : s;
  }
  return out;
}

// Random int64 indices in [0, n) of `shape` (not all zero).
Tensor random_index(const Shape& shape, int64_t n) { return hgtest::uniform(shape, DType::Int64, 0, n - 1); }

// An index along `dim` of `shape` with no repeats along dim (each line a permutation prefix).
Tensor unique_index(const Shape& shape, int64_t dim, int64_t n) {
  const int64_t total = hgtest::numel(shape);
  std::vector<double> v(static_cast<size_t>(total));
  const int64_t len = shape[dim];
  for (int64_t i = 0; i < total; ++i) {
    const Shape p = unravel(i, shape);
    if (p[dim] != 0) continue;
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), hgtest::rng());
    for (int64_t k = 0; k < len; ++k) {
      Shape q = p;
      q[dim] = k;
      v[static_cast<size_t>(hgtest::ravel(q, shape))] = static_cast<double>(perm[k]);
    }
  }
  return hgtest::make(v, shape, DType::Int64);
}

std::vector<DType> all_dtypes() {
  auto d = hgtest::kFloatDTypes;
  d.push_back(DType::Int64);
  return d;
}

// The same values as `t` in three layouts: contiguous, transposed (last two
// dims swapped in memory), narrowed out of a bigger tensor.
std::vector<std::pair<std::string, Tensor>> layouts(const Shape& shape, DType dt) {
  Shape sw = shape;
  std::swap(sw[sw.size() - 1], sw[sw.size() - 2]);
  Shape big = shape;
  big[0] += 2;
  return {{"contiguous", hgtest::uniform(shape, dt)},
          {"transposed", hgtest::uniform(sw, dt).transpose(-1, -2)},
          {"narrowed", hgtest::uniform(big, dt).narrow(0, 1, shape[0])}};
}

}  // namespace

// ---- forward ----------------------------------------------------------------------------------------
TEST_CASE("index_select matches a loop reference in every dtype and layout", "[ops][indexing]") {
  for (DType dt : all_dtypes())
    for (const auto& [name, x] : layouts({4, 5}, dt))
      for (int64_t dim : {0, 1, -1}) {
        INFO(hgtest::dname(dt) << " " << name << " dim " << dim);
        const int64_t d = dim < 0 ? dim + 2 : dim;
        const Tensor idx = hg::tensor(std::vector<int64_t>{3, 0, 3, 1, 2, 3});  // repeats
        const Tensor out = hg::index_select(x, dim, idx);
        Shape os = x.shape();
        os[d] = 6;
        REQUIRE(out.shape() == os);
        CHECK(out.dtype() == dt);
        // reference through gather with the index spread over the other dim
        Shape is(2, 1);
        is[d] = 6;
        const Tensor full = idx.reshape(is).expand(os).contiguous();
        HG_CHECK_EXACT(out, ref_gather(x, d, full));
        HG_CHECK_EXACT(x.index_select(dim, idx), ref_gather(x, d, full));
      }
  // a non-contiguous index, a 0-d index, an empty index, a 0-d input
  const Tensor x = hgtest::uniform({3, 4}, DType::Float32);
  const Tensor idx = hg::tensor(std::vector<int64_t>{2, 9, 0, 9, 1, 9}).slice(0, 0, 6, 2);  // 2, 0, 1
  HG_CHECK_EXACT(hg::index_select(x, 0, idx), ref_gather(x, 0, hg::tensor(std::vector<int64_t>{2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1}, {3, 4})));
  const Tensor one = hg::index_select(x, 1, hg::tensor(std::vector<int64_t>{2}).reshape({}));
  CHECK(one.shape() == Shape{3, 1});
  HG_CHECK_EXACT(one, (std::vector<double>{values(x)[2], values(x)[6], values(x)[10]}));
  CHECK(hg::index_select(x, 1, hg::zeros({0}, DType::Int64)).shape() == Shape{3, 0});
  const Tensor s = hgtest::uniform({}, DType::Float64);
  const Tensor s1 = hg::index_select(s, 0, hg::tensor(std::vector<int64_t>{0}));
  CHECK(s1.dim() == 0);
  HG_CHECK_EXACT(s1, values(s));
}

TEST_CASE("gather matches a loop reference in every dtype, dim and layout", "[ops][indexing]") {
  for (DType dt : all_dtypes())
    for (const auto& [name, x] : layouts({3, 4, 5}, dt))
      for (int64_t dim : {0, 1, 2, -1}) {
        INFO(hgtest::dname(dt) << " " << name << " dim " << dim);
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Shape is = {2, 3, 4};
        is[d] = 6;  // longer than x along dim, shorter elsewhere
        const Tensor idx = random_index(is, x.shape()[d]);
        const Tensor out = hg::gather(x, dim, idx);
        REQUIRE(out.shape() == is);
        HG_CHECK_EXACT(out, ref_gather(x, d, idx));
        // a transposed index
        Shape ts = is;
        std::swap(ts[0], ts[2]);
        const Tensor idx_t = random_index(ts, 3).transpose(0, 2);  // values < 3 fit every dim
        HG_CHECK_EXACT(x.gather(dim, idx_t), ref_gather(x, d, idx_t));
      }
  // bool input: bits move
  const Tensor b = hgtest::random_bool({2, 5});
  const Tensor bi = random_index({2, 3}, 5);
  const Tensor bo = hg::gather(b, 1, bi);
  CHECK(bo.dtype() == DType::Bool);
  HG_CHECK_EXACT(bo, ref_gather(b, 1, bi));
  // 0-d and empty
  const Tensor s = hgtest::uniform({}, DType::Float32);
  const Tensor s0 = hg::gather(s, 0, hg::zeros({}, DType::Int64));
  CHECK(s0.dim() == 0);
  HG_CHECK_EXACT(s0, values(s));
  CHECK(hg::gather(hgtest::uniform({3, 4}, DType::Float32), 1, hg::zeros({3, 0}, DType::Int64)).shape() ==
        Shape{3, 0});
}

TEST_CASE("scatter and scatter_add match a loop reference in every dtype and layout", "[ops][indexing]") {
  for (DType dt : all_dtypes())
    for (const auto& [name, x] : layouts({4, 5}, dt))
      for (int64_t dim : {0, 1}) {
        INFO(hgtest::dname(dt) << " " << name << " dim " << dim);
        Shape is = {3, 4};  // smaller than x and src
        const auto x_before = values(x);
        const Tensor src = hgtest::uniform({4, 6}, dt);
        // scatter: no repeated index along dim (PyTorch leaves repeats undefined)
        const Tensor uidx = unique_index(is, dim, x.shape()[dim]);
        const Tensor out = hg::scatter(x, dim, uidx, src);
        REQUIRE(out.shape() == x.shape());
        HG_CHECK_EXACT(out, ref_scatter(x, dim, uidx, src, false));
        HG_CHECK_EXACT(x.scatter(dim, uidx, 2.5), ref_scatter(x, dim, uidx, hg::full({3, 4}, 2.5, dt), false));
        // scatter_add: repeats add up
        const Tensor idx = random_index(is, 2);  // many repeats
        const Tensor sa = hg::scatter_add(x, dim, idx, src);
        if (dt == DType::Int64 || dt == DType::Float64 || dt == DType::Float32)
          HG_CHECK_CLOSE_TOL(sa, ref_scatter(x, dim, idx, src, true), hgtest::tol(dt));
        else  // float16/bfloat16 accumulate in float32 and round once
          HG_CHECK_EXACT(sa, hgtest::round_all(ref_scatter(x.to(DType::Float32), dim, idx, src.to(DType::Float32), true), dt));
        HG_CHECK_EXACT(x.scatter_add(dim, idx, src), values(sa));
        // the input is unchanged (out of place)
        CHECK(values(x) == x_before);
      }
  // scatter_add where every index is the same: the sum of a column
  const Tensor x = hg::zeros({2, 3}, DType::Float64);
  const Tensor src = hgtest::uniform({4, 3}, DType::Float64);
  const Tensor col = hg::scatter_add(x, 0, hg::zeros({4, 3}, DType::Int64), src);
  const auto sv = values(src);
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 4; ++i) s += sv[static_cast<size_t>(i * 3 + j)];
    CHECK(values(col)[static_cast<size_t>(j)] == Approx(s).epsilon(1e-14));
    CHECK(values(col)[static_cast<size_t>(3 + j)] == 0.0);
  }
  // 0-d and empty
  const Tensor s = hgtest::uniform({}, DType::Float32), v = hgtest::uniform({}, DType::Float32);
  HG_CHECK_EXACT(hg::scatter(s, 0, hg::zeros({}, DType::Int64), v), values(v));
  HG_CHECK_EXACT(hg::scatter_add(s, 0, hg::zeros({}, DType::Int64), v), (std::vector<double>{hgtest::round_to(values(s)[0] + values(v)[0], DType::Float32)}));
  const Tensor e = hgtest::uniform({2, 3}, DType::Float32);
  HG_CHECK_EXACT(hg::scatter(e, 1, hg::zeros({2, 0}, DType::Int64), hgtest::uniform({2, 3}, DType::Float32)), values(e));
}

TEST_CASE("an out-of-range index writes nothing on the CPU", "[ops][indexing][errors]") {
  Tensor x = hgtest::uniform({2, 3}, DType::Float32);
  const auto before = values(x);
  const uint64_t v0 = x.version();
  // the first index is fine, the second is not: the check runs before any write
  const Tensor idx = hg::tensor(std::vector<int64_t>{0, 3}, {1, 2});
  REQUIRE_THROWS_AS(x.scatter_(1, idx, 7.0), hg::Error);
  REQUIRE_THROWS_AS(x.index_put_({0, hg::tensor(std::vector<int64_t>{1, 5})}, 7.0), hg::Error);
  CHECK(values(x) == before);
  CHECK(x.version() == v0);
}

TEST_CASE("scatter with repeated indices keeps the last write on the CPU", "[ops][indexing]") {
  // documented choice (PyTorch leaves it undefined): row-major order of index, last wins
  const Tensor x = hg::zeros({4}, DType::Float32);
  const Tensor idx = hg::tensor(std::vector<int64_t>{1, 1, 3, 1});
  const Tensor src = hg::tensor(std::vector<float>{1, 2, 3, 4});
  HG_CHECK_EXACT(hg::scatter(x, 0, idx, src), (std::vector<double>{0, 4, 0, 3}));
}

TEST_CASE("in-place scatter_ and scatter_add_ write through views and bump the version", "[ops][indexing][inplace]") {
  for (DType dt : all_dtypes()) {
    INFO(hgtest::dname(dt));
    Tensor base = hgtest::uniform({6, 5}, dt);
    const auto base_before = values(base);
    Tensor x = base.narrow(0, 1, 4).transpose(0, 1);  // [5, 4], non-contiguous
    const Tensor before = x.clone();
    const Tensor src = hgtest::uniform({5, 4}, dt);
    const Tensor uidx = unique_index({5, 3}, 1, 4);
    const uint64_t v0 = x.version();
    x.scatter_(1, uidx, src);
    CHECK(x.version() > v0);
    HG_CHECK_EXACT(x, ref_scatter(before, 1, uidx, src, false));
    x.scatter_(1, uidx, 1.5);
    const auto after_value = ref_scatter(hgtest::make(ref_scatter(before, 1, uidx, src, false), {5, 4}, dt), 1, uidx,
                                         hg::full({5, 3}, 1.5, dt), false);
    HG_CHECK_EXACT(x, after_value);
    const Tensor mid = x.clone();
    const Tensor idx = random_index({5, 3}, 2);
    x.scatter_add_(1, idx, src);
    HG_CHECK_CLOSE_TOL(x, ref_scatter(mid, 1, idx, src, true), hgtest::tol(dt));
    // base's rows 0 and 5 (outside the view) untouched
    const auto bv = values(base);
    for (size_t j = 0; j < 5; ++j) {
      CHECK(bv[j] == base_before[j]);
      CHECK(bv[25 + j] == base_before[25 + j]);
    }
  }
}

TEST_CASE("masked_fill broadcasts, keeps the input dtype and fills in place", "[ops][indexing]") {
  for (DType dt : all_dtypes())
    for (const auto& [name, x] : layouts({3, 4}, dt)) {
      INFO(hgtest::dname(dt) << " " << name);
      const Tensor mask = hgtest::random_bool({4});  // broadcasts over rows
      const auto xv = values(x), mv = values(mask);
      std::vector<double> ref(xv.size());
      const double value = dt == DType::Int64 ? 7.0 : 0.75;
      for (size_t i = 0; i < xv.size(); ++i) ref[i] = mv[i % 4] != 0 ? value : xv[i];
      const Tensor out = hg::masked_fill(x, mask, value);
      CHECK(out.dtype() == dt);
      HG_CHECK_EXACT(out, ref);
      HG_CHECK_EXACT(x.masked_fill(mask, hg::full({}, value, DType::Float64)), ref);  // converted to x's dtype
      Tensor y = x.clone();
      y.masked_fill_(mask, value);
      HG_CHECK_EXACT(y, ref);
      Tensor z = x.clone();
      z.masked_fill_(mask, hg::full({}, value, dt));
      HG_CHECK_EXACT(z, ref);
    }
  // the out-of-place form broadcasts the input too (as PyTorch)
  const Tensor x = hgtest::uniform({3}, DType::Float32);
  const Tensor m = hg::tensor(std::vector<double>{1, 0, 1, 0, 0, 1}, {2, 3}).to(DType::Bool);
  const Tensor out = hg::masked_fill(x, m, -1.0);
  REQUIRE(out.shape() == Shape{2, 3});
  const auto xv = values(x);
  HG_CHECK_EXACT(out, (std::vector<double>{-1, xv[1], -1, xv[0], xv[1], -1}));
  // an int64 tensor filled with a fractional value truncates, as PyTorch
  HG_CHECK_EXACT(hg::masked_fill(hg::tensor(std::vector<int64_t>{1, 2}), hg::tensor(std::vector<double>{1, 0}).to(DType::Bool), 2.7),
                 (std::vector<double>{2, 2}));
  // 0-d and empty
  HG_CHECK_EXACT(hg::masked_fill(hg::full({}, 3.0), hg::full({}, 1.0).to(DType::Bool), 5.0), (std::vector<double>{5}));
  CHECK(hg::masked_fill(hg::zeros({0, 2}), hg::ones({2}).to(DType::Bool), 1.0).shape() == Shape{0, 2});
}

TEST_CASE("where with scalars follows PyTorch's typing", "[ops][indexing][where]") {
  const Tensor c = hgtest::random_bool({2, 3});
  const auto cv = values(c);
  for (DType dt : all_dtypes()) {
    INFO(hgtest::dname(dt));
    const Tensor a = hgtest::uniform({3}, dt);  // broadcasts
    const auto av = values(a);
    const DType want = hg::is_floating(dt) ? dt : DType::Float32;
    const Tensor r1 = hg::where(c, a, 0.5), r2 = hg::where(c, 0.5, a);
    CHECK(r1.dtype() == want);
    CHECK(r2.dtype() == want);
    std::vector<double> e1, e2;
    for (size_t i = 0; i < 6; ++i) {
      e1.push_back(cv[i] != 0 ? av[i % 3] : 0.5);
      e2.push_back(cv[i] != 0 ? 0.5 : av[i % 3]);
    }
    HG_CHECK_EXACT(r1, e1);
    HG_CHECK_EXACT(r2, e2);
  }
  const Tensor r = hg::where(c, 1.5, -2.0);
  CHECK(r.dtype() == DType::Float32);
  CHECK(r.shape() == c.shape());
  std::vector<double> e;
  for (double v : cv) e.push_back(v != 0 ? 1.5 : -2.0);
  HG_CHECK_EXACT(r, e);
  CHECK(hg::where(hg::full({}, 1.0).to(DType::Bool), 1.0, 2.0).dim() == 0);
}

TEST_CASE("one_hot gives int64 [..., C] and infers C from the maximum", "[ops][indexing]") {
  const Tensor idx = hg::tensor(std::vector<int64_t>{2, 0, 3, 2, 1, 0}, {2, 3});
  const Tensor oh = hg::one_hot(idx);
  REQUIRE(oh.shape() == Shape{2, 3, 4});
  CHECK(oh.dtype() == DType::Int64);
  std::vector<double> ref(24, 0.0);
  const auto iv = ivals(idx);
  for (size_t i = 0; i < 6; ++i) ref[i * 4 + static_cast<size_t>(iv[i])] = 1;
  HG_CHECK_EXACT(oh, ref);
  CHECK(hg::one_hot(idx, 6).shape() == Shape{2, 3, 6});
  CHECK(hg::sum(hg::one_hot(idx.t(), 6)).item<int64_t>() == 6);  // non-contiguous index
  const Tensor s = hg::one_hot(hg::full({}, 2.0, DType::Int64), 4);
  HG_CHECK_EXACT(s, (std::vector<double>{0, 0, 1, 0}));
  CHECK(hg::one_hot(hg::zeros({0}, DType::Int64), 3).shape() == Shape{0, 3});
}

TEST_CASE("x.index with a bool mask or an int64 index tensor reads a new tensor", "[ops][indexing][index]") {
  for (DType dt : all_dtypes())
    for (const auto& [name, x] : layouts({3, 4}, dt)) {
      INFO(hgtest::dname(dt) << " " << name);
      const auto xv = values(x);
      // x[mask] over both dims: the true elements in row-major order, 1-d
      const Tensor m = hgtest::random_bool({3, 4});
      const auto mv = values(m);
      std::vector<double> ref;
      for (size_t i = 0; i < 12; ++i)
        if (mv[i] != 0) ref.push_back(xv[i]);
      const Tensor r = x.index({m});
      REQUIRE(r.shape() == Shape{static_cast<int64_t>(ref.size())});
      CHECK(!hgtest::same_storage(r, x));
      HG_CHECK_EXACT(r, ref);
      // x[:, mask1] keeps the rows
      const Tensor m1 = hgtest::random_bool({4});
      const auto m1v = values(m1);
      std::vector<double> ref1;
      int64_t cols = 0;
      for (size_t j = 0; j < 4; ++j) cols += m1v[j] != 0;
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 4; ++j)
          if (m1v[j] != 0) ref1.push_back(xv[i * 4 + j]);
      const Tensor r1 = x.index({Slice(), m1});
      REQUIRE(r1.shape() == Shape{3, cols});
      HG_CHECK_EXACT(r1, ref1);
      // x[idx] with a 2-d index and negative entries; x[1, idx]
      const Tensor idx = hg::tensor(std::vector<int64_t>{2, -1, 0, -3}, {2, 2});
      const Tensor r2 = x.index({idx});
      REQUIRE(r2.shape() == Shape{2, 2, 4});
      std::vector<double> ref2;
      for (int64_t row : {2, 2, 0, 0})
        for (int64_t j = 0; j < 4; ++j) ref2.push_back(xv[static_cast<size_t>(row * 4 + j)]);
      HG_CHECK_EXACT(r2, ref2);
      const Tensor r3 = x.index({1, hg::tensor(std::vector<int64_t>{3, -4, 3})});
      HG_CHECK_EXACT(r3, (std::vector<double>{xv[7], xv[4], xv[7]}));
      const Tensor r4 = x.index({Ellipsis, hg::tensor(std::vector<int64_t>{0, 2})});
      REQUIRE(r4.shape() == Shape{3, 2});
      HG_CHECK_EXACT(r4, (std::vector<double>{xv[0], xv[2], xv[4], xv[6], xv[8], xv[10]}));
    }
  // integers and slices still give views
  const Tensor x = hgtest::iota({3, 4});
  CHECK(hgtest::same_storage(x.index({Slice(), 0}), x));
  // None before a tensor index
  CHECK(x.index({None, hg::tensor(std::vector<int64_t>{1})}).shape() == Shape{1, 1, 4});
  // an all-false mask selects nothing
  CHECK(x.index({hg::zeros({3, 4}).to(DType::Bool)}).shape() == Shape{0});
}

TEST_CASE("index_put_ writes through masks, index tensors and slices", "[ops][indexing][index_put]") {
  for (DType dt : all_dtypes()) {
    INFO(hgtest::dname(dt));
    const Tensor x0 = hgtest::uniform({3, 4}, dt);
    const auto xv = values(x0);
    const Tensor m = hgtest::random_bool({3, 4});
    const auto mv = values(m);
    // x[mask] = scalar
    {
      Tensor x = x0.clone();
      const uint64_t v0 = x.version();
      x.index_put_({m}, 1.0);
      CHECK(x.version() > v0);
      std::vector<double> ref = xv;
      for (size_t i = 0; i < 12; ++i)
        if (mv[i] != 0) ref[i] = 1.0;
      HG_CHECK_EXACT(x, ref);
    }
    // x[mask] = values (one per true element)
    {
      Tensor x = x0.clone();
      int64_t n = 0;
      for (double v : mv) n += v != 0;
      const Tensor vals = hgtest::uniform({n}, dt);
      x.index_put_({m}, vals);
      std::vector<double> ref = xv;
      size_t k = 0;
      for (size_t i = 0; i < 12; ++i)
        if (mv[i] != 0) ref[i] = values(vals)[k++];
      HG_CHECK_EXACT(x, ref);
    }
    // x[idx] = row (broadcast), x[:, idx] accumulate with repeats
    {
      Tensor x = x0.clone();
      const Tensor row = hgtest::uniform({4}, dt);
      x.index_put_({hg::tensor(std::vector<int64_t>{2, -3})}, row);
      std::vector<double> ref = xv;
      for (size_t j = 0; j < 4; ++j) ref[8 + j] = ref[j] = values(row)[j];
      HG_CHECK_EXACT(x, ref);
      Tensor y = x0.clone();
      const Tensor add = hgtest::uniform({3, 3}, dt);
      y.index_put_({Slice(), hg::tensor(std::vector<int64_t>{1, 1, 3})}, add, /*accumulate=*/true);
      std::vector<double> ref2 = xv;
      const auto av = values(add);
      for (size_t i = 0; i < 3; ++i) {
        ref2[i * 4 + 1] = (ref2[i * 4 + 1] + av[i * 3]) + av[i * 3 + 1];
        ref2[i * 4 + 3] += av[i * 3 + 2];
      }
      HG_CHECK_CLOSE_TOL(y, ref2, hgtest::tol(dt));
    }
    // a slice and an integer only: a copy into the view
    {
      Tensor x = x0.clone();
      x.index_put_({Slice(1, None), 2}, hg::full({}, 5.0, dt));
      std::vector<double> ref = xv;
      ref[6] = ref[10] = 5.0;
      HG_CHECK_EXACT(x, ref);
    }
  }
  // a mask over dims that do not merge as a view (a transposed tensor)
  Tensor base = hgtest::uniform({4, 3}, DType::Float64);
  Tensor xt = base.t();  // [3, 4], strides (1, 3)
  const Tensor before = xt.clone();
  const Tensor m = hgtest::random_bool({3, 4});
  int64_t n = 0;
  for (double v : values(m)) n += v != 0;
  const Tensor vals = hgtest::uniform({n}, DType::Float64);
  xt.index_put_({m}, vals);
  std::vector<double> ref = values(before);
  size_t k = 0;
  for (size_t i = 0; i < 12; ++i)
    if (values(m)[i] != 0) ref[i] = values(vals)[k++];
  HG_CHECK_EXACT(xt, ref);
  // bool accumulate of a mask with a scalar adds
  Tensor acc = hg::zeros({2, 2}, DType::Float32);
  acc.index_put_({hg::tensor(std::vector<double>{1, 0, 1, 1}, {2, 2}).to(DType::Bool)}, hg::full({}, 2.0), true);
  HG_CHECK_EXACT(acc, (std::vector<double>{2, 0, 2, 2}));
}

// ---- backward ----------------------------------------------------------------------------------------
TEST_CASE("gradients of the indexing ops match finite differences", "[ops][indexing][autograd]") {
  const Tensor idx1 = hg::tensor(std::vector<int64_t>{3, 0, 3, 1});  // a repeat: gradients add up
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::index_select(in[0], 1, idx1); },
               {hgtest::leaf({3, 5})});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::index_select(in[0], 0, idx1); },
               {hgtest::strided_leaf({4, 3})});
  const Tensor gidx = random_index({2, 6}, 3);
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::gather(in[0], 1, gidx); }, {hgtest::leaf({3, 3})});
  const Tensor uidx = unique_index({2, 3}, 1, 4);
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::scatter(in[0], 1, uidx, in[1]); },
               {hgtest::leaf({3, 4}), hgtest::leaf({2, 5})});  // src larger than index
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::scatter(in[0], 1, uidx, 0.5); },
               {hgtest::leaf({3, 4})});
  const Tensor aidx = random_index({2, 3}, 2);
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::scatter_add(in[0], 1, aidx, in[1]); },
               {hgtest::strided_leaf({3, 4}), hgtest::leaf({2, 3})});
  const Tensor mask = hgtest::random_bool({4});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::masked_fill(in[0], mask, 2.0); },
               {hgtest::leaf({3, 4})});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::masked_fill(in[0], mask, in[1]); },
               {hgtest::leaf({3, 4}), hgtest::leaf({})});
  const Tensor mask23 = hgtest::random_bool({2, 3});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::masked_fill(in[0], mask23, 1.0); },
               {hgtest::leaf({3})});  // the input broadcast: its gradient is summed back
  const Tensor cond = hgtest::random_bool({2, 3});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::where(cond, in[0], 0.25); }, {hgtest::leaf({2, 3})});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::where(cond, -1.0, in[0]); }, {hgtest::leaf({3})});
  const Tensor m2 = hgtest::random_bool({3, 4});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return in[0].index({m2}); }, {hgtest::leaf({3, 4})});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return in[0].index({Slice(), hg::tensor(std::vector<int64_t>{-1, 0, -1})}); },
               {hgtest::strided_leaf({3, 4})});
  // 0-d
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return hg::gather(in[0], 0, hg::zeros({}, DType::Int64)); },
               {hgtest::leaf({})});
}

TEST_CASE("index_select's gradient accumulates repeated indices", "[ops][indexing][autograd]") {
  Tensor x = hgtest::leaf({4});
  hg::index_select(x, 0, hg::tensor(std::vector<int64_t>{2, 2, 0, 2})).sum().backward();
  HG_CHECK_EXACT(x.grad(), (std::vector<double>{1, 0, 3, 0}));
}

// ---- errors ------------------------------------------------------------------------------------------
TEST_CASE("indexing ops reject bad input with clear errors", "[ops][indexing][errors]") {
  const Tensor x = hgtest::uniform({3, 4}, DType::Float32);
  const Tensor i1 = hg::tensor(std::vector<int64_t>{0, 4});
  hgtest::expect_errors({
      {"index_select out of range", [&] { hg::index_select(x, 1, i1); },
       {"index_select", "index 4 is out of bounds for dimension 1 with size 4", "0 to 3"}},
      {"index_select negative", [&] { hg::index_select(x, 0, hg::tensor(std::vector<int64_t>{-1})); },
       {"index -1 is out of bounds"}},
      {"index_select float index", [&] { hg::index_select(x, 0, hg::zeros({2})); }, {"index_select", "int64"}},
      {"index_select 2-d index", [&] { hg::index_select(x, 0, hg::zeros({1, 1}, DType::Int64)); }, {"vector"}},
      {"index_select bad dim", [&] { hg::index_select(x, 2, i1); }, {"index_select", "dimension 2 is out of range"}},
      {"gather out of range", [&] { hg::gather(x, 0, hg::full({1, 2}, 3.0, DType::Int64)); },
       {"gather", "index 3 is out of bounds for dimension 0 with size 3"}},
      {"gather dims", [&] { hg::gather(x, 0, hg::zeros({2}, DType::Int64)); }, {"same number of dimensions"}},
      {"gather size", [&] { hg::gather(x, 0, hg::zeros({2, 5}, DType::Int64)); },
       {"gather", "Size does not match at dimension 1"}},
      {"scatter dtype", [&] { hg::scatter(x, 0, hg::zeros({1, 1}, DType::Int64), hg::zeros({1, 1}, DType::Float64)); },
       {"scatter", "src.dtype"}},
      {"scatter src smaller", [&] { hg::scatter(x, 0, hg::zeros({2, 2}, DType::Int64), hg::zeros({1, 2})); },
       {"scatter", "src"}},
      {"scatter_add out of range",
       [&] { hg::scatter_add(x, 1, hg::full({1, 1}, -2.0, DType::Int64), hg::ones({1, 1})); },
       {"scatter_add", "index -2 is out of bounds for dimension 1 with size 4"}},
      {"scatter_ out of range leaves x unchanged", [&] {
         Tensor y = x.clone();
         y.scatter_(0, hg::full({1, 1}, 9.0, DType::Int64), 1.0);
       },
       {"scatter_", "index 9"}},
      {"scatter_ on a leaf that requires grad", [&] {
         Tensor y = hgtest::leaf({3});
         y.scatter_(0, hg::zeros({1}, DType::Int64), 1.0);
       },
       {"scatter_", "requires grad"}},
      {"masked_fill float mask", [&] { hg::masked_fill(x, hg::ones({4}), 1.0); }, {"masked_fill", "bool"}},
      {"masked_fill shapes", [&] { hg::masked_fill(x, hgtest::random_bool({3}), 1.0); }, {"masked_fill"}},
      {"masked_fill 1-d value", [&] { hg::masked_fill(x, hgtest::random_bool({4}), hg::ones({1})); },
       {"0-dimensional value tensor"}},
      {"masked_fill_ mask bigger", [&] {
         Tensor y = hg::zeros({4});
         y.masked_fill_(hgtest::random_bool({3, 4}), 1.0);
       },
       {"masked_fill_"}},
      {"masked_fill_ value requires grad", [&] {
         Tensor y = hg::zeros({4}, DType::Float64);
         y.masked_fill_(hgtest::random_bool({4}), hgtest::leaf({}));
       },
       {"masked_fill_", "require grad", "detach"}},
      {"where float condition", [&] { hg::where(hg::ones({2}), x, 1.0); }, {"where", "bool"}},
      {"one_hot negative", [&] { hg::one_hot(hg::tensor(std::vector<int64_t>{1, -1})); }, {"non-negative"}},
      {"one_hot too big", [&] { hg::one_hot(hg::tensor(std::vector<int64_t>{1, 3}), 3); },
       {"smaller than num_classes", "3"}},
      {"one_hot empty infer", [&] { hg::one_hot(hg::zeros({0}, DType::Int64)); }, {"empty"}},
      {"one_hot float", [&] { hg::one_hot(hg::zeros({2})); }, {"one_hot", "int64"}},
      {"index mask shape", [&] { x.index({hgtest::random_bool({4})}); },
       {"index", "shape of the mask [4] at index 0 does not match"}},
      {"index two tensors", [&] { x.index({hg::zeros({1}, DType::Int64), hg::zeros({1}, DType::Int64)}); },
       {"only one tensor index"}},
      {"index float tensor", [&] { x.index({hg::zeros({1})}); }, {"int64 or bool"}},
      {"index tensor out of range", [&] { x.index({hg::tensor(std::vector<int64_t>{3})}); },
       {"index 3 is out of bounds for dimension 0 with size 3"}},
      {"index_put_ out of range", [&] {
         Tensor y = x.clone();
         y.index_put_({Slice(), hg::tensor(std::vector<int64_t>{-5})}, 1.0);
       },
       {"index_put_", "index -5 is out of bounds for dimension 1 with size 4"}},
      {"index_put_ values shape", [&] {
         Tensor y = x.clone();
         y.index_put_({hg::tensor(std::vector<int64_t>{0, 1})}, hg::ones({3}));
       },
       {"index_put_", "[2, 4]", "[3]"}},
      {"index_put_ on a leaf that requires grad", [&] {
         Tensor y = hgtest::leaf({3});
         y.index_put_({hgtest::random_bool({3})}, 0.0);
       },
       {"index_put_", "requires grad", "no_grad"}},
      {"index_put_ values require grad", [&] {
         Tensor y = hg::zeros({3}, DType::Float64);
         y.index_put_({hg::tensor(std::vector<int64_t>{0})}, hgtest::leaf({1}));
       },
       {"index_put_", "not recorded by autograd"}},
  });
}
