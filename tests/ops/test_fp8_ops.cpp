// fp8 ops (ops/fp8_ops.h): scaled_mm against a float64 reference computed
// from the same fp8 values, fp8_quantize against the conversion of x * scale,
// fp8_update_scales against delayed scaling's formulas, the Errors, and on a
// GPU the CUDA kernels against the CPU emulation.
#include <catch2/catch.hpp>

#include <cmath>

#include <halfgrad.h>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

namespace {

// Values whose fp8 copies are far from all equal: log-spread magnitudes, both signs.
Tensor spread(const hg::Shape& shape, double scale = 1.0) {
  return hgtest::uniform(shape, hg::kFloat, 0.5, 2.0) * hg::sign(hgtest::uniform(shape, hg::kFloat, -1, 1)) *
         hg::exp(hgtest::uniform(shape, hg::kFloat, -3, 3)) * scale;
}

std::vector<double> as_doubles(const Tensor& t) { return t.to(hg::kDouble).contiguous().to_vector<double>(); }

// (a * sa) @ (b * sb) + bias in float64 from the fp8 values themselves.
std::vector<double> reference_mm(const Tensor& a, const Tensor& b, double sa, double sb, const Tensor& bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  auto out = hgtest::matmul2d(as_doubles(a), as_doubles(b), m, k, n);
  const auto bv = bias.defined() ? as_doubles(bias) : std::vector<double>(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = out[i * n + j] * sa * sb + bv[j];
  return out;
}

Tensor scalar(float v, hg::Device d = hg::Device::cpu()) { return hg::full({1}, v, hg::TensorOptions(hg::kFloat).device(d)); }

}  // namespace

TEST_CASE("scaled_mm: (a * sa) @ (b * sb) + bias matches float64 on the same fp8 values", "[fp8][scaled_mm]") {
  for (auto [ta, tb] : {std::pair{hg::float8_e4m3fn, hg::float8_e4m3fn}, std::pair{hg::float8_e5m2, hg::float8_e4m3fn},
                        std::pair{hg::float8_e4m3fn, hg::float8_e5m2}}) {
    for (hg::DType out_dtype : {hg::kFloat, hg::kBFloat16, hg::kHalf}) {
      const int64_t m = 33, k = 96, n = 40;
      const Tensor a = spread({m, k}).to(ta);
      const Tensor w = spread({n, k}).to(tb);  // a weight [n, k]: b = w^T, column-major as in a Linear
      const Tensor bias = spread({n});
      const float sa = 0.25f, sb = 3.0f;
      Tensor amax = scalar(-1);
      const Tensor y =
          hg::scaled_mm(a, w.t(), scalar(sa), scalar(sb), {.bias = bias, .out_dtype = out_dtype, .amax_out = amax});
      REQUIRE(y.dtype() == out_dtype);
      CHECK(amax.item<float>() == hg::amax(hg::abs(y.to(hg::kFloat))).item<float>());  // of the output as stored
      REQUIRE(y.shape() == hg::Shape{m, n});
      const double tol = out_dtype == hg::kFloat ? 1e-6 : hgtest::tol(out_dtype);
      // The bias is rounded to the output dtype first (as cuBLASLt reads it).
      const auto ref = reference_mm(a, w.t(), sa, sb, bias.to(out_dtype));
      const auto c = hgtest::compare(y, ref, tol);
      INFO(hg::dtype_name(ta) << " x " << hg::dtype_name(tb) << " -> " << hg::dtype_name(out_dtype));
      { INFO(c.msg); CHECK(c.ok); }
    }
  }
  // Any layout on the CPU: a row-major b and a transposed a give the same numbers.
  const Tensor a = spread({8, 16}).to(hg::float8_e4m3fn), b = spread({16, 5}).to(hg::float8_e4m3fn);
  const Tensor y1 = hg::scaled_mm(a, b, scalar(1), scalar(1));
  const Tensor y2 = hg::scaled_mm(a.t().contiguous().t(), b.t().contiguous().t(), scalar(1), scalar(1));
  CHECK(hg::equal(y1, y2));
  CHECK(hgtest::compare(y1, reference_mm(a, b, 1, 1, Tensor()), 1e-6).ok);
}

TEST_CASE("scaled_mm: Errors name the operands and the remedy", "[fp8][scaled_mm]") {
  const Tensor a = hg::ones({4, 8}).to(hg::float8_e4m3fn), b = hg::ones({8, 3}).to(hg::float8_e4m3fn);
  CHECK_THROWS_WITH(hg::scaled_mm(hg::ones({4, 8}), b, scalar(1), scalar(1)),
                    Catch::Contains("must be fp8") && Catch::Contains("fp8_quantize"));
  CHECK_THROWS_WITH(hg::scaled_mm(a, a, scalar(1), scalar(1)), Catch::Contains("expected a [m, k] and b [k, n]"));
  CHECK_THROWS_WITH(hg::scaled_mm(a, b, hg::ones({2}), scalar(1)), Catch::Contains("scale_a must be a one-element"));
  CHECK_THROWS_WITH(hg::scaled_mm(a, b, scalar(1), scalar(1), {.out_dtype = hg::kDouble}),
                    Catch::Contains("out_dtype must be float32, bfloat16 or float16"));
  CHECK_THROWS_WITH(hg::scaled_mm(a, b, scalar(1), scalar(1), {.bias = hg::ones({4})}), Catch::Contains("bias must be [3]"));
}

TEST_CASE("fp8_quantize: x * scale rounded and saturated, amax and saturations recorded", "[fp8]") {
  for (hg::DType fp8 : {hg::float8_e4m3fn, hg::float8_e5m2}) {
    for (hg::DType in_dtype : {hg::kFloat, hg::kBFloat16, hg::kHalf}) {
      const Tensor x = spread({7, 33}, 4.0).to(in_dtype);
      const float s = fp8 == hg::float8_e4m3fn ? 37.5f : 7500.0f;  // pushes the largest values past the max
      Tensor amax = hg::full({1}, 0.5, hg::kFloat), sat = hg::zeros({1}, hg::kLong);
      const Tensor q = hg::fp8_quantize(x.t(), scalar(s), fp8, amax, sat);  // a non-contiguous input too
      REQUIRE(q.dtype() == fp8);
      REQUIRE(q.shape() == hg::Shape{33, 7});
      const auto xv = as_doubles(x.t());
      const auto qv = as_doubles(q);
      const double fmax = fp8 == hg::float8_e4m3fn ? 448.0 : 57344.0;
      double want_amax = 0.5;
      int64_t want_sat = 0;
      bool ok = true;
      for (size_t i = 0; i < xv.size(); ++i) {
        const float v = static_cast<float>(xv[i]) * s;
        const double want = fp8 == hg::float8_e4m3fn ? hg::round_to_e4m3fn(v) : hg::round_to_e5m2(v, hg::Fp8Overflow::Saturate);
        ok = ok && qv[i] == want;
        want_amax = std::max(want_amax, std::fabs(xv[i]));
        want_sat += std::fabs(v) > fmax;
      }
      INFO(hg::dtype_name(fp8) << " from " << hg::dtype_name(in_dtype));
      CHECK(ok);
      CHECK(amax.item<float>() == static_cast<float>(want_amax));
      CHECK(sat.item<int64_t>() == want_sat);
      CHECK(want_sat > 0);
    }
  }
  // amax keeps the larger of its old value and this tensor's; a NaN wins.
  Tensor amax = hg::full({1}, 100.0, hg::kFloat);
  hg::fp8_quantize(hg::ones({4}), scalar(1), hg::float8_e4m3fn, amax);
  CHECK(amax.item<float>() == 100.0f);
  hg::fp8_quantize(hg::tensor({1.0f, NAN, 2.0f}, {3}), scalar(1), hg::float8_e4m3fn, amax);
  CHECK(std::isnan(amax.item<float>()));
  CHECK_THROWS_WITH(hg::fp8_quantize(hg::ones({2}), scalar(1), hg::kHalf, amax), Catch::Contains("float8_e4m3fn or float8_e5m2"));
}

TEST_CASE("fp8_update_scales: delayed scaling's formulas, then the history moves down", "[fp8]") {
  // history [4, 3], newest row first; columns 0 and 1 updated, column 2 left alone.
  Tensor history = hg::tensor({2.0f, 8.0f, 1.0f,  //
                               4.0f, 0.0f, 1.0f,  //
                               1.0f, 0.0f, 1.0f,  //
                               0.5f, 0.0f, 1.0f},
                              {4, 3});
  Tensor scale = hg::ones({3}), scale_inv = hg::ones({3});
  hg::fp8_update_scales(history, scale, scale_inv, 0, {448.0f, 57344.0f}, 1.0f, false);
  CHECK(scale[0].item<float>() == 448.0f / 4.0f / 2.0f);  // max over the column, margin 1: / 2
  CHECK(scale[1].item<float>() == 57344.0f / 8.0f / 2.0f);
  CHECK(scale[2].item<float>() == 1.0f);
  CHECK(scale_inv[0].item<float>() == 1.0f / scale[0].item<float>());
  CHECK(hg::equal(history, hg::tensor({0.0f, 0.0f, 1.0f, 2.0f, 8.0f, 1.0f, 4.0f, 0.0f, 1.0f, 1.0f, 0.0f, 1.0f}, {4, 3})));
  // most_recent reads row 0 only; an amax of 0 (nothing seen) or a non-finite one keeps the scale.
  history.select(0, 0).copy_(hg::tensor({3.5f, 0.0f, 1.0f}, {3}));
  hg::fp8_update_scales(history, scale, scale_inv, 0, {448.0f, 448.0f}, 0.0f, true);
  CHECK(scale[0].item<float>() == 128.0f);
  CHECK(scale[1].item<float>() == 57344.0f / 8.0f / 2.0f);
  history.select(0, 0).copy_(hg::tensor({INFINITY, NAN, 1.0f}, {3}));
  hg::fp8_update_scales(history, scale, scale_inv, 0, {448.0f, 448.0f}, 0.0f, true);
  CHECK(scale[0].item<float>() == 128.0f);
  CHECK(scale[1].item<float>() == 57344.0f / 8.0f / 2.0f);
  // A single column (the gradient's).
  history.select(0, 0).copy_(hg::tensor({0.0f, 0.0f, 7.0f}, {3}));
  hg::fp8_update_scales(history, scale, scale_inv, 2, {57344.0f}, 0.0f, true);
  CHECK(scale[2].item<float>() == 57344.0f / 7.0f);
  CHECK_THROWS_WITH(hg::fp8_update_scales(history, scale, scale_inv, 2, {1.0f, 1.0f}, 0.0f, true),
                    Catch::Contains("columns [2, 4)"));
}

TEST_CASE("fp8 ops on CUDA match the CPU emulation [cuda]", "[fp8][cuda]") {
  using hgtest::cuda::dev;
  const hg::Device gpu = hg::Device::cuda();
  // Quantisation: the same bits, the same amax and saturation count.
  const Tensor x = spread({64, 96}, 8.0);
  Tensor amax_c = hg::zeros({1}), amax_g = dev(amax_c), sat_c = hg::zeros({1}, hg::kLong), sat_g = dev(sat_c);
  const Tensor qc = hg::fp8_quantize(x, scalar(20), hg::float8_e4m3fn, amax_c, sat_c);
  const Tensor qg = hg::fp8_quantize(dev(x), scalar(20, gpu), hg::float8_e4m3fn, amax_g, sat_g);
  CHECK(hgtest::same_bits(qg.cpu().to(hg::kFloat), qc.to(hg::kFloat)));
  CHECK(amax_g.item<float>() == amax_c.item<float>());
  CHECK(sat_g.item<int64_t>() == sat_c.item<int64_t>());
  // The scale update.
  Tensor hc = hg::rand({16, 3}), sc = hg::ones({3}), ic = hg::ones({3});
  Tensor hgpu = dev(hc), sg = dev(sc), ig = dev(ic);
  hg::fp8_update_scales(hc, sc, ic, 0, {448.0f, 448.0f, 57344.0f}, 0.0f, false);
  hg::fp8_update_scales(hgpu, sg, ig, 0, {448.0f, 448.0f, 57344.0f}, 0.0f, false);
  CHECK(hg::equal(hgpu.cpu(), hc));
  CHECK(hg::equal(sg.cpu(), sc));
  CHECK(hg::equal(ig.cpu(), ic));
  // The GEMM (cuBLASLt's fp8 kernels, where the GPU has them: asked, not assumed).
  const Tensor a = spread({64, 128}).to(hg::float8_e4m3fn), w = spread({48, 128}).to(hg::float8_e4m3fn);
  const Tensor bias = spread({48}).to(hg::kBFloat16);
  for (hg::DType out_dtype : {hg::kFloat, hg::kBFloat16}) {
    Tensor amax_g = scalar(0, gpu);
    const Tensor yc = hg::scaled_mm(a, w.t(), scalar(0.5f), scalar(2.0f), {.bias = bias, .out_dtype = out_dtype});
    const Tensor yg = hg::scaled_mm(dev(a), dev(w).t(), scalar(0.5f, gpu), scalar(2.0f, gpu),
                                    {.bias = dev(bias), .out_dtype = out_dtype, .amax_out = amax_g});
    CHECK(amax_g.item<float>() == hg::amax(hg::abs(yg.to(hg::kFloat))).item<float>());  // epilogue or fallback
    hgtest::cuda::expect_same(yg, yc, std::string("scaled_mm -> ") + std::string(hg::dtype_name(out_dtype)), false,
                              out_dtype == hg::kFloat ? 1e-6 : 0);
  }
}
