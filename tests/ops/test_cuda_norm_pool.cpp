// batch_norm and the 2-d pools on a CUDA device against the CPU backend on the
// same values: forward, backward (input, weight and bias gradients) and the
// running statistics, in every float dtype (half inputs with float32
// parameters), on contiguous and permuted inputs, with MobileNetV3-small's
// shapes; max pooling exact (values and gradients), NaN included; the CUDA
// kernels are deterministic (two runs, the same bits). Run only where a GPU
// is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;
using hgtest::cuda::dev;
using hgtest::cuda::expect_same;
using hgtest::cuda::kCpu;
using hgtest::cuda::kCuda;
using hgtest::cuda::leaf_on;

namespace {

std::string dn(DType dt) { return hgtest::dname(dt); }

DType stat_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// [N, C, H, W] values in dt, stored channels-last when `strided` (a permuted view).
Tensor input(const Shape& shape, DType dt, bool strided, double lo = -2.0, double hi = 3.0) {
  if (!strided || shape.size() != 4) return hgtest::uniform(shape, dt, lo, hi);
  return hgtest::uniform({shape[0], shape[2], shape[3], shape[1]}, dt, lo, hi).permute({0, 3, 1, 2});
}

}  // namespace

TEST_CASE("CUDA batch_norm matches the CPU: forward, backward and running statistics", "[cuda][ops][batch_norm]") {
  const std::vector<Shape> shapes = {{6, 3}, {4, 5, 7}, {3, 4, 5, 6}, {2, 40, 9, 9}, {1, 3, 300, 2}};
  for (DType dt : hgtest::kFloatDTypes)
    for (const Shape& shape : shapes)
      for (bool strided : {false, true})
        for (bool training : {true, false}) {
          const std::string what = dn(dt) + " " + hg::shape_str(shape) + (strided ? " channels-last" : "") +
                                   (training ? " training" : " eval");
          INFO(what);
          const int64_t c = shape[1];
          const DType st = stat_dtype(dt);
          const Tensor x = input(shape, dt, strided);
          const Tensor w = hgtest::uniform({c}, st, 0.5, 1.5), b = hgtest::uniform({c}, st);
          const Tensor rm = hgtest::uniform({c}, st), rv = hgtest::uniform({c}, st, 0.5, 2.0);
          const Tensor g = hgtest::uniform(shape, dt);
          Tensor rm_c = rm.clone(), rv_c = rv.clone(), rm_g = dev(rm), rv_g = dev(rv);
          const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
          const Tensor wc = leaf_on(w, kCpu), wg = leaf_on(w, kCuda), bc = leaf_on(b, kCpu), bg = leaf_on(b, kCuda);
          const Tensor yc = hg::batch_norm(xc, rm_c, rv_c, wc, bc, training, 0.2, 1e-4);
          const Tensor yg = hg::batch_norm(xg, rm_g, rv_g, wg, bg, training, 0.2, 1e-4);
          expect_same(yg, yc, what);
          expect_same(rm_g, rm_c, what + " running_mean");
          expect_same(rv_g, rv_c, what + " running_var");
          yc.backward(g);
          yg.backward(dev(g));
          expect_same(xg.grad(), xc.grad(), what + " dx");
          // per-channel sums with cancellation: the summation orders differ
          expect_same(wg.grad(), wc.grad(), what + " dweight", false, dt == DType::Float64 ? 1e-10 : 1e-4);
          expect_same(bg.grad(), bc.grad(), what + " dbias", false, dt == DType::Float64 ? 1e-10 : 1e-4);
        }
}

TEST_CASE("CUDA batch_norm with half inputs and float32 parameters (AMP), three steps", "[cuda][ops][batch_norm][amp]") {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    const Shape shape{8, 16, 14, 14};
    Tensor rm_c = hg::zeros({16}), rv_c = hg::ones({16});
    Tensor rm_g = dev(rm_c), rv_g = dev(rv_c);
    const Tensor w = hgtest::uniform({16}, DType::Float32, 0.5, 1.5), b = hgtest::uniform({16}, DType::Float32);
    for (int step = 0; step < 3; ++step) {
      const std::string what = dn(dt) + " step " + std::to_string(step);
      const Tensor x = input(shape, dt, step == 1, -1.0 + step, 2.0 + step);
      const Tensor yc = hg::batch_norm(x, rm_c, rv_c, w, b, true);
      const Tensor yg = hg::batch_norm(dev(x), rm_g, rv_g, dev(w), dev(b), true);
      CHECK(yg.dtype() == dt);
      CHECK(rm_g.dtype() == DType::Float32);
      expect_same(yg, yc, what);
      expect_same(rm_g, rm_c, what + " running_mean");
      expect_same(rv_g, rv_c, what + " running_var");
    }
    // under CUDA autocast the op keeps the input's dtype
    hg::amp::autocast region(hg::DeviceType::CUDA);
    CHECK(hg::batch_norm(dev(hgtest::uniform(shape, DType::Float32)), rm_g, rv_g, dev(w), dev(b), true).dtype() ==
          DType::Float32);
    CHECK(hg::batch_norm(dev(hgtest::uniform(shape, dt)), rm_g, rv_g, dev(w), dev(b), true).dtype() == dt);
  }
}

TEST_CASE("CUDA BatchNorm2d and pooling on MobileNetV3-small's shapes", "[cuda][ops][batch_norm][pool][large]") {
  // the stem's [64, 16, 112, 112], a middle block's [64, 96, 14, 14], the last [64, 576, 7, 7]
  for (const Shape& shape : {Shape{64, 16, 112, 112}, Shape{64, 96, 14, 14}, Shape{64, 576, 7, 7}}) {
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const std::string what = dn(dt) + " " + hg::shape_str(shape);
      INFO(what);
      const int64_t c = shape[1];
      const Tensor x = hgtest::uniform(shape, dt, -1.0, 2.0);
      const Tensor w = hgtest::uniform({c}, DType::Float32, 0.5, 1.5), b = hgtest::uniform({c}, DType::Float32);
      Tensor rm_c = hg::zeros({c}), rv_c = hg::ones({c}), rm_g = dev(rm_c), rv_g = dev(rv_c);
      const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
      const Tensor yc = hg::batch_norm(xc, rm_c, rv_c, w, b, true);
      const Tensor yg = hg::batch_norm(xg, rm_g, rv_g, dev(w), dev(b), true);
      expect_same(yg, yc, what);
      expect_same(rm_g, rm_c, what + " running_mean");
      expect_same(rv_g, rv_c, what + " running_var", false, 1e-4);
      const Tensor g = hgtest::uniform(shape, dt);
      yc.backward(g);
      yg.backward(dev(g));
      expect_same(xg.grad(), xc.grad(), what + " dx", false, dt == DType::Float32 ? 1e-4 : 0);
      // the squeeze-and-excitation pool, and a stride-2 3x3 max pool
      expect_same(hg::adaptive_avg_pool2d(dev(x), 1), hg::adaptive_avg_pool2d(x, 1), what + " adaptive 1x1");
      expect_same(hg::max_pool2d(dev(x), 3, 2, 1), hg::max_pool2d(x, 3, 2, 1), what + " max_pool2d", true);
      expect_same(hg::avg_pool2d(dev(x), 3, 2, 1, true, false), hg::avg_pool2d(x, 3, 2, 1, true, false),
                  what + " avg_pool2d");
    }
  }
}

TEST_CASE("CUDA pooling matches the CPU, forward and backward", "[cuda][ops][pool]") {
  struct Case {
    std::string name;
    Shape in;
    int64_t k[2], s[2], p[2], d[2];
    bool ceil, include_pad;
    std::optional<int64_t> divisor;
  };
  const std::vector<Case> cases = {
      {"k3 s2 p1", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true, {}},
      {"k3 s2 p1 ceil", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true, {}},
      {"3-d overlapping", {3, 5, 6}, {2, 3}, {1, 2}, {1, 0}, {1, 1}, false, true, {}},
      {"k2 s2 p1 ceil", {2, 2, 5, 5}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true, true, {}},
      {"k3 s1 p1 no pad count", {1, 4, 6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false, {}},
      {"divisor 5", {3, 5, 6}, {2, 3}, {1, 2}, {1, 0}, {1, 1}, false, true, 5},
      {"dilation", {1, 2, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true, true, {}},
      {"big planes", {4, 8, 57, 61}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true, {}},
  };
  for (const Case& c : cases)
    for (DType dt : hgtest::kFloatDTypes)
      for (bool is_max : {true, false}) {
        if (!is_max && c.d[0] != 1) continue;  // average pooling has no dilation
        if (is_max && (c.divisor || !c.include_pad)) continue;
        const std::string what = std::string(is_max ? "max_pool2d " : "avg_pool2d ") + c.name + " " + dn(dt);
        INFO(what);
        auto f = [&](const Tensor& t) {
          return is_max ? hg::max_pool2d(t, {c.k[0], c.k[1]}, hg::SizeArg{c.s[0], c.s[1]}, {c.p[0], c.p[1]},
                                         {c.d[0], c.d[1]}, c.ceil)
                        : hg::avg_pool2d(t, {c.k[0], c.k[1]}, hg::SizeArg{c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil,
                                         c.include_pad, c.divisor);
        };
        Shape stored = c.in;
        std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
        for (bool transposed : {false, true}) {
          const Tensor x = transposed ? hgtest::uniform(stored, dt, -3, 3).transpose(static_cast<int64_t>(stored.size()) - 2, static_cast<int64_t>(stored.size()) - 1)
                                      : hgtest::uniform(c.in, dt, -3, 3);
          const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
          const Tensor yc = f(xc), yg = f(xg);
          expect_same(yg, yc, what, is_max);
          const Tensor g = hgtest::uniform(yc.shape(), dt);
          yc.backward(g);
          yg.backward(dev(g));
          // the same gather in the same order on both backends
          expect_same(xg.grad(), xc.grad(), what + " backward", is_max);
        }
      }
  // a NaN wins on the device too
  Tensor x = hgtest::uniform({2, 3, 6, 6}, DType::Float32);
  static_cast<float*>(x.data_ptr())[7] = std::numeric_limits<float>::quiet_NaN();
  expect_same(hg::max_pool2d(dev(x), 3, 1, 1), hg::max_pool2d(x, 3, 1, 1), "max_pool2d with a NaN", true);
  expect_same(hg::avg_pool2d(dev(x), 3, 1, 1), hg::avg_pool2d(x, 3, 1, 1), "avg_pool2d with a NaN");
}

TEST_CASE("CUDA adaptive_avg_pool2d matches the CPU, forward and backward", "[cuda][ops][pool]") {
  struct Case {
    Shape in;
    int64_t oh, ow;
  };
  const std::vector<Case> cases = {{{2, 3, 7, 5}, 3, 2}, {{2, 3, 7, 5}, 1, 1}, {{2, 3, 7, 5}, 4, 6},
                                   {{3, 6, 6}, 4, 4},     {{8, 16, 56, 56}, 1, 1}, {{2, 4, 13, 17}, 5, 7}};
  for (const Case& c : cases)
    for (DType dt : hgtest::kFloatDTypes) {
      const std::string what = "adaptive_avg_pool2d " + hg::shape_str(c.in) + " " + dn(dt);
      const Tensor x = hgtest::uniform(c.in, dt, -3, 3);
      const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
      const Tensor yc = hg::adaptive_avg_pool2d(xc, {c.oh, c.ow}), yg = hg::adaptive_avg_pool2d(xg, {c.oh, c.ow});
      expect_same(yg, yc, what);
      const Tensor g = hgtest::uniform(yc.shape(), dt);
      yc.backward(g);
      yg.backward(dev(g));
      expect_same(xg.grad(), xc.grad(), what + " backward");
    }
}

TEST_CASE("CUDA batch norm and pooling are deterministic", "[cuda][ops][batch_norm][pool]") {
  const Tensor x = dev(hgtest::uniform({16, 32, 28, 28}, DType::Float32));
  const Tensor g = dev(hgtest::uniform({16, 32, 28, 28}, DType::Float32));
  auto run = [&] {
    const Tensor xl = leaf_on(x, kCuda);
    const Tensor w = dev(hg::ones({32})).requires_grad_(true);
    const Tensor y = hg::batch_norm(xl, Tensor(), Tensor(), w, Tensor(), true);
    y.backward(g);
    return std::vector<Tensor>{y, xl.grad(), w.grad(), hg::adaptive_avg_pool2d(x, 1), hg::avg_pool2d(x, 3, 2, 1)};
  };
  const auto a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) CHECK(hgtest::same_bits(a[i], b[i]));
}
