// layer_norm, embedding and scaled_dot_product_attention (the ops of a small
// GPT; layer_norm a fused op, the others composites): forward against float64
// references computed here in plain loops, in every float dtype; backward by
// finite differences in float64, and layer_norm's fused backward against a
// float64 reference too (odd, single and large rows, with and without weight
// and bias, its bits for 1 and 2 threads); layer_norm's float32 statistics and sdpa's
// lower-precision row under autocast; sdpa's causal, bool and float masks,
// scale and dropout; embedding's padding_idx and index errors; and on a CUDA
// device, CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "cuda_compare.h"
#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The relative-error tolerance of a result that went through a few roundings
// in the half types (sdpa: the scaled q and k, the scores, the weights, the output).
double tol_chain(DType dt) { return is_low_precision(dt) ? 2.5 * hgtest::tol(dt) : hgtest::tol(dt); }

// layer_norm of v viewed as [rows, n] (n = the normalized elements), float64.
std::vector<double> layer_norm_ref(const std::vector<double>& v, int64_t n, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  std::vector<double> out(v.size());
  const int64_t rows = static_cast<int64_t>(v.size()) / n;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += v[r * n + i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (v[r * n + i] - mean) * (v[r * n + i] - mean);
    var /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      double y = (v[r * n + i] - mean) / std::sqrt(var + eps);
      if (!w.empty()) y *= w[i];
      if (!b.empty()) y += b[i];
      out[r * n + i] = y;
    }
  }
  return out;
}

// The gradients of sum(g * layer_norm(v)) (v, g viewed as [rows, n]; w empty:
// no weight), float64: dx, and the column sums dw = sum g * xhat, db = sum g.
struct LayerNormGrads {
  std::vector<double> dx, dw, db;
};
LayerNormGrads layer_norm_backward_ref(const std::vector<double>& v, const std::vector<double>& g, int64_t n,
                                       const std::vector<double>& w, double eps) {
  const int64_t rows = static_cast<int64_t>(v.size()) / n;
  LayerNormGrads r{std::vector<double>(v.size()), std::vector<double>(static_cast<size_t>(n)),
                   std::vector<double>(static_cast<size_t>(n))};
  std::vector<double> xhat(static_cast<size_t>(n)), gw(static_cast<size_t>(n));
  for (int64_t row = 0; row < rows; ++row) {
    const double* x = v.data() + row * n;
    const double* gr = g.data() + row * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
    double a = 0, c = 0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (x[i] - mean) * rstd;
      gw[i] = gr[i] * (w.empty() ? 1.0 : w[i]);
      a += gw[i];
      c += gw[i] * xhat[i];
      r.dw[i] += gr[i] * xhat[i];
      r.db[i] += gr[i];
    }
    a /= static_cast<double>(n);
    c /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) r.dx[row * n + i] = rstd * (gw[i] - a - xhat[i] * c);
  }
  return r;
}

// sdpa over B independent problems: q [B, L, E], k [B, S, E], v [B, S, Ev];
// mask(b, i, j) gives the additive term (-inf: masked). Returns output [B, L, Ev]
// and, in *weights, [B, L, S]. A fully masked row gives zeros.
std::vector<double> sdpa_ref(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                             int64_t B, int64_t L, int64_t S, int64_t E, int64_t Ev, double scale,
                             const std::function<double(int64_t, int64_t, int64_t)>& mask,
                             std::vector<double>* weights = nullptr) {
  std::vector<double> out(static_cast<size_t>(B * L * Ev), 0.0), wts(static_cast<size_t>(B * L * S), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        s[j] = dot * scale + (mask ? mask(b, i, j) : 0.0);
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInf) continue;  // all masked: zeros
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < S; ++j) {
        const double p = s[j] / sum;
        wts[(b * L + i) * S + j] = p;
        for (int64_t e = 0; e < Ev; ++e) out[(b * L + i) * Ev + e] += p * v[(b * S + j) * Ev + e];
      }
    }
  if (weights) *weights = wts;
  return out;
}

}  // namespace

// ---- layer_norm ------------------------------------------------------------------------------

TEST_CASE("layer_norm matches a float64 reference in every float dtype", "[ops][layer_norm]") {
  struct Case {
    Shape x, ns;
  };
  for (const Case& c : {Case{{4, 7, 16}, {16}}, Case{{3, 5, 4, 6}, {4, 6}}, Case{{33}, {33}}})
    for (DType dt : hgtest::kFloatDTypes)
      for (int affine : {0, 1, 2}) {  // none, weight and bias, weight only
        INFO(shape_str(c.x) << " over " << shape_str(c.ns) << " " << hgtest::dname(dt) << " affine " << affine);
        const Tensor x = hgtest::uniform(c.x, dt, -3, 5);
        const Tensor w = affine ? hgtest::uniform(c.ns, dt, 0.5, 1.5) : Tensor();
        const Tensor b = affine == 1 ? hgtest::uniform(c.ns, dt, -1, 1) : Tensor();
        const Tensor y = layer_norm(x, c.ns, w, b, 1e-5);
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == x.shape());
        HG_CHECK_CLOSE(y, layer_norm_ref(values(x), hgtest::numel(c.ns), w.defined() ? values(w) : std::vector<double>{},
                                         b.defined() ? values(b) : std::vector<double>{}, 1e-5));
        // the functional spelling is the same function
        CHECK(hgtest::same_bits(nn::functional::layer_norm(x, c.ns, w, b), y));
      }
  // a non-contiguous input, and a larger eps
  const Tensor xt = hgtest::uniform({16, 9}, float32).t();
  HG_CHECK_CLOSE(layer_norm(xt, {16}, Tensor(), Tensor(), 0.1), layer_norm_ref(values(xt), 16, {}, {}, 0.1));
  // AMP's mixed case: a bfloat16 input with float32 parameters gives bfloat16
  const Tensor xb = hgtest::uniform({6, 32}, bfloat16), wf = hgtest::uniform({32}, float32, 0.5, 1.5),
               bf = hgtest::uniform({32}, float32);
  const Tensor yb = layer_norm(xb, {32}, wf, bf);
  CHECK(yb.dtype() == bfloat16);
  HG_CHECK_CLOSE(yb, layer_norm_ref(values(xb), 32, values(wf), values(bf), 1e-5));
}

TEST_CASE("layer_norm's backward matches finite differences in float64", "[ops][layer_norm][autograd]") {
  const Tensor x = hgtest::leaf({3, 4, 5}), w = hgtest::leaf({5}, 0.5, 1.5), b = hgtest::leaf({5});
  const Tensor x2 = hgtest::leaf({2, 3, 4}), w2 = hgtest::leaf({3, 4}, 0.5, 1.5), b2 = hgtest::leaf({3, 4});
  const auto last = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, in[1], in[2]); };
  const auto two = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {3, 4}, in[1], in[2]); };
  const auto plain = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}); };
  // a nonlinear function of the output, so the upstream gradient varies
  const auto squared = [&](const std::vector<Tensor>& in) {
    const Tensor y = layer_norm(in[0], {5}, in[1], in[2]);
    return mul(y, y);
  };
  HG_GRADCHECK(last, {x, w, b});
  HG_GRADCHECK(two, {x2, w2, b2});
  HG_GRADCHECK(plain, {x});
  HG_GRADCHECK(squared, {x, w, b});
  HG_GRADCHECK(last, {hgtest::strided_leaf({4, 5}), w, b});
  HG_GRADCHECK(last, {x.detach(), w, b});  // parameters only
  HG_GRADCHECK(last, {x, w.detach(), Tensor()});
  // through the fused backward: odd rows, bias only, rows in several chunks of its column sums
  const auto odd = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {7}, in[1], in[2]); };
  HG_GRADCHECK(odd, {hgtest::leaf({3, 7}), hgtest::leaf({7}, 0.5, 1.5), hgtest::leaf({7})});
  HG_GRADCHECK(odd, {hgtest::leaf({2, 7}), Tensor(), hgtest::leaf({7})});
  const auto many = [](const std::vector<Tensor>& in) {
    const Tensor y = layer_norm(in[0], {3}, in[1], in[2]);
    return mul(y, y);
  };
  HG_GRADCHECK(many, {hgtest::leaf({41, 3}), hgtest::leaf({3}, 0.5, 1.5), hgtest::leaf({3})});
}

// The fused kernels (kernels/cpu/layer_norm.cpp): rows of odd lengths (the
// kernel's 16 partial sums and their tail), one row, a large row, enough rows
// for several chunks of the column sums and the OpenMP team, with and without
// weight and bias; forward and all three gradients against float64.
TEST_CASE("layer_norm's fused forward and backward match float64 in every float dtype, odd and large rows",
          "[ops][layer_norm][autograd]") {
  const std::vector<Shape> shapes = {{5, 7}, {3, 33}, {4, 1}, {1, 4099}, {41, 3}, {600, 130}};
  for (const Shape& shape : shapes)
    for (DType dt : hgtest::kFloatDTypes)
      for (int affine : {0, 1, 2}) {  // none, weight and bias, bias only
        const int64_t n = shape[1];
        INFO(shape_str(shape) << " " << hgtest::dname(dt) << " affine " << affine);
        Tensor x = hgtest::uniform(shape, dt, -3, 5);
        Tensor w = affine == 1 ? hgtest::uniform({n}, dt, 0.5, 1.5) : Tensor();
        Tensor b = affine ? hgtest::uniform({n}, dt, -1, 1) : Tensor();
        for (Tensor* t : {&x, &w, &b})
          if (t->defined()) t->requires_grad_(true);
        const Tensor y = layer_norm(x, {n}, w, b);
        const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>{};
        HG_CHECK_CLOSE(y, layer_norm_ref(values(x), n, wv, b.defined() ? values(b) : std::vector<double>{}, 1e-5));
        const Tensor g = hgtest::uniform(shape, dt);
        y.backward(g);
        const LayerNormGrads ref = layer_norm_backward_ref(values(x), values(g), n, wv, 1e-5);
        REQUIRE(x.grad().defined());
        CHECK(x.grad().dtype() == dt);
        HG_CHECK_CLOSE(x.grad(), ref.dx);
        if (w.defined()) {
          CHECK(w.grad().dtype() == dt);
          HG_CHECK_CLOSE(w.grad(), ref.dw);
        }
        if (b.defined()) {
          CHECK(b.grad().dtype() == dt);
          HG_CHECK_CLOSE(b.grad(), ref.db);
        }
      }
  // AMP's mixed case: bfloat16 and float16 rows with float32 parameters; the
  // parameters' gradients are float32 sums, as accurate as float32
  for (DType dt : {bfloat16, float16}) {
    INFO(hgtest::dname(dt) << " with float32 weight and bias");
    Tensor x = hgtest::uniform({37, 19}, dt, -3, 5), w = hgtest::uniform({19}, float32, 0.5, 1.5),
           b = hgtest::uniform({19}, float32);
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
    const Tensor g = hgtest::uniform({37, 19}, dt);
    const Tensor y = layer_norm(x, {19}, w, b);
    CHECK(y.dtype() == dt);
    HG_CHECK_CLOSE(y, layer_norm_ref(values(x), 19, values(w), values(b), 1e-5));
    y.backward(g);
    const LayerNormGrads ref = layer_norm_backward_ref(values(x), values(g), 19, values(w), 1e-5);
    HG_CHECK_CLOSE(x.grad(), ref.dx);
    CHECK(w.grad().dtype() == float32);
    HG_CHECK_CLOSE_TOL(w.grad(), ref.dw, 1e-5);
    HG_CHECK_CLOSE_TOL(b.grad(), ref.db, 1e-5);
  }
  // rows far from 0 with a small spread: the two-pass variance keeps them
  // (E[x^2] - E[x]^2 in float32 would cancel to noise)
  std::vector<double> v(3 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1000.0 + 0.1 * static_cast<double>((i * 7) % 9);
  const Tensor xf = hgtest::make(v, {3, 64}, float32);
  HG_CHECK_CLOSE_TOL(layer_norm(xf, {64}), layer_norm_ref(values(xf), 64, {}, {}, 1e-5), 1e-3);
}

TEST_CASE("layer_norm's backward gives the same bits on every run and for 1 and 2 threads",
          "[ops][layer_norm][autograd]") {
  const Tensor x0 = hgtest::uniform({700, 96}, float32), w0 = hgtest::uniform({96}, float32, 0.5, 1.5),
               b0 = hgtest::uniform({96}, float32), g = hgtest::uniform({700, 96}, float32);
  const int threads = get_num_threads();
  std::vector<std::vector<Tensor>> grads;
  for (int t : {1, 2, 2}) {
    set_num_threads(t);
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* p : {&x, &w, &b}) p->requires_grad_(true);
    layer_norm(x, {96}, w, b).backward(g);
    grads.push_back({x.grad(), w.grad(), b.grad()});
  }
  set_num_threads(threads);
  for (size_t run = 1; run < grads.size(); ++run)
    for (size_t i = 0; i < 3; ++i) {
      INFO("run " << run << " gradient " << i);
      CHECK(hgtest::same_bits(grads[run][i], grads[0][i]));
    }
}

TEST_CASE("layer_norm under autocast: statistics in float32, CPU runs in the input's dtype",
          "[ops][layer_norm][amp]") {
  CHECK_FALSE(amp::lookup_policy(DeviceType::CPU, "layer_norm").has_value());
  CHECK(amp::lookup_policy(DeviceType::CUDA, "layer_norm") == amp::CastPolicy::Fp32);
  // Values far from 0 with a small spread: statistics in bfloat16 would lose
  // them; the result is as accurate as its rounding to bfloat16.
  std::vector<double> v(4 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1000.0 + 4.0 * static_cast<double>((i * 7) % 9) - 16.0;
  const Tensor xb = hgtest::make(v, {4, 64}, bfloat16);
  Tensor w = hgtest::uniform({64}, float32, 0.5, 1.5);
  Tensor b = hgtest::uniform({64}, float32);
  w.requires_grad_(true);
  b.requires_grad_(true);
  amp::autocast region(DeviceType::CPU);
  const Tensor x32 = hgtest::uniform({4, 64}, float32);
  CHECK(layer_norm(x32, {64}, w, b).dtype() == float32);  // no row on the CPU: float32 in, float32 out
  const Tensor y = layer_norm(xb, {64}, w, b);
  CHECK(y.dtype() == bfloat16);
  HG_CHECK_CLOSE(y, layer_norm_ref(v, 64, values(w), values(b), 1e-5));
  y.to(float32).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == float32);
}

TEST_CASE("layer_norm's errors name the op, the shapes and a remedy", "[ops][layer_norm][errors]") {
  const Tensor x = hgtest::uniform({2, 3, 8}, float32);
  hgtest::expect_errors({
      {"normalized_shape not the trailing dims", [&] { layer_norm(x, {3}); },
       {"layer_norm", "[2, 3, 8]", "does not end with normalized_shape [3]", "[*, 3]"}},
      {"normalized_shape longer than the input", [&] { layer_norm(x, {1, 2, 3, 8}); }, {"layer_norm", "[1, 2, 3, 8]"}},
      {"empty normalized_shape", [&] { layer_norm(x, Shape{}); }, {"layer_norm", "at least one dim"}},
      {"weight shape", [&] { layer_norm(x, {8}, ones({4})); }, {"layer_norm", "weight", "[4]", "[8]"}},
      {"bias shape", [&] { layer_norm(x, {3, 8}, ones({3, 8}), ones({8})); }, {"layer_norm", "bias", "[3, 8]"}},
      {"weight dtype", [&] { layer_norm(x, {8}, ones({8}, float64)); }, {"layer_norm", "float64", "autocast"}},
      {"integer input", [&] { layer_norm(ones({2, 8}, int64), {8}); }, {"layer_norm", "floating"}},
      {"nn::LayerNorm on the wrong size", [&] { nn::LayerNorm(4)(x); }, {"layer_norm", "[4]", "[2, 3, 8]"}},
  });
}

// ---- embedding -------------------------------------------------------------------------------

TEST_CASE("embedding picks the weight's rows in every float dtype", "[ops][embedding]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    const Tensor w = hgtest::uniform({10, 6}, dt);
    const std::vector<double> wv = values(w);
    const Tensor idx = hgtest::make({3, 0, 9, 3, 5, 1, 1, 7}, {2, 4}, int64);
    const Tensor y = embedding(idx, w);
    CHECK(y.dtype() == dt);
    REQUIRE(y.shape() == Shape{2, 4, 6});
    std::vector<double> ref;
    for (int64_t i : hgtest::ivalues(idx))
      for (int64_t d = 0; d < 6; ++d) ref.push_back(wv[i * 6 + d]);
    HG_CHECK_EXACT(y, ref);
    // padding_idx changes no value
    HG_CHECK_EXACT(embedding(idx, w, 3), ref);
    // 0-d indices give one row; empty indices an empty result
    const Tensor one = embedding(hgtest::make({5}, {}, int64), w);
    CHECK(one.shape() == Shape{6});
    HG_CHECK_EXACT(one, std::vector<double>(wv.begin() + 30, wv.begin() + 36));
    CHECK(embedding(zeros({0, 3}, int64), w).shape() == Shape{0, 3, 6});
  }
}

TEST_CASE("embedding's gradient is dense, adds up repeats and skips padding_idx", "[ops][embedding][autograd]") {
  const Tensor idx = hgtest::make({3, 0, 9, 3, 5, 1, 1, 3}, {2, 4}, int64);
  for (std::optional<int64_t> pad : {std::optional<int64_t>(), std::optional<int64_t>(1), std::optional<int64_t>(-7)}) {
    INFO("padding_idx " << (pad ? std::to_string(*pad) : "none"));
    Tensor w = hgtest::uniform({10, 4}, float32);
    w.requires_grad_(true);
    const Tensor g = hgtest::uniform({2, 4, 4}, float32);
    embedding(idx, w, pad).backward(g);
    REQUIRE(w.grad().defined());
    CHECK(w.grad().shape() == Shape{10, 4});
    const int64_t p = pad ? (*pad < 0 ? *pad + 10 : *pad) : -1;
    std::vector<double> ref(40, 0.0);
    const std::vector<double> gv = values(g);
    const std::vector<int64_t> iv = hgtest::ivalues(idx);
    for (size_t n = 0; n < iv.size(); ++n)
      if (iv[n] != p)
        for (int64_t d = 0; d < 4; ++d) ref[iv[n] * 4 + d] += gv[n * 4 + d];
    HG_CHECK_CLOSE(w.grad(), ref);
    if (p >= 0) {
      for (double v : values(w.grad().select(0, p))) CHECK(v == 0.0);
    }
  }
  Tensor w = hgtest::leaf({6, 3});
  const Tensor i2 = hgtest::make({0, 5, 2, 2, 4}, {5}, int64);
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return embedding(i2, in[0]); }, {w});
  // padding_idx on a row the indices do not use: the where changes nothing
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return mul(embedding(i2, in[0], 3), embedding(i2, in[0])); },
               {w});
}

TEST_CASE("embedding's errors: out-of-range indices, dtypes, shapes", "[ops][embedding][errors]") {
  const Tensor w = hgtest::uniform({10, 4}, float32);
  hgtest::expect_errors({
      {"index == num_embeddings", [&] { embedding(hgtest::make({1, 10, 2}, {3}, int64), w); },
       {"embedding", "index 10", "num_embeddings 10", "[0, 10)"}},
      {"negative index", [&] { embedding(hgtest::make({1, -1}, {2}, int64), w); }, {"embedding", "index -1"}},
      {"float indices", [&] { embedding(hgtest::make({1, 2}, {2}, float32), w); },
       {"embedding", "int64", ".to(hg::int64)"}},
      {"1-d weight", [&] { embedding(hgtest::make({1}, {1}, int64), ones({10})); }, {"embedding", "2-d"}},
      {"padding_idx out of range", [&] { embedding(hgtest::make({1}, {1}, int64), w, 10); },
       {"embedding", "padding_idx 10", "num_embeddings"}},
      {"padding_idx below -n", [&] { embedding(hgtest::make({1}, {1}, int64), w, -11); }, {"padding_idx -11"}},
  });
}

// ---- scaled_dot_product_attention ------------------------------------------------------------

TEST_CASE("scaled_dot_product_attention matches a float64 reference in every float dtype", "[ops][sdpa]") {
  const int64_t N = 2, H = 3, L = 5, S = 7, E = 8, Ev = 6, B = N * H;
  const Tensor bool_mask = hgtest::random_bool({L, S});
  std::vector<double> float_mask_v(static_cast<size_t>(N * L * S));
  for (size_t i = 0; i < float_mask_v.size(); ++i) float_mask_v[i] = static_cast<double>(i % 5) * -0.75;
  float_mask_v[3] = -kInf;
  // a bool mask whose row 2 is all false: that row gives zeros
  std::vector<double> dead_v(static_cast<size_t>(L * S), 1.0);
  for (int64_t j = 0; j < S; ++j) dead_v[2 * S + j] = 0.0;
  const Tensor dead_mask = hgtest::make(dead_v, {L, S}, DType::Bool);
  const std::vector<double> bm = values(bool_mask);
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor q = hgtest::uniform({N, H, L, E}, dt), k = hgtest::uniform({N, H, S, E}, dt),
                 v = hgtest::uniform({N, H, S, Ev}, dt);
    const auto qv = values(q), kv = values(k), vv = values(v);
    const double sc = 1.0 / std::sqrt(static_cast<double>(E));
    struct Case {
      std::string name;
      std::function<Tensor()> run;
      double scale;
      std::function<double(int64_t, int64_t, int64_t)> mask;
    };
    const std::vector<Case> cases = {
        {"plain", [&] { return scaled_dot_product_attention(q, k, v); }, sc, nullptr},
        {"scale 0.3", [&] { return scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.3); }, 0.3, nullptr},
        {"causal", [&] { return scaled_dot_product_attention(q, k, v, {}, 0.0, true); }, sc,
         [](int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; }},
        {"bool mask [L, S]", [&] { return scaled_dot_product_attention(q, k, v, bool_mask); }, sc,
         [&](int64_t, int64_t i, int64_t j) { return bm[i * S + j] != 0 ? 0.0 : -kInf; }},
        {"float mask [N, 1, L, S]",
         [&] { return scaled_dot_product_attention(q, k, v, hgtest::make(float_mask_v, {N, 1, L, S}, dt)); }, sc,
         [&](int64_t b, int64_t i, int64_t j) { return float_mask_v[(b / H * L + i) * S + j]; }},
        {"fully masked row", [&] { return scaled_dot_product_attention(q, k, v, dead_mask); }, sc,
         [&](int64_t, int64_t i, int64_t j) { return dead_v[i * S + j] != 0 ? 0.0 : -kInf; }},
    };
    for (const auto& c : cases) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor y = c.run();
      CHECK(y.dtype() == dt);
      REQUIRE(y.shape() == Shape{N, H, L, Ev});
      HG_CHECK_CLOSE_TOL(y, sdpa_ref(qv, kv, vv, B, L, S, E, Ev, c.scale, c.mask), tol_chain(dt));
    }
  }
  // causal with L > S (top-left aligned: row i sees j <= i), and broadcast batch dims
  const Tensor q = hgtest::uniform({7, 4}, float64), k = hgtest::uniform({2, 3, 4}, float64),
               v = hgtest::uniform({2, 3, 5}, float64);
  const Tensor y = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  REQUIRE(y.shape() == Shape{2, 7, 5});
  const auto qv = values(q);
  std::vector<double> q2(qv);
  q2.insert(q2.end(), qv.begin(), qv.end());
  HG_CHECK_CLOSE(y, sdpa_ref(q2, values(k), values(v), 2, 7, 3, 4, 5, 0.5,
                             [](int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; }));
  CHECK(hgtest::same_bits(nn::functional::scaled_dot_product_attention(q, k, v, {}, 0.0, true), y));
}

TEST_CASE("scaled_dot_product_attention's backward matches finite differences in float64", "[ops][sdpa][autograd]") {
  const Tensor q = hgtest::leaf({2, 3, 4}), k = hgtest::leaf({2, 5, 4}), v = hgtest::leaf({2, 5, 3});
  const Tensor fmask = hgtest::leaf({3, 5}, -1, 1);
  const Tensor bmask = hgtest::random_bool({2, 3, 5});
  HG_GRADCHECK([](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); },
               {q, k, v});
  HG_GRADCHECK(
      [](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true); },
      {q, k, v});
  HG_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return scaled_dot_product_attention(in[0], in[1], in[2], in[3], 0.0, false, 0.7);
      },
      {q, k, v, fmask});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], bmask); },
               {q, k, v});
  // a fully masked row: zeros, and a zero (not NaN) gradient
  std::vector<double> dv(15, 1.0);
  for (int j = 0; j < 5; ++j) dv[5 + j] = 0.0;
  const Tensor dead = hgtest::make(dv, {3, 5}, DType::Bool);
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], dead); },
               {q, k, v});
  const auto out = [&](const std::vector<Tensor>& in) {
    const Tensor y = scaled_dot_product_attention(in[0], in[1], in[2]);
    return mul(y, y);
  };
  HG_GRADCHECK(out, {q, k, v});
}

TEST_CASE("scaled_dot_product_attention's dropout: the expected fraction dropped, the rest scaled by 1/(1-p)",
          "[ops][sdpa][dropout]") {
  // With value = the identity [S, S], the output is the attention weights.
  const int64_t B = 4, L = 64, S = 64;
  const Tensor q = hgtest::uniform({B, L, 16}, float32), k = hgtest::uniform({B, S, 16}, float32);
  const Tensor eye = hgtest::make([&] {
    std::vector<double> e(static_cast<size_t>(S * S), 0.0);
    for (int64_t i = 0; i < S; ++i) e[i * S + i] = 1.0;
    return e;
  }(), {S, S}, float32);
  const Tensor w0 = scaled_dot_product_attention(q, k, eye);
  // p = 0 is no dropout, bit for bit
  CHECK(hgtest::same_bits(scaled_dot_product_attention(q, k, eye, {}, 0.0), w0));
  const double p = 0.3;
  manual_seed(7);
  const Tensor w = scaled_dot_product_attention(q, k, eye, {}, p);
  const auto a = values(w), b = values(w0);
  int64_t dropped = 0;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0) {
      ++dropped;
    } else {
      worst = std::max(worst, std::abs(a[i] - b[i] / (1.0 - p)) / (b[i] / (1.0 - p)));
    }
  }
  const double frac = static_cast<double>(dropped) / static_cast<double>(a.size());
  INFO("dropped " << frac << ", worst relative error of the kept " << worst);
  CHECK(std::abs(frac - p) < 0.02);  // 16384 draws: the standard deviation is 0.0036
  CHECK(worst < 1e-5);
  // seeded: the same draws again
  manual_seed(7);
  CHECK(hgtest::same_bits(scaled_dot_product_attention(q, k, eye, {}, p), w));
}

TEST_CASE("scaled_dot_product_attention under CPU autocast gives bfloat16", "[ops][sdpa][amp]") {
  CHECK(amp::lookup_policy(DeviceType::CPU, "scaled_dot_product_attention") == amp::CastPolicy::LowerPrecision);
  CHECK(amp::lookup_policy(DeviceType::CUDA, "scaled_dot_product_attention") == amp::CastPolicy::LowerPrecision);
  CHECK_FALSE(amp::lookup_policy(DeviceType::CPU, "embedding").has_value());
  CHECK_FALSE(amp::lookup_policy(DeviceType::CUDA, "embedding").has_value());
  Tensor q = hgtest::uniform({2, 6, 8}, float32), k = hgtest::uniform({2, 6, 8}, float32),
         v = hgtest::uniform({2, 6, 8}, float32);
  q.requires_grad_(true);
  amp::autocast region(DeviceType::CPU);
  const Tensor y = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  CHECK(y.dtype() == bfloat16);
  // against the float64 reference on the bfloat16-rounded inputs
  const auto r = [](const Tensor& t) { return values(t.detach().to(bfloat16)); };
  HG_CHECK_CLOSE_TOL(y, sdpa_ref(r(q), r(k), r(v), 2, 6, 6, 8, 8, 1.0 / std::sqrt(8.0),
                                 [](int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; }),
                     tol_chain(bfloat16));
  y.to(float32).sum().backward();
  REQUIRE(q.grad().defined());
  CHECK(q.grad().dtype() == float32);
  // an embedding keeps its weight's dtype under autocast
  CHECK(embedding(hgtest::make({1, 2}, {2}, int64), hgtest::uniform({4, 3}, float32)).dtype() == float32);
}

TEST_CASE("scaled_dot_product_attention's errors name the op, the shapes and a remedy", "[ops][sdpa][errors]") {
  const Tensor q = hgtest::uniform({2, 3, 4}, float32), k = hgtest::uniform({2, 5, 4}, float32),
               v = hgtest::uniform({2, 5, 6}, float32);
  hgtest::expect_errors({
      {"is_causal with a mask",
       [&] { scaled_dot_product_attention(q, k, v, hgtest::random_bool({3, 5}), 0.0, true); },
       {"scaled_dot_product_attention", "is_causal", "attn_mask"}},
      {"E mismatch", [&] { scaled_dot_product_attention(q, hgtest::uniform({2, 5, 3}, float32), v); },
       {"scaled_dot_product_attention", "E = 4", "[2, 5, 3]"}},
      {"S mismatch", [&] { scaled_dot_product_attention(q, k, hgtest::uniform({2, 4, 6}, float32)); },
       {"scaled_dot_product_attention", "sequence length", "5 vs 4"}},
      {"dtype mismatch", [&] { scaled_dot_product_attention(q, k, v.to(float64)); },
       {"scaled_dot_product_attention", "float64", "autocast"}},
      {"1-d query", [&] { scaled_dot_product_attention(ones({4}), k, v); },
       {"scaled_dot_product_attention", "at least 2 dims"}},
      {"batch dims", [&] { scaled_dot_product_attention(hgtest::uniform({3, 3, 4}, float32), k, v); },
       {"scaled_dot_product_attention", "batch dims"}},
      {"mask shape", [&] { scaled_dot_product_attention(q, k, v, hgtest::random_bool({3, 4})); },
       {"scaled_dot_product_attention", "attn_mask", "[3, 4]"}},
      {"integer mask", [&] { scaled_dot_product_attention(q, k, v, ones({3, 5}, int64)); },
       {"scaled_dot_product_attention", "attn_mask", "bool"}},
      {"dropout_p", [&] { scaled_dot_product_attention(q, k, v, {}, 1.5); }, {"dropout_p", "1.5"}},
  });
}

// ---- CUDA against the CPU ----------------------------------------------------------------------

TEST_CASE("CUDA layer_norm matches the CPU, and takes float32 under CUDA autocast", "[cuda][ops][layer_norm]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor x = hgtest::uniform({5, 7, 32}, dt), w = hgtest::uniform({32}, dt, 0.5, 1.5),
                 b = hgtest::uniform({32}, dt);
    expect_same(layer_norm(dev(x), {32}, dev(w), dev(b)), layer_norm(x, {32}, w, b), "layer_norm " + hgtest::dname(dt));
    expect_same(layer_norm(dev(x), {7, 32}), layer_norm(x, {7, 32}), "layer_norm 2 dims " + hgtest::dname(dt));
  }
  const Tensor x = hgtest::leaf({4, 6}), w = hgtest::leaf({6}), b = hgtest::leaf({6});
  const Tensor xg = hgtest::cuda::leaf_on(x, hgtest::cuda::kCuda), wg = hgtest::cuda::leaf_on(w, hgtest::cuda::kCuda),
               bg = hgtest::cuda::leaf_on(b, hgtest::cuda::kCuda);
  const Tensor g = hgtest::uniform({4, 6}, float64);
  layer_norm(x, {6}, w, b).backward(g);
  layer_norm(xg, {6}, wg, bg).backward(dev(g));
  expect_same(xg.grad(), x.grad(), "layer_norm dx");
  expect_same(wg.grad(), w.grad(), "layer_norm dw");
  expect_same(bg.grad(), b.grad(), "layer_norm db");
  // CUDA autocast: PyTorch's fp32 row, a float16 input gives float32
  const Tensor xh = dev(hgtest::uniform({3, 16}, float16));
  amp::autocast region(DeviceType::CUDA);
  const Tensor y = layer_norm(xh, {16}, dev(hgtest::uniform({16}, float32)), Tensor());
  CHECK(y.dtype() == float32);
}

// The fused kernels: warp rows (odd length), block rows (over 1024), enough
// rows for several chunks of the column sums, with and without weight and bias.
TEST_CASE("CUDA layer_norm's fused kernels match the CPU: half types, odd and long rows, many rows",
          "[cuda][ops][layer_norm]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  using hgtest::cuda::kCuda;
  using hgtest::cuda::leaf_on;
  const std::vector<Shape> shapes = {{3, 33}, {2, 1500}, {700, 20}};
  for (const Shape& shape : shapes)
    for (DType dt : hgtest::kFloatDTypes)
      for (int affine : {0, 1}) {
        const int64_t n = shape[1];
        const std::string what = shape_str(shape) + " " + hgtest::dname(dt) + (affine ? " affine" : " plain");
        const Tensor x = hgtest::uniform(shape, dt, -3, 5), g = hgtest::uniform(shape, dt);
        const Tensor w = affine ? hgtest::uniform({n}, dt, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? hgtest::uniform({n}, dt) : Tensor();
        const Tensor xc = leaf_on(x, hgtest::cuda::kCpu), xg = leaf_on(x, kCuda);
        const Tensor wc = affine ? leaf_on(w, hgtest::cuda::kCpu) : Tensor(), wg = affine ? leaf_on(w, kCuda) : Tensor();
        const Tensor bc = affine ? leaf_on(b, hgtest::cuda::kCpu) : Tensor(), bg = affine ? leaf_on(b, kCuda) : Tensor();
        const Tensor yc = layer_norm(xc, {n}, wc, bc), yg = layer_norm(xg, {n}, wg, bg);
        expect_same(yg, yc, "forward " + what);
        yc.backward(g);
        yg.backward(dev(g));
        expect_same(xg.grad(), xc.grad(), "dx " + what);
        if (affine) {
          expect_same(wg.grad(), wc.grad(), "dw " + what);
          expect_same(bg.grad(), bc.grad(), "db " + what);
        }
      }
  // the column sums are the same bits on every run (no atomics)
  const Tensor x = hgtest::uniform({700, 20}, float32), w = hgtest::uniform({20}, float32);
  std::vector<Tensor> dws;
  for (int run = 0; run < 2; ++run) {
    const Tensor xg = leaf_on(x, kCuda), wg = leaf_on(w, kCuda);
    layer_norm(xg, {20}, wg, Tensor()).backward(dev(ones({700, 20})));
    dws.push_back(wg.grad().cpu());
  }
  CHECK(hgtest::same_bits(dws[0], dws[1]));
}

TEST_CASE("CUDA embedding matches the CPU and refuses out-of-range indices", "[cuda][ops][embedding]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  const Tensor idx = hgtest::make({3, 0, 9, 3, 5, 1, 1, 3}, {2, 4}, int64);
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor w = hgtest::uniform({10, 5}, dt);
    expect_same(embedding(dev(idx), dev(w), 3), embedding(idx, w, 3), "embedding " + hgtest::dname(dt), true);
  }
  const Tensor w = hgtest::leaf({10, 5});
  const Tensor wg = hgtest::cuda::leaf_on(w, hgtest::cuda::kCuda);
  const Tensor g = hgtest::uniform({2, 4, 5}, float64);
  embedding(idx, w, 1).backward(g);
  embedding(dev(idx), wg, 1).backward(dev(g));
  expect_same(wg.grad(), w.grad(), "embedding dweight");
  hgtest::expect_errors({{"CUDA index out of range",
                          [&] { embedding(dev(hgtest::make({1, 12}, {2}, int64)), dev(w.detach())); },
                          {"embedding", "index 12", "num_embeddings 10"}}});
}

TEST_CASE("CUDA scaled_dot_product_attention matches the CPU, and gives float16 under CUDA autocast",
          "[cuda][ops][sdpa]") {
  using hgtest::cuda::dev;
  using hgtest::cuda::expect_same;
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor q = hgtest::uniform({2, 2, 5, 8}, dt), k = hgtest::uniform({2, 2, 7, 8}, dt),
                 v = hgtest::uniform({2, 2, 7, 4}, dt);
    const Tensor bm = hgtest::random_bool({5, 7}), fm = hgtest::uniform({2, 1, 5, 7}, dt);
    const std::string n = hgtest::dname(dt);
    const double t = tol_chain(dt);
    expect_same(scaled_dot_product_attention(dev(q), dev(k), dev(v)), scaled_dot_product_attention(q, k, v),
                "sdpa " + n, false, t);
    expect_same(scaled_dot_product_attention(dev(q), dev(k), dev(v), {}, 0.0, true),
                scaled_dot_product_attention(q, k, v, {}, 0.0, true), "sdpa causal " + n, false, t);
    expect_same(scaled_dot_product_attention(dev(q), dev(k), dev(v), dev(bm)),
                scaled_dot_product_attention(q, k, v, bm), "sdpa bool mask " + n, false, t);
    expect_same(scaled_dot_product_attention(dev(q), dev(k), dev(v), dev(fm), 0.0, false, 0.2),
                scaled_dot_product_attention(q, k, v, fm, 0.0, false, 0.2), "sdpa float mask " + n, false, t);
  }
  const Tensor q = hgtest::leaf({2, 4, 8}), k = hgtest::leaf({2, 6, 8}), v = hgtest::leaf({2, 6, 3});
  const Tensor qg = hgtest::cuda::leaf_on(q, hgtest::cuda::kCuda), kg = hgtest::cuda::leaf_on(k, hgtest::cuda::kCuda),
               vg = hgtest::cuda::leaf_on(v, hgtest::cuda::kCuda);
  const Tensor g = hgtest::uniform({2, 4, 3}, float64);
  scaled_dot_product_attention(q, k, v, {}, 0.0, true).backward(g);
  scaled_dot_product_attention(qg, kg, vg, {}, 0.0, true).backward(dev(g));
  expect_same(qg.grad(), q.grad(), "sdpa dq");
  expect_same(kg.grad(), k.grad(), "sdpa dk");
  expect_same(vg.grad(), v.grad(), "sdpa dv");
  // dropout on the device: the kept weights scaled by 1/(1-p)
  const Tensor qd = dev(hgtest::uniform({2, 32, 8}, float32)), kd = dev(hgtest::uniform({2, 32, 8}, float32));
  const Tensor eye = dev(hgtest::make([] {
    std::vector<double> e(32 * 32, 0.0);
    for (int i = 0; i < 32; ++i) e[i * 32 + i] = 1.0;
    return e;
  }(), {32, 32}, float32));
  const auto w0 = values(scaled_dot_product_attention(qd, kd, eye).cpu());
  const auto w = values(scaled_dot_product_attention(qd, kd, eye, {}, 0.5).cpu());
  int64_t dropped = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0.0) {
      ++dropped;
    } else {
      CHECK(std::abs(w[i] - 2.0 * w0[i]) <= 1e-5 * 2.0 * w0[i]);
    }
  }
  CHECK(std::abs(static_cast<double>(dropped) / static_cast<double>(w.size()) - 0.5) < 0.05);
  // CUDA autocast: float16
  amp::autocast region(DeviceType::CUDA);
  CHECK(scaled_dot_product_attention(dev(q.detach().to(float32)), dev(k.detach().to(float32)),
                                     dev(v.detach().to(float32)))
            .dtype() == float16);
}
