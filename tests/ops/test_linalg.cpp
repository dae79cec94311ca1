// Matrix products against float64 loops: mm, bmm, matmul (1-d, 2-d,
// batched, broadcast batch dims), addmm (bias shapes, alpha, beta), linear
// (with and without bias, 3-d input), with transposed operands, in every
// float dtype (GEMMs accumulate in float32).
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
// Reference of torch.matmul for any of its shape cases, from the logical values.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  REQUIRE(sb[sb.size() - 2] == k);
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = hgtest::broadcast(ba, bb);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {m, k});
  eb.insert(eb.end(), {k, n});
  const auto va = hgtest::expand(values(a), sa, ea), vb = hgtest::expand(values(b), sb, eb);
  const int64_t nb = hgtest::numel(batch);
  std::vector<double> out;
  for (int64_t i = 0; i < nb; ++i) {
    const std::vector<double> pa(va.begin() + i * m * k, va.begin() + (i + 1) * m * k);
    const std::vector<double> pb(vb.begin() + i * k * n, vb.begin() + (i + 1) * k * n);
    const auto c = hgtest::matmul2d(pa, pb, m, k, n);
    out.insert(out.end(), c.begin(), c.end());
  }
  *out_shape = batch;
  if (!a1) out_shape->push_back(m);
  if (!b1) out_shape->push_back(n);
  return out;
}

Tensor rnd(const Shape& s, DType dt) { return hgtest::uniform(s, dt, -1, 1); }
}  // namespace

TEST_CASE("mm matches a float64 loop, including transposed operands", "[ops][linalg]") {
  struct Dims {
    int64_t m, k, n;
  };
  for (DType dt : hgtest::kFloatDTypes)
    for (Dims d : {Dims{1, 1, 1}, Dims{7, 5, 3}, Dims{16, 33, 9}, Dims{64, 128, 48}, Dims{3, 1, 4}})
      for (int layout = 0; layout < 4; ++layout) {
        INFO(hgtest::dname(dt) << " [" << d.m << ", " << d.k << "] @ [" << d.k << ", " << d.n << "] layout "
                               << layout);
        const Tensor a = layout & 1 ? rnd({d.k, d.m}, dt).t() : rnd({d.m, d.k}, dt);
        const Tensor b = layout & 2 ? rnd({d.n, d.k}, dt).t() : rnd({d.k, d.n}, dt);
        const Tensor c = mm(a, b);
        CHECK(c.dtype() == dt);
        CHECK(c.shape() == Shape{d.m, d.n});
        HG_CHECK_CLOSE(c, hgtest::matmul2d(values(a), values(b), d.m, d.k, d.n));
      }
}

TEST_CASE("mm with a narrowed (row-padded) operand", "[ops][linalg]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor a = rnd({6, 11}, dt).narrow(1, 2, 7);   // row stride 11
    const Tensor b = rnd({9, 5}, dt).narrow(0, 1, 7);    // offset rows
    HG_CHECK_CLOSE(mm(a, b), hgtest::matmul2d(values(a), values(b), 6, 7, 5));
    const Tensor p = rnd({3, 4, 5}, dt).permute({1, 2, 0}).select(2, 1);  // [4, 5] strides [5, 1], offset 20
    const Tensor q = rnd({5, 3}, dt);
    HG_CHECK_CLOSE(mm(p, q), hgtest::matmul2d(values(p), values(q), 4, 5, 3));
  }
}

TEST_CASE("bmm matches a float64 loop", "[ops][linalg]") {
  for (DType dt : hgtest::kFloatDTypes) {
    for (int layout = 0; layout < 3; ++layout) {
      INFO(hgtest::dname(dt) << " layout " << layout);
      const Tensor a = layout == 1 ? rnd({4, 5, 3}, dt).transpose(1, 2) : rnd({4, 3, 5}, dt);
      const Tensor b = layout == 2 ? rnd({6, 4, 5}, dt).permute({1, 2, 0}) : rnd({4, 5, 6}, dt);
      const Tensor c = bmm(a, b);
      CHECK(c.dtype() == dt);
      CHECK(c.shape() == Shape{4, 3, 6});
      Shape s;
      HG_CHECK_CLOSE(c, ref_matmul(a, b, &s));
    }
  }
}

TEST_CASE("matmul: 1-d, 2-d, batched and broadcast shapes", "[ops][linalg]") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{5}, {5}, {}},                          // dot
      {{3, 5}, {5}, {3}},                      // matrix-vector
      {{5}, {5, 4}, {4}},                      // vector-matrix
      {{3, 5}, {5, 4}, {3, 4}},                // mm
      {{2, 3, 5}, {2, 5, 4}, {2, 3, 4}},       // bmm
      {{2, 3, 5}, {5, 4}, {2, 3, 4}},          // batch with a shared matrix
      {{3, 5}, {2, 5, 4}, {2, 3, 4}},
      {{2, 1, 3, 5}, {4, 5, 2}, {2, 4, 3, 2}},  // broadcast batch dims
      {{5}, {2, 5, 4}, {2, 4}},                // 1-d with batched
      {{2, 3, 5}, {5}, {2, 3}},
      {{1, 3, 5}, {6, 5, 2}, {6, 3, 2}},
  };
  for (DType dt : hgtest::kFloatDTypes)
    for (const auto& c : cases) {
      INFO(hgtest::dname(dt) << " " << shape_str(c.a) << " @ " << shape_str(c.b));
      const Tensor a = rnd(c.a, dt), b = rnd(c.b, dt);
      const Tensor y = matmul(a, b);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == c.out);
      Shape s;
      const auto ref = ref_matmul(a, b, &s);
      CHECK(s == c.out);
      HG_CHECK_CLOSE(y, ref);
      HG_CHECK_CLOSE(a.matmul(b), ref);
    }
  // transposed operands of a batched product
  const Tensor a = rnd({2, 5, 3}, float32).transpose(1, 2), b = rnd({4, 5}, float32).t();
  Shape s;
  HG_CHECK_CLOSE(matmul(a, b), ref_matmul(a, b, &s));
}

TEST_CASE("addmm: bias broadcast, alpha and beta", "[ops][linalg]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (const Shape& bias_shape : {Shape{4}, Shape{3, 4}, Shape{1, 4}, Shape{3, 1}, Shape{}})
      for (auto [beta, alpha] : {std::pair{1.0, 1.0}, std::pair{0.5, 2.0}, std::pair{0.0, 1.0}}) {
        INFO(hgtest::dname(dt) << " bias " << shape_str(bias_shape) << " beta " << beta << " alpha " << alpha);
        const Tensor bias = rnd(bias_shape, dt), a = rnd({3, 6}, dt), b = rnd({4, 6}, dt).t();
        const Tensor y = addmm(bias, a, b, beta, alpha);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == Shape{3, 4});
        const auto p = hgtest::matmul2d(values(a), values(b), 3, 6, 4);
        const auto vb = hgtest::expand(values(bias), bias_shape, {3, 4});
        std::vector<double> ref(12);
        for (size_t i = 0; i < 12; ++i) ref[i] = beta * vb[i] + alpha * p[i];
        HG_CHECK_CLOSE(y, ref);
      }
}

TEST_CASE("addmm: the bias must broadcast to the output shape", "[ops][linalg][errors]") {
  // PyTorch expands self to [m, n]: a [5, 1, 4] bias wrote out of bounds here,
  // a [2, 4] bias for a [1, 4] output silently used its row 0.
  for (const Shape& bias_shape : {Shape{5, 1, 4}, Shape{2, 4}, Shape{3}, Shape{1, 1, 4}}) {
    INFO("bias " << shape_str(bias_shape));
    const auto r = hgtest::run_in_child([&] { (void)addmm(zeros(bias_shape), ones({1, 3}), ones({3, 4})); });
    INFO(r.describe());
    CHECK(r.threw_error);
    CHECK_THAT(r.message, Contains("addmm") && Contains(shape_str(bias_shape)) && Contains("[1, 4]"));
  }
  CHECK(values(addmm(ones({1, 1}), ones({2, 3}), ones({3, 4}))) == std::vector<double>(8, 4.0));
}

TEST_CASE("linear: with and without bias, 2-d and 3-d input", "[ops][linalg]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (const Shape& xs : {Shape{5, 7}, Shape{2, 3, 7}, Shape{7}, Shape{1, 7}})
      for (bool with_bias : {true, false}) {
        INFO(hgtest::dname(dt) << " x " << shape_str(xs) << (with_bias ? " with bias" : " without bias"));
        const Tensor x = rnd(xs, dt), w = rnd({4, 7}, dt), b = with_bias ? rnd({4}, dt) : Tensor();
        const Tensor y = linear(x, w, b);
        Shape out = xs;
        out.back() = 4;
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == out);
        const int64_t rows = hgtest::numel(xs) / 7;
        const auto wt = values(w.t());
        auto ref = hgtest::matmul2d(values(x), wt, rows, 7, 4);
        if (with_bias) {
          const auto vb = values(b);
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < 4; ++j) ref[i * 4 + j] += vb[j];
        }
        HG_CHECK_CLOSE(y, ref);
      }
  // a transposed (non-contiguous) input
  const Tensor x = rnd({7, 5}, float32).t(), w = rnd({3, 7}, float32), b = rnd({3}, float32);
  auto ref = hgtest::matmul2d(values(x), values(w.t()), 5, 7, 3);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) ref[i * 3 + j] += values(b)[j];
  HG_CHECK_CLOSE(linear(x, w, b), ref);
}

TEST_CASE("GEMMs accumulate half inputs in float32", "[ops][linalg]") {
  // 4096 products of 1 * 1: a float16 accumulator would stall at 2048.
  for (DType dt : {float16, bfloat16}) {
    INFO(hgtest::dname(dt));
    const Tensor a = ones({2, 4096}, dt), b = ones({4096, 3}, dt);
    HG_CHECK_EXACT(mm(a, b), std::vector<double>(6, 4096.0));
    // a long random dot product
    const Tensor x = rnd({1, 2048}, dt), y = rnd({2048, 1}, dt);
    HG_CHECK_CLOSE(mm(x, y), hgtest::matmul2d(values(x), values(y), 1, 2048, 1));
  }
}

TEST_CASE("addmm in bfloat16 with alpha and beta rounds once, forward and backward", "[ops][linalg]") {
  // 8-bit mantissas times alpha = 0.75 need 10 bits: rounding alpha * mat1 (or
  // beta * bias) to bfloat16 first would lose them. In float32 all of it is exact.
  auto vals = [](int n, int seed) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back((129 + (i * 37 + seed) % 127) / 128.0 * ((i + seed) % 3 == 0 ? -1 : 1));
    return v;
  };
  const auto va = vals(12, 1), vb = vals(8, 2), vc = vals(6, 3);
  const double alpha = 0.75, beta = 1.25;
  Tensor a = hgtest::make(va, {3, 4}, bfloat16).requires_grad_(true);
  Tensor b = hgtest::make(vb, {4, 2}, bfloat16).requires_grad_(true);
  Tensor c = hgtest::make(vc, {3, 2}, bfloat16).requires_grad_(true);
  const Tensor y = addmm(c, a, b, beta, alpha);
  const auto got = values(y);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double r = beta * vc[i * 2 + j];
      for (int p = 0; p < 4; ++p) r += alpha * va[i * 4 + p] * vb[p * 2 + j];
      INFO("out[" << i << "][" << j << "]");
      CHECK(got[i * 2 + j] == hgtest::round_to(r, bfloat16));
    }
  sum(y).backward();
  const auto ga = values(a.grad());
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 4; ++p) {
      INFO("grad a[" << i << "][" << p << "]");
      CHECK(ga[i * 4 + p] == hgtest::round_to(alpha * (vb[p * 2] + vb[p * 2 + 1]), bfloat16));
    }
  CHECK(values(c.grad()) == std::vector<double>(6, beta));
}
