// max_pool2d, avg_pool2d, adaptive_avg_pool2d: forward against float64
// references written here (output sizes by brute force over the windows, and
// PyTorch 1.13's sizes and values for a few cases), in every float dtype, on
// contiguous and transposed inputs, 3-d and 4-d, empty batches; NaN
// propagation and ties; gradients by finite differences in float64 (ceil
// mode, padding, dilation, count_include_pad=false, divisor_override,
// overlapping windows); output dtypes under CPU autocast; errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct PoolCase {
  std::string name;
  Shape in;
  int64_t k[2], s[2], p[2], d[2];
  bool ceil = false;
  bool include_pad = true;
  std::optional<int64_t> divisor;
};

// Windows along one dim, counted one by one: window o starts at o * s - p. Floor mode
// keeps windows whose last tap is inside the padded input; ceil mode also keeps a last,
// partial one as long as the window before it did not already reach the end of the padded
// input and it starts inside the input or the left padding (not in the right padding).
int64_t count_windows(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t last = in + p - 1;  // the last padded position
  int64_t n = 0;
  for (int64_t o = 0;; ++o) {
    const int64_t start = o * s - p, end = start + d * (k - 1);
    const bool full = end <= last;
    const bool partial = ceil && start < in && (o == 0 || (o - 1) * s - p + d * (k - 1) < last);
    if (!(full || partial)) break;
    ++n;
  }
  return n;
}

Shape out_shape(const PoolCase& c) {
  Shape s = c.in;
  const size_t h = s.size() - 2, w = s.size() - 1;
  s[h] = count_windows(c.in[h], c.k[0], c.s[0], c.p[0], c.d[0], c.ceil);
  s[w] = count_windows(c.in[w], c.k[1], c.s[1], c.p[1], c.d[1], c.ceil);
  return s;
}

// The float64 reference: max (a NaN wins) or average (PyTorch's divisor rules) per window.
std::vector<double> pool_ref(bool is_max, const std::vector<double>& x, const PoolCase& c) {
  const Shape os = out_shape(c);
  const size_t nd = c.in.size();
  const int64_t H = c.in[nd - 2], W = c.in[nd - 1], OH = os[nd - 2], OW = os[nd - 1];
  const int64_t planes = static_cast<int64_t>(x.size()) / (H * W);
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = i * c.s[0] - c.p[0], w0 = j * c.s[1] - c.p[1];
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t a = 0; a < c.k[0]; ++a)
          for (int64_t b = 0; b < c.k[1]; ++b) {
            const int64_t ih = h0 + a * c.d[0], iw = w0 + b * c.d[1];
            // avg: the taps inside the padded input count with count_include_pad
            if (ih < H + c.p[0] && iw < W + c.p[1]) ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = x[static_cast<size_t>((pl * H + ih) * W + iw)];
            ++inside;
            sum += v;
            if (std::isnan(v) || v > best) best = std::isnan(best) ? best : v;
          }
        if (is_max) {
          out.push_back(best);
        } else {
          const int64_t div = c.divisor ? *c.divisor : c.include_pad ? padded : inside;
          out.push_back(inside == 0 ? 0.0 : sum / static_cast<double>(div));
        }
      }
  return out;
}

std::vector<PoolCase> cases() {
  return {
      {"k3 s2 p1", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
      {"k3 s2 p1 ceil", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {"3-d, k(2,3) s(1,2) p(1,0): overlapping", {3, 5, 6}, {2, 3}, {1, 2}, {1, 0}, {1, 1}},
      {"k2 s2 p1 ceil: the last window would start in the right padding", {2, 2, 5, 5}, {2, 2}, {2, 2}, {1, 1},
       {1, 1}, true},
      {"k3 s1 p1 (same size), count_include_pad=false", {1, 4, 6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false},
      {"k3 s2 p1 ceil, count_include_pad=false", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
      {"k(2,3) s(1,2) p(1,0), divisor_override 5", {3, 5, 6}, {2, 3}, {1, 2}, {1, 0}, {1, 1}, false, true, 5},
      {"global: k = input", {2, 3, 4, 5}, {4, 5}, {4, 5}, {0, 0}, {1, 1}},
  };
}

Tensor run(bool is_max, const Tensor& x, const PoolCase& c) {
  if (is_max)
    return hg::max_pool2d(x, {c.k[0], c.k[1]}, hg::SizeArg{c.s[0], c.s[1]}, {c.p[0], c.p[1]}, {c.d[0], c.d[1]},
                          c.ceil);
  return hg::avg_pool2d(x, {c.k[0], c.k[1]}, hg::SizeArg{c.s[0], c.s[1]}, {c.p[0], c.p[1]}, c.ceil,
                        c.include_pad, c.divisor);
}

// x with its last two dims stored transposed (not contiguous), values in dtype dt.
Tensor transposed(const Shape& shape, DType dt) {
  Shape stored = shape;
  std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  Tensor t = hgtest::uniform(stored, dt, -3.0, 3.0).transpose(static_cast<int64_t>(shape.size()) - 2,
                                                              static_cast<int64_t>(shape.size()) - 1);
  REQUIRE(!t.is_contiguous());
  return t;
}

std::vector<double> adaptive_ref(const std::vector<double>& x, const Shape& in, int64_t oh, int64_t ow) {
  const size_t nd = in.size();
  const int64_t H = in[nd - 2], W = in[nd - 1];
  const int64_t planes = static_cast<int64_t>(x.size()) / (H * W);
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const auto h0 = static_cast<int64_t>(std::floor(static_cast<double>(i * H) / static_cast<double>(oh)));
        const auto h1 = static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * H) / static_cast<double>(oh)));
        const auto w0 = static_cast<int64_t>(std::floor(static_cast<double>(j * W) / static_cast<double>(ow)));
        const auto w1 = static_cast<int64_t>(std::ceil(static_cast<double>((j + 1) * W) / static_cast<double>(ow)));
        double sum = 0;
        for (int64_t a = h0; a < h1; ++a)
          for (int64_t b = w0; b < w1; ++b) sum += x[static_cast<size_t>((pl * H + a) * W + b)];
        out.push_back(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  return out;
}

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match float64 references in every dtype", "[ops][pool]") {
  for (bool is_max : {true, false}) {
    for (const PoolCase& c : cases()) {
      if (is_max && (c.divisor || !c.include_pad)) continue;  // avg-only options
      for (DType dt : hgtest::kFloatDTypes) {
        for (bool strided : {false, true}) {
          INFO((is_max ? "max_pool2d " : "avg_pool2d ") << c.name << " " << hgtest::dname(dt)
                                                        << (strided ? " transposed" : ""));
          const Tensor x = strided ? transposed(c.in, dt) : hgtest::uniform(c.in, dt, -3.0, 3.0);
          const Tensor y = run(is_max, x, c);
          CHECK(y.dtype() == dt);
          REQUIRE(y.shape() == out_shape(c));
          const auto ref = pool_ref(is_max, values(x), c);
          if (is_max) HG_CHECK_EXACT(y, ref);  // max picks an input element: exact
          else HG_CHECK_CLOSE(y, ref);
        }
      }
    }
  }
}

TEST_CASE("max_pool2d with dilation", "[ops][pool]") {
  const PoolCase c{"k(3,2) s(2,3) p(1,1) d(2,1) ceil", {1, 2, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true};
  for (DType dt : hgtest::kFloatDTypes) {
    const Tensor x = hgtest::uniform(c.in, dt, -3.0, 3.0);
    const Tensor y = run(true, x, c);
    CHECK(y.shape() == Shape{1, 2, 4, 3});  // PyTorch 1.13's
    HG_CHECK_EXACT(y, pool_ref(true, values(x), c));
  }
}

TEST_CASE("pooling output sizes are PyTorch's", "[ops][pool]") {
  // torch.nn.functional.max_pool2d(...).shape in PyTorch 1.13
  const Tensor a = hgtest::uniform({2, 3, 7, 6}, DType::Float32);
  CHECK(hg::max_pool2d(a, 3, 2, 1, 1, true).shape() == Shape{2, 3, 4, 4});
  CHECK(hg::max_pool2d(a, 3, 2, 1).shape() == Shape{2, 3, 4, 3});
  const Tensor b = hgtest::uniform({2, 2, 5, 5}, DType::Float32);
  CHECK(hg::max_pool2d(b, 2, 2, 1, 1, true).shape() == Shape{2, 2, 3, 3});
  CHECK(hg::avg_pool2d(b, 2, 2, 1, true).shape() == Shape{2, 2, 3, 3});
  CHECK(hg::max_pool2d(hgtest::uniform({3, 5, 6}, DType::Float32), {2, 3}, hg::SizeArg{1, 2}, {1, 0}).shape() ==
        Shape{3, 6, 2});
  // stride defaults to the kernel size
  CHECK(hg::max_pool2d(a, 2).shape() == Shape{2, 3, 3, 3});
  CHECK(hg::avg_pool2d(a, {3, 2}).shape() == Shape{2, 3, 2, 3});
}

TEST_CASE("avg_pool2d's values in ceil mode with padding are PyTorch's", "[ops][pool]") {
  // x = torch.arange(25.).reshape(1, 1, 5, 5)
  // F.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=True / False)
  const Tensor x = hg::arange(0.0, 25.0).reshape({1, 1, 5, 5});
  HG_CHECK_CLOSE(hg::avg_pool2d(x, 2, 2, 1, true, true),
                 (std::vector<double>{0, 0.75, 1.75, 3.75, 9, 11, 8.75, 19, 21}));
  HG_CHECK_CLOSE(hg::avg_pool2d(x, 2, 2, 1, true, false),
                 (std::vector<double>{0, 1.5, 3.5, 7.5, 9, 11, 17.5, 19, 21}));
}

TEST_CASE("max_pool2d propagates NaN and sends the gradient of ties to the first maximum", "[ops][pool]") {
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // one plane 4x4, 2x2 windows: a NaN in the first window, ties in the second
    const std::vector<double> v = {1, kNaN, 3, 3,  //
                                   2, 0.5,  3, 3,  //
                                   -1, -2,  5, 4,  //
                                   -3, -4,  2, kNaN};
    const Tensor x = hgtest::make(v, {1, 1, 4, 4}, dt);
    const Tensor y = hg::max_pool2d(x, 2);
    HG_CHECK_EXACT(y, (std::vector<double>{kNaN, 3, -1, kNaN}));
    const auto out = values(y);
    CHECK(std::isnan(out[0]));
    CHECK(std::isnan(out[3]));
    // ties: the gradient goes to the first 3 (row-major) only
    const Tensor xt = hgtest::make({3, 3, 3, 3, 1, 2, 5, 0, 1, 1, 1, 1, 7, 7, 7, 7}, {1, 4, 4}, dt).requires_grad_(true);
    hg::sum(hg::max_pool2d(xt, 2)).backward();
    HG_CHECK_EXACT(xt.grad(), (std::vector<double>{1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0}));
  }
}

TEST_CASE("adaptive_avg_pool2d matches a float64 reference in every dtype", "[ops][pool]") {
  struct Case {
    Shape in;
    int64_t oh, ow;
  };
  const std::vector<Case> all = {
      {{2, 3, 7, 5}, 3, 2}, {{2, 3, 7, 5}, 1, 1}, {{2, 3, 7, 5}, 7, 5},
      {{2, 3, 7, 5}, 4, 6},  // more outputs than inputs: windows overlap
      {{3, 6, 6}, 4, 4},     {{4, 16, 7, 7}, 1, 1},
      {{5, 8, 1, 1}, 1, 1},  {{8, 1, 1}, 1, 1},  // 1x1 maps: [N, C] in memory, one row per image
  };
  for (const auto& c : all) {
    for (DType dt : hgtest::kFloatDTypes) {
      for (bool strided : {false, true}) {
        if (strided && c.in[c.in.size() - 1] * c.in[c.in.size() - 2] == 1) continue;  // 1x1: no transposed layout
        INFO(hg::shape_str(c.in) << " -> " << c.oh << "x" << c.ow << " " << hgtest::dname(dt)
                                 << (strided ? " transposed" : ""));
        const Tensor x = strided ? transposed(c.in, dt) : hgtest::uniform(c.in, dt, -3.0, 3.0);
        const Tensor y = hg::adaptive_avg_pool2d(x, {c.oh, c.ow});
        Shape os = c.in;
        os[os.size() - 2] = c.oh;
        os[os.size() - 1] = c.ow;
        CHECK(y.dtype() == dt);
        REQUIRE(y.shape() == os);
        HG_CHECK_CLOSE(y, adaptive_ref(values(x), c.in, c.oh, c.ow));
      }
    }
  }
  // one number for both dims
  CHECK(hg::adaptive_avg_pool2d(hgtest::uniform({2, 3, 5, 5}, DType::Float32), 2).shape() == Shape{2, 3, 2, 2});
}

TEST_CASE("pooling of an empty batch is empty", "[ops][pool]") {
  const Tensor x = hg::zeros({0, 3, 6, 6}).requires_grad_(true);
  CHECK(hg::max_pool2d(x, 2).shape() == Shape{0, 3, 3, 3});
  CHECK(hg::avg_pool2d(x, 3, 1, 1).shape() == Shape{0, 3, 6, 6});
  const Tensor y = hg::adaptive_avg_pool2d(x, 1);
  CHECK(y.shape() == Shape{0, 3, 1, 1});
  hg::sum(y).backward();
  CHECK(x.grad().shape() == Shape{0, 3, 6, 6});
}

TEST_CASE("pooling gradients match finite differences", "[ops][pool][grad]") {
  for (const PoolCase& c : cases()) {
    INFO(c.name);
    // distinct values: no ties, so max is differentiable at the point
    for (const Tensor& x : {hgtest::leaf_distinct(c.in), hgtest::strided_leaf(c.in)}) {
      auto avg = [&](const std::vector<Tensor>& in) { return run(false, in[0], c); };
      HG_GRADCHECK(avg, {x});
      if (!c.divisor && c.include_pad) {
        auto mx = [&](const std::vector<Tensor>& in) { return run(true, in[0], c); };
        if (x.is_contiguous()) HG_GRADCHECK(mx, {x});  // leaf_distinct: no ties
      }
    }
  }
  const PoolCase dil{"dilation", {1, 2, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true};
  auto mx = [&](const std::vector<Tensor>& in) { return run(true, in[0], dil); };
  HG_GRADCHECK(mx, {hgtest::leaf_distinct(dil.in)});
  // max_pool2d with overlapping windows: an element that is the max of two windows gets both gradients
  auto overlap = [](const std::vector<Tensor>& in) { return hg::max_pool2d(in[0], 3, 1, 1); };
  HG_GRADCHECK(overlap, {hgtest::leaf_distinct({2, 2, 5, 4})});
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{3, 2}, {1, 1}, {4, 6}}) {
    auto ad = [oh = oh, ow = ow](const std::vector<Tensor>& in) { return hg::adaptive_avg_pool2d(in[0], {oh, ow}); };
    HG_GRADCHECK(ad, {hgtest::leaf({2, 3, 7, 5})});
    HG_GRADCHECK(ad, {hgtest::strided_leaf({3, 5, 7})});
  }
}

TEST_CASE("pooling under CPU autocast runs in its input's dtype", "[ops][pool][amp]") {
  hg::amp::autocast region(hg::DeviceType::CPU);
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    const Tensor x = hgtest::uniform({2, 3, 6, 6}, dt);
    CHECK(hg::max_pool2d(x, 2).dtype() == dt);
    CHECK(hg::avg_pool2d(x, 2).dtype() == dt);
    CHECK(hg::adaptive_avg_pool2d(x, 1).dtype() == dt);
  }
}

TEST_CASE("pooling rejects bad arguments with messages naming them", "[ops][pool][errors]") {
  const Tensor x = hgtest::uniform({2, 3, 6, 6}, DType::Float32);
  hgtest::expect_errors({
      {"2-d input", [] { hg::max_pool2d(hg::ones({6, 6}), 2); }, {"max_pool2d", "Expected 3D or 4D", "[6, 6]"}},
      {"5-d input", [] { hg::avg_pool2d(hg::ones({1, 2, 3, 6, 6}), 2); }, {"avg_pool2d", "Expected 3D or 4D"}},
      {"zero width", [] { hg::max_pool2d(hg::ones({2, 3, 6, 0}), 2); }, {"max_pool2d", "non-zero"}},
      {"0-d input", [] { hg::adaptive_avg_pool2d(hg::ones({}), 1); }, {"adaptive_avg_pool2d", "Expected 3D or 4D"}},
      {"integer input", [] { hg::max_pool2d(hg::ones({1, 4, 4}, DType::Int64), 2); }, {"max_pool2d", "floating"}},
      {"kernel 0", [&] { hg::max_pool2d(x, 0); }, {"max_pool2d", "kernel size should be greater than zero"}},
      {"stride 0", [&] { hg::avg_pool2d(x, 2, 0); }, {"avg_pool2d", "stride should be greater than zero"}},
      {"dilation 0", [&] { hg::max_pool2d(x, 2, 1, 0, 0); }, {"dilation should be greater than zero"}},
      {"three kernel sizes", [&] { hg::max_pool2d(x, {2, 2, 2}); }, {"max_pool2d", "kernel_size", "(2, 2, 2)"}},
      {"padding above half the kernel", [&] { hg::max_pool2d(x, 3, 1, 2); },
       {"max_pool2d", "pad should be smaller than or equal to half of kernel size"}},
      {"negative padding", [&] { hg::avg_pool2d(x, 3, 1, -1); }, {"avg_pool2d", "pad must be non-negative"}},
      {"output too small", [] { hg::max_pool2d(hg::ones({1, 2, 2}), 3); },
       {"max_pool2d", "Output size is too small", "[1, 2, 2]"}},
      {"output too small with dilation", [&] { hg::max_pool2d(x, 3, 1, 0, 3); }, {"Output size is too small"}},
      {"divisor 0", [&] { hg::avg_pool2d(x, 2, std::nullopt, 0, false, true, 0); },
       {"avg_pool2d", "divisor must be not zero"}},
      {"negative adaptive output", [&] { hg::adaptive_avg_pool2d(x, {-1, 2}); },
       {"adaptive_avg_pool2d", "greater than or equal to 0"}},
      {"three adaptive sizes", [&] { hg::adaptive_avg_pool2d(x, {1, 2, 3}); }, {"adaptive_avg_pool2d", "output_size"}},
      {"undefined input", [] { hg::avg_pool2d(Tensor(), 2); }, {"avg_pool2d", "input"}},
  });
}
