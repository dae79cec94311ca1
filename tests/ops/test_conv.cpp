// Convolutions (ops/conv_ops.h) on the CPU: forward against a naive float64
// reference written here, in every float dtype, 1d/2d/3d with stride,
// padding (numbers, "same", "valid"), dilation, groups (depthwise, channel
// multiplier), no bias, non-contiguous and unbatched inputs, transposed
// convolutions with output_padding; backward by finite differences in
// float64 and, for float16/bfloat16, against the float64 reference gradient;
// autocast; errors; oneDNN against our direct loop.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/kernels/cpu/conv.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::PaddingArg;
using hg::Shape;
using hg::SizeArg;
using hg::Tensor;
using hgtest::values;

namespace {

// One convolution as the naive loops see it: every spatial dim padded to 3.
struct Geo {
  int nd = 2;
  int64_t groups = 1;
  std::vector<int64_t> s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0};
};

// Calls f(x_index, w_index, y_index) for every product of conv(x, w) -> y:
// x [N, Ci, *in], w [Co, Ci/G, *k], y [N, Co, *out], with
// in_pos = out_pos * s - pb + k * d inside the input.
template <typename F>
void visit(const Shape& xs, const Shape& ws, const Shape& ys, const Geo& g, F f) {
  auto sp = [&](const Shape& s) {
    std::vector<int64_t> v(3, 1);
    for (int i = 0; i < g.nd; ++i) v[3 - g.nd + i] = s[2 + i];
    return v;
  };
  auto pad3 = [&](const std::vector<int64_t>& a, int64_t fill) {
    std::vector<int64_t> v(3, fill);
    for (int i = 0; i < g.nd; ++i) v[3 - g.nd + i] = a[i];
    return v;
  };
  const auto in = sp(xs), k = sp(ws), out = sp(ys);
  const auto s = pad3(g.s, 1), d = pad3(g.d, 1), pb = pad3(g.pb, 0);
  const int64_t n_ = xs[0], ci = xs[1], co = ws[0], cig = ws[1], cog = co / g.groups;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t oc = 0; oc < co; ++oc)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2)
            for (int64_t icl = 0; icl < cig; ++icl)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0], i1 = o1 * s[1] - pb[1] + k1 * d[1],
                                  i2 = o2 * s[2] - pb[2] + k2 * d[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t ic = oc / cog * cig + icl;
                    const int64_t xi = (((n * ci + ic) * in[0] + i0) * in[1] + i1) * in[2] + i2;
                    const int64_t wi = (((oc * cig + icl) * k[0] + k0) * k[1] + k1) * k[2] + k2;
                    const int64_t yi = (((n * co + oc) * out[0] + o0) * out[1] + o1) * out[2] + o2;
                    f(xi, wi, yi);
                  }
}

// conv(x, w) + b in float64 (y's shape given).
std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Shape& ys, const Geo& g) {
  const auto xv = values(x.contiguous()), wv = values(w.contiguous());
  std::vector<double> y(static_cast<size_t>(hgtest::numel(ys)), 0.0);
  visit(x.shape(), w.shape(), ys, g, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += xv[xi] * wv[wi]; });
  if (b.defined()) {
    const auto bv = values(b);
    const int64_t plane = hgtest::numel(ys) / std::max<int64_t>(ys[0] * ys[1], 1);
    for (size_t i = 0; i < y.size(); ++i) y[i] += bv[(i / plane) % ys[1]];
  }
  return y;
}

// The transposed convolution, written as its definition: every x[n, ic, i]
// times w[ic, ocl, k] lands on y[n, oc, i * s - p + k * d]. It is the
// convolution from y's shape to x's run backwards, so visit() walks it with
// x in the role of that convolution's output.
std::vector<double> ref_conv_t(const Tensor& x, const Tensor& w, const Tensor& b, const Shape& ys, const Geo& g) {
  const auto xv = values(x.contiguous()), wv = values(w.contiguous());
  std::vector<double> y(static_cast<size_t>(hgtest::numel(ys)), 0.0);
  visit(ys, w.shape(), x.shape(), g, [&](int64_t yi, int64_t wi, int64_t xi) { y[yi] += xv[xi] * wv[wi]; });
  if (b.defined()) {
    const auto bv = values(b);
    const int64_t plane = hgtest::numel(ys) / std::max<int64_t>(ys[0] * ys[1], 1);
    for (size_t i = 0; i < y.size(); ++i) y[i] += bv[(i / plane) % ys[1]];
  }
  return y;
}

Tensor call_conv(int nd, const Tensor& x, const Tensor& w, const Tensor& b, SizeArg s, PaddingArg p, SizeArg d,
                 int64_t groups) {
  if (nd == 1) return hg::conv1d(x, w, b, s, p, d, groups);
  if (nd == 2) return hg::conv2d(x, w, b, s, p, d, groups);
  return hg::conv3d(x, w, b, s, p, d, groups);
}
Tensor call_conv_t(int nd, const Tensor& x, const Tensor& w, const Tensor& b, SizeArg s, SizeArg p, SizeArg op,
                   int64_t groups, SizeArg d) {
  if (nd == 1) return hg::conv_transpose1d(x, w, b, s, p, op, groups, d);
  if (nd == 2) return hg::conv_transpose2d(x, w, b, s, p, op, groups, d);
  return hg::conv_transpose3d(x, w, b, s, p, op, groups, d);
}

struct Case {
  std::string name;
  int nd;
  int64_t n, ci, co;
  std::vector<int64_t> in, k, s, d;
  std::vector<int64_t> p;  // numeric padding (ignored when mode is set)
  std::string mode;        // "", "same", "valid"
  int64_t groups;
  bool bias;
};

// The padding before each dim and the output shape, computed here from PyTorch's rules.
void geometry(const Case& c, Geo& g, Shape& ys) {
  g.nd = c.nd;
  g.groups = c.groups;
  g.s = c.s, g.d = c.d;
  g.pb.assign(static_cast<size_t>(c.nd), 0);
  ys = {c.n, c.co};
  for (int i = 0; i < c.nd; ++i) {
    int64_t total = 2 * (c.p.empty() ? 0 : c.p[i]);
    if (c.mode == "valid") total = 0;
    if (c.mode == "same") total = c.d[i] * (c.k[i] - 1);
    g.pb[i] = c.mode == "same" ? total / 2 : total / 2;
    ys.push_back((c.in[i] + total - c.d[i] * (c.k[i] - 1) - 1) / c.s[i] + 1);
  }
}

const std::vector<Case>& conv_cases() {
  static const std::vector<Case> cases = {
      {"1d stride 2 pad 1", 1, 2, 3, 4, {9}, {3}, {2}, {1}, {1}, "", 1, true},
      {"1d dilation 2 groups 2 no bias", 1, 2, 4, 6, {11}, {3}, {1}, {2}, {2}, "", 2, false},
      {"1d same even kernel", 1, 1, 2, 3, {8}, {4}, {1}, {1}, {}, "same", 1, true},
      {"2d mixed per-dim", 2, 2, 4, 6, {7, 8}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, "", 2, true},
      {"2d stem 3x3 stride 2", 2, 2, 3, 8, {12, 12}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, "", 1, false},
      {"2d depthwise 3x3 stride 2", 2, 2, 6, 6, {9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, "", 6, true},
      {"2d depthwise 5x5", 2, 1, 5, 5, {8, 7}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, "", 5, false},
      {"2d channel multiplier", 2, 1, 3, 6, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, "", 3, true},
      {"2d pointwise 1x1", 2, 2, 8, 5, {5, 4}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, "", 1, true},
      {"2d same odd kernel", 2, 1, 3, 4, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {}, "same", 1, true},
      {"2d same even kernel + dilation", 2, 1, 2, 3, {7, 6}, {4, 2}, {1, 1}, {1, 3}, {}, "same", 1, true},
      {"2d valid", 2, 2, 2, 3, {6, 7}, {3, 2}, {1, 2}, {1, 1}, {}, "valid", 1, true},
      {"3d", 3, 1, 2, 4, {4, 5, 6}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1}, "", 2, true},
      {"3d same", 3, 2, 2, 2, {3, 4, 4}, {3, 2, 3}, {1, 1, 1}, {1, 1, 1}, {}, "same", 1, false},
  };
  return cases;
}

PaddingArg padding_of(const Case& c) {
  if (!c.mode.empty()) return PaddingArg(c.mode);
  return PaddingArg(c.p);
}

Shape wshape(const Case& c) {
  Shape ws{c.co, c.ci / c.groups};
  ws.insert(ws.end(), c.k.begin(), c.k.end());
  return ws;
}
Shape xshape(const Case& c) {
  Shape xs{c.n, c.ci};
  xs.insert(xs.end(), c.in.begin(), c.in.end());
  return xs;
}

}  // namespace

TEST_CASE("conv1d/2d/3d forward matches a float64 reference in every float dtype", "[ops][conv]") {
  for (const Case& c : conv_cases()) {
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor x = hgtest::uniform(xshape(c), dt), w = hgtest::uniform(wshape(c), dt, -1, 1);
      const Tensor b = c.bias ? hgtest::uniform({c.co}, dt) : Tensor();
      Geo g;
      Shape ys;
      geometry(c, g, ys);
      const Tensor y = call_conv(c.nd, x, w, b, c.s, padding_of(c), c.d, c.groups);
      CHECK(y.shape() == ys);
      CHECK(y.dtype() == dt);
      HG_CHECK_CLOSE(y, ref_conv(x, w, b, ys, g));
    }
  }
}

TEST_CASE("conv: 'same' puts the odd padding element after, as PyTorch", "[ops][conv]") {
  // x = 1..5, w = [1, 10] (kernel 2, total padding 1): y[i] = x[i] + 10 x[i+1]
  // with the zero after the end (PyTorch: [21, 32, 43, 54, 5]).
  const Tensor x = hg::tensor({1.0, 2.0, 3.0, 4.0, 5.0}, {1, 1, 5});
  const Tensor w = hg::tensor({1.0, 10.0}, {1, 1, 2});
  HG_CHECK_EXACT(hg::conv1d(x, w, {}, 1, "same"), (std::vector<double>{21, 32, 43, 54, 5}));
  // kernel 4: total 3, one before and two after
  const Tensor w4 = hg::tensor({1.0, 10.0, 100.0, 1000.0}, {1, 1, 4});
  // y[i] = x[i-1] + 10 x[i] + 100 x[i+1] + 1000 x[i+2]
  HG_CHECK_EXACT(hg::conv1d(x, w4, {}, 1, "same"),
                 (std::vector<double>{0 + 10 + 200 + 3000, 1 + 20 + 300 + 4000, 2 + 30 + 400 + 5000,
                                      3 + 40 + 500 + 0, 4 + 50 + 0 + 0}));
}

TEST_CASE("conv: non-contiguous inputs and weights (permuted, narrowed views)", "[ops][conv]") {
  const Case c{"2d", 2, 2, 4, 6, {7, 8}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, "", 2, true};
  Geo g;
  Shape ys;
  geometry(c, g, ys);
  for (DType dt : hgtest::kFloatDTypes) {
    INFO(hgtest::dname(dt));
    // x stored [N, H, C, W], seen as [N, C, H, W]
    const Tensor xp = hgtest::uniform({2, 7, 4, 8}, dt).permute({0, 2, 1, 3});
    // x narrowed out of a wider tensor along W and along C
    const Tensor xn = hgtest::uniform({2, 6, 7, 11}, dt).narrow(3, 2, 8).narrow(1, 1, 4);
    // weight stored with its kernel dims swapped
    const Tensor wt = hgtest::uniform({6, 2, 2, 3}, dt, -1, 1).transpose(2, 3);
    const Tensor b = hgtest::uniform({12}, dt).narrow(0, 3, 6);
    REQUIRE_FALSE(xp.is_contiguous());
    REQUIRE_FALSE(xn.is_contiguous());
    REQUIRE_FALSE(wt.is_contiguous());
    for (const Tensor& x : {xp, xn}) {
      const Tensor y = hg::conv2d(x, wt, b, c.s, c.p, c.d, c.groups);
      HG_CHECK_CLOSE(y, ref_conv(x, wt, b, ys, g));
    }
  }
}

TEST_CASE("conv: unbatched input [C, *spatial] and an empty batch", "[ops][conv]") {
  const Tensor x = hgtest::uniform({3, 6, 5}, DType::Float32), w = hgtest::uniform({4, 3, 3, 3}, DType::Float32);
  const Tensor b = hgtest::uniform({4}, DType::Float32);
  const Tensor y = hg::conv2d(x, w, b, 1, 1);
  REQUIRE(y.shape() == Shape{4, 6, 5});
  Geo g;
  g.nd = 2;
  g.s = {1, 1};
  g.d = {1, 1};
  g.pb = {1, 1};
  HG_CHECK_CLOSE(y, ref_conv(x.unsqueeze(0), w, b, {1, 4, 6, 5}, g));
  const Tensor x1 = hgtest::uniform({2, 7}, DType::Float64), w1 = hgtest::uniform({3, 2, 2}, DType::Float64);
  CHECK(hg::conv1d(x1, w1).shape() == Shape{3, 6});
  const Tensor wt = hgtest::uniform({3, 2, 2}, DType::Float64);
  CHECK(hg::conv_transpose1d(hgtest::uniform({3, 4}, DType::Float64), wt, {}, 2).shape() == Shape{2, 8});

  // N = 0: an empty output; the weight's gradient is zero, the bias's too
  Tensor w0 = hgtest::uniform({4, 3, 3, 3}, DType::Float32), b0 = hgtest::uniform({4}, DType::Float32);
  w0.requires_grad_(true);
  b0.requires_grad_(true);
  Tensor x0 = hg::zeros({0, 3, 6, 5});
  x0.requires_grad_(true);
  const Tensor y0 = hg::conv2d(x0, w0, b0, 2, 1);
  REQUIRE(y0.shape() == Shape{0, 4, 3, 3});
  hg::sum(y0).backward();
  CHECK(x0.grad().shape() == x0.shape());
  HG_CHECK_EXACT(w0.grad(), std::vector<double>(108, 0.0));
  HG_CHECK_EXACT(b0.grad(), std::vector<double>(4, 0.0));
}

namespace {
struct TCase {
  std::string name;
  int nd;
  int64_t n, ci, co;
  std::vector<int64_t> in, k, s, p, op, d;
  int64_t groups;
  bool bias;
};

const std::vector<TCase>& t_cases() {
  static const std::vector<TCase> cases = {
      {"1d stride 2 output_padding 1", 1, 2, 3, 4, {5}, {3}, {2}, {1}, {1}, {1}, 1, true},
      {"1d output_padding >= stride (< dilation), pad 0", 1, 1, 2, 2, {4}, {3}, {1}, {0}, {1}, {2}, 1, true},
      {"1d groups 2 dilation 2", 1, 2, 4, 6, {6}, {2}, {3}, {2}, {2}, {2}, 2, false},
      {"2d stride (2, 3) output_padding (1, 2)", 2, 2, 4, 2, {3, 4}, {3, 3}, {2, 3}, {1, 0}, {1, 2}, {1, 1}, 2, true},
      {"2d dilation, output_padding 1 with stride 1", 2, 1, 3, 2, {4, 3}, {2, 3}, {1, 2}, {1, 1}, {1, 1}, {2, 1}, 1,
       true},
      {"3d output_padding", 3, 1, 2, 4, {2, 3, 3}, {2, 2, 3}, {2, 1, 2}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}, 2, true},
  };
  return cases;
}

void t_geometry(const TCase& c, Geo& g, Shape& ys) {
  g.nd = c.nd;
  g.groups = c.groups;
  g.s = c.s, g.d = c.d, g.pb = c.p;
  ys = {c.n, c.co};
  for (int i = 0; i < c.nd; ++i) ys.push_back((c.in[i] - 1) * c.s[i] - 2 * c.p[i] + c.d[i] * (c.k[i] - 1) + c.op[i] + 1);
}

Shape t_wshape(const TCase& c) {
  Shape ws{c.ci, c.co / c.groups};
  ws.insert(ws.end(), c.k.begin(), c.k.end());
  return ws;
}
Shape t_xshape(const TCase& c) {
  Shape xs{c.n, c.ci};
  xs.insert(xs.end(), c.in.begin(), c.in.end());
  return xs;
}
}  // namespace

TEST_CASE("conv_transpose1d/2d/3d forward matches a float64 reference, output_padding >= 1", "[ops][conv]") {
  for (const TCase& c : t_cases()) {
    for (DType dt : hgtest::kFloatDTypes) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor x = hgtest::uniform(t_xshape(c), dt), w = hgtest::uniform(t_wshape(c), dt, -1, 1);
      const Tensor b = c.bias ? hgtest::uniform({c.co}, dt) : Tensor();
      Geo g;
      Shape ys;
      t_geometry(c, g, ys);
      const Tensor y = call_conv_t(c.nd, x, w, b, c.s, c.p, c.op, c.groups, c.d);
      CHECK(y.shape() == ys);
      HG_CHECK_CLOSE(y, ref_conv_t(x, w, b, ys, g));
    }
  }
}

TEST_CASE("conv_transpose: values PyTorch 1.13 gives", "[ops][conv]") {
  // torch.nn.functional.conv_transpose1d(torch.arange(1., 4).view(1, 1, 3),
  //     torch.tensor([[[1., 10.]]]), stride=2, output_padding=1)
  //   -> [[[1, 10, 2, 20, 3, 30, 0]]]
  const Tensor x = hg::tensor({1.0, 2.0, 3.0}, {1, 1, 3}), w = hg::tensor({1.0, 10.0}, {1, 1, 2});
  HG_CHECK_EXACT(hg::conv_transpose1d(x, w, {}, 2, 0, 1), (std::vector<double>{1, 10, 2, 20, 3, 30, 0}));
  // padding=1, dilation=2, output_padding=1 (>= stride 1, < dilation 2)
  //   -> [[[2, 13, 20, 30]]]
  HG_CHECK_EXACT(hg::conv_transpose1d(x, w, {}, 1, 1, 1, 1, 2), (std::vector<double>{2, 13, 20, 30}));
}

TEST_CASE("conv and conv_transpose backward pass gradcheck in float64", "[ops][conv][grad]") {
  for (const Case& c : conv_cases()) {
    INFO(c.name);
    Case small = c;
    small.n = 1;
    for (auto& v : small.in) v = std::min<int64_t>(v, 6);
    if (c.mode.empty()) {
      // keep the padded input at least as large as the kernel
      for (int i = 0; i < c.nd; ++i) small.in[i] = std::max(small.in[i], c.d[i] * (c.k[i] - 1) + 1);
    } else {
      for (int i = 0; i < c.nd; ++i) small.in[i] = std::max(small.in[i], c.d[i] * (c.k[i] - 1) + 1);
    }
    const Tensor x = hgtest::leaf(xshape(small)), w = hgtest::leaf(wshape(small));
    const Tensor b = c.bias ? hgtest::leaf({c.co}) : Tensor();
    const PaddingArg pad = padding_of(c);
    auto fn = [&](const std::vector<Tensor>& in) {
      return call_conv(c.nd, in[0], in[1], in.size() > 2 ? in[2] : Tensor(), c.s, pad, c.d, c.groups);
    };
    if (b.defined()) {
      HG_GRADCHECK(fn, {x, w, b});
    } else {
      HG_GRADCHECK(fn, {x, w});
    }
  }
  for (const TCase& c : t_cases()) {
    INFO(c.name);
    const Tensor x = hgtest::leaf(t_xshape(c)), w = hgtest::leaf(t_wshape(c));
    const Tensor b = c.bias ? hgtest::leaf({c.co}) : Tensor();
    auto fn = [&](const std::vector<Tensor>& in) {
      return call_conv_t(c.nd, in[0], in[1], in.size() > 2 ? in[2] : Tensor(), c.s, c.p, c.op, c.groups, c.d);
    };
    if (b.defined()) {
      HG_GRADCHECK(fn, {x, w, b});
    } else {
      HG_GRADCHECK(fn, {x, w});
    }
  }
}

TEST_CASE("conv backward: only the wanted gradients, unbatched and non-contiguous inputs", "[ops][conv][grad]") {
  // gradient for the bias alone, for the input alone, through a permuted view
  const Tensor w = hgtest::leaf({4, 2, 3, 3}), b = hgtest::leaf({4});
  const Tensor xs = hgtest::leaf({2, 5, 6});  // unbatched [C, H, W]
  auto fn = [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], in[2], 1, 1); };
  HG_GRADCHECK(fn, {xs, w.detach(), b});
  HG_GRADCHECK(fn, {xs.detach(), w.detach(), b});
  const Tensor xp = hgtest::strided_leaf({1, 2, 5, 6});
  HG_GRADCHECK(fn, {xp, w, b});
}

TEST_CASE("conv backward in float16/bfloat16 matches the float64 reference gradient", "[ops][conv][grad]") {
  const std::vector<Case> cs = {conv_cases()[3], conv_cases()[5], conv_cases()[12]};
  for (const Case& c : cs) {
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      INFO(c.name << " " << hgtest::dname(dt));
      Tensor x = hgtest::uniform(xshape(c), dt), w = hgtest::uniform(wshape(c), dt, -1, 1);
      Tensor b = hgtest::uniform({c.co}, dt);
      x.requires_grad_(true);
      w.requires_grad_(true);
      b.requires_grad_(true);
      Geo g;
      Shape ys;
      geometry(c, g, ys);
      const Tensor v = hgtest::uniform(ys, dt);
      call_conv(c.nd, x, w, b, c.s, padding_of(c), c.d, c.groups).backward(v);
      const auto xv = values(x), wv = values(w), vv = values(v);
      std::vector<double> dx(xv.size(), 0.0), dw(wv.size(), 0.0), db(static_cast<size_t>(c.co), 0.0);
      visit(x.shape(), w.shape(), ys, g, [&](int64_t xi, int64_t wi, int64_t yi) {
        dx[xi] += vv[yi] * wv[wi];
        dw[wi] += vv[yi] * xv[xi];
      });
      const int64_t plane = hgtest::numel(ys) / (ys[0] * ys[1]);
      for (size_t i = 0; i < vv.size(); ++i) db[(i / plane) % c.co] += vv[i];
      CHECK(x.grad().dtype() == dt);
      HG_CHECK_CLOSE(x.grad(), dx);
      HG_CHECK_CLOSE(w.grad(), dw);
      HG_CHECK_CLOSE(b.grad(), db);
    }
  }
  // transposed
  for (const TCase& c : t_cases()) {
    for (DType dt : {DType::Float16, DType::BFloat16}) {
      INFO(c.name << " " << hgtest::dname(dt));
      Tensor x = hgtest::uniform(t_xshape(c), dt), w = hgtest::uniform(t_wshape(c), dt, -1, 1);
      Tensor b = hgtest::uniform({c.co}, dt);
      x.requires_grad_(true);
      w.requires_grad_(true);
      b.requires_grad_(true);
      Geo g;
      Shape ys;
      t_geometry(c, g, ys);
      const Tensor v = hgtest::uniform(ys, dt);
      call_conv_t(c.nd, x, w, b, c.s, c.p, c.op, c.groups, c.d).backward(v);
      const auto xv = values(x), wv = values(w), vv = values(v);
      std::vector<double> dx(xv.size(), 0.0), dw(wv.size(), 0.0), db(static_cast<size_t>(c.co), 0.0);
      visit(ys, w.shape(), x.shape(), g, [&](int64_t yi, int64_t wi, int64_t xi) {
        dx[xi] += vv[yi] * wv[wi];
        dw[wi] += vv[yi] * xv[xi];
      });
      const int64_t plane = hgtest::numel(ys) / (ys[0] * ys[1]);
      for (size_t i = 0; i < vv.size(); ++i) db[(i / plane) % c.co] += vv[i];
      HG_CHECK_CLOSE(x.grad(), dx);
      HG_CHECK_CLOSE(w.grad(), dw);
      HG_CHECK_CLOSE(b.grad(), db);
    }
  }
}

TEST_CASE("conv under CPU autocast: bfloat16 output, float32 gradients for float32 parameters", "[ops][conv][amp]") {
  Tensor x = hgtest::uniform({2, 3, 8, 8}, DType::Float32);
  Tensor w = hgtest::uniform({4, 3, 3, 3}, DType::Float32, -1, 1), b = hgtest::uniform({4}, DType::Float32);
  w.requires_grad_(true);
  b.requires_grad_(true);
  Tensor y;
  {
    hg::amp::autocast region(hg::DeviceType::CPU);
    y = hg::conv2d(x, w, b, 2, 1);
  }
  CHECK(y.dtype() == DType::BFloat16);
  Geo g;
  g.nd = 2;
  g.s = {2, 2};
  g.d = {1, 1};
  g.pb = {1, 1};
  // reference on the bf16-rounded inputs
  const Tensor xr = x.to(DType::BFloat16), wr = w.detach().to(DType::BFloat16), br = b.detach().to(DType::BFloat16);
  HG_CHECK_CLOSE(y, ref_conv(xr, wr, br, y.shape(), g));
  hg::sum(y.to(DType::Float32)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
  CHECK(b.grad().dtype() == DType::Float32);
  std::vector<double> dw(static_cast<size_t>(w.numel()), 0.0);
  const auto xv = values(xr);
  visit(x.shape(), w.shape(), y.shape(), g, [&](int64_t xi, int64_t wi, int64_t) { dw[wi] += xv[xi]; });
  HG_CHECK_CLOSE_TOL(w.grad(), dw, hgtest::tol(DType::BFloat16));
  HG_CHECK_CLOSE(b.grad(), std::vector<double>(4, 2.0 * 16));
  // transposed too
  Tensor wt = hgtest::uniform({3, 2, 2, 2}, DType::Float32);
  {
    hg::amp::autocast region(hg::DeviceType::CPU);
    CHECK(hg::conv_transpose2d(x, wt, {}, 2).dtype() == DType::BFloat16);
  }
}

TEST_CASE("conv errors name the op, the shapes and dtypes, and a remedy", "[ops][conv][errors]") {
  const Tensor x = hgtest::uniform({1, 4, 6, 6}, DType::Float32), w = hgtest::uniform({6, 2, 3, 3}, DType::Float32);
  hgtest::expect_errors({
      {"half input, float weight", [&] { hg::conv2d(x.to(DType::Float16), w, {}, 1, 0, 1, 2); },
       {"conv2d: input is float16 but weight is float32", "amp::autocast", ".to(float32)"}},
      {"bf16 input, float weight (transposed)",
       [&] { hg::conv_transpose2d(x.to(DType::BFloat16), hgtest::uniform({4, 2, 3, 3}, DType::Float32)); },
       {"conv_transpose2d: input is bfloat16 but weight is float32", "amp::autocast"}},
      {"bias dtype", [&] { hg::conv2d(x, w, hg::zeros({6}, DType::Float64), 1, 0, 1, 2); },
       {"conv2d: bias is float64 but weight is float32"}},
      {"int input", [&] { hg::conv2d(x.to(DType::Int64), w, {}, 1, 0, 1, 2); }, {"conv2d", "floating", "int64"}},
      {"input dims", [&] { hg::conv2d(hg::ones({4, 6}), w); }, {"conv2d", "3-d (unbatched) or 4-d (batched)"}},
      {"weight dims", [&] { hg::conv2d(x, hg::ones({6, 4, 3})); }, {"conv2d", "weight must be 4-d"}},
      {"channels", [&] { hg::conv2d(x, w); }, {"conv2d", "has 4 channels", "groups = 1 expects 2"}},
      {"groups divide out", [&] { hg::conv2d(x, hg::ones({5, 2, 3, 3}), {}, 1, 0, 1, 2); },
       {"conv2d", "divisible by groups"}},
      {"groups 0", [&] { hg::conv2d(x, w, {}, 1, 0, 1, 0); }, {"conv2d", "groups must be a positive integer"}},
      {"bias shape", [&] { hg::conv2d(x, w, hg::ones({5}), 1, 0, 1, 2); }, {"conv2d", "bias", "6 elements"}},
      {"stride 0", [&] { hg::conv2d(x, w, {}, 0, 0, 1, 2); }, {"conv2d", "stride must be positive"}},
      {"stride count", [&] { hg::conv2d(x, w, {}, {1, 1, 1}, 0, 1, 2); },
       {"conv2d", "stride must be one number or 2 numbers"}},
      {"negative padding", [&] { hg::conv2d(x, w, {}, 1, -1, 1, 2); }, {"conv2d", "padding must be non-negative"}},
      {"dilation 0", [&] { hg::conv2d(x, w, {}, 1, 0, 0, 2); }, {"conv2d", "dilation must be positive"}},
      {"same with stride", [&] { hg::conv2d(x, w, {}, 2, "same", 1, 2); },
       {"conv2d", "padding='same' is not supported for strided convolutions"}},
      {"bad padding mode", [&] { hg::conv2d(x, w, {}, 1, "full", 1, 2); }, {"conv2d", "'same' or 'valid'", "full"}},
      {"kernel too large", [&] { hg::conv2d(x, hg::ones({6, 2, 7, 7}), {}, 1, 0, 1, 2); },
       {"conv2d", "smaller than the dilated kernel size 7"}},
      {"dilated kernel too large", [&] { hg::conv1d(hg::ones({1, 1, 4}), hg::ones({1, 1, 3}), {}, 1, 0, 2); },
       {"conv1d", "dilated kernel size 5"}},
      {"empty spatial", [&] { hg::conv1d(hg::ones({1, 1, 0}), hg::ones({1, 1, 1})); }, {"conv1d", "> 0"}},
      {"undefined input", [&] { hg::conv3d(Tensor(), hg::ones({1, 1, 1, 1, 1})); }, {"conv3d", "input"}},
      {"output_padding", [&] { hg::conv_transpose2d(x, hg::ones({4, 2, 3, 3}), {}, 2, 0, 2); },
       {"conv_transpose2d", "output padding must be smaller than either stride or dilation"}},
      {"transposed channels", [&] { hg::conv_transpose2d(x, hg::ones({3, 2, 3, 3})); },
       {"conv_transpose2d", "has 4 channels", "weight.size(0)"}},
      {"transposed bias", [&] { hg::conv_transpose1d(hg::ones({1, 4, 3}), hg::ones({4, 2, 3}), hg::ones({3}), 1, 0, 0, 2); },
       {"conv_transpose1d", "bias", "4 elements"}},
      {"transposed output size", [&] { hg::conv_transpose1d(hg::ones({1, 1, 2}), hg::ones({1, 1, 1}), {}, 1, 1); },
       {"conv_transpose1d", "output size 0"}},
  });
}

TEST_CASE("conv: oneDNN's results agree with the portable direct loop", "[ops][conv]") {
  namespace k = hg::kernels;
  struct P {
    Shape x, w;
    k::ConvGeometry g;
  };
  auto geo = [](int nd, int64_t groups, int64_t s, int64_t p, int64_t d) {
    k::ConvGeometry g;
    g.nd = nd;
    g.groups = groups;
    for (int i = 0; i < nd; ++i) g.stride[i] = s, g.dilation[i] = d, g.pad_before[i] = g.pad_after[i] = p;
    return g;
  };
  const std::vector<P> ps = {
      {{2, 3, 17, 17}, {16, 3, 3, 3}, geo(2, 1, 2, 1, 1)},      // stem
      {{2, 16, 9, 9}, {16, 1, 3, 3}, geo(2, 16, 2, 1, 1)},      // depthwise 3x3 stride 2
      {{2, 24, 7, 7}, {24, 1, 5, 5}, geo(2, 24, 1, 2, 1)},      // depthwise 5x5
      {{2, 16, 6, 6}, {24, 16, 1, 1}, geo(2, 1, 1, 0, 1)},      // pointwise
      {{2, 4, 11}, {6, 2, 3}, geo(1, 2, 2, 1, 2)},              // 1d groups dilation
      {{1, 4, 5, 6, 5}, {4, 2, 3, 2, 3}, geo(3, 2, 1, 1, 1)},   // 3d
  };
  for (const P& p : ps) {
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
      INFO(hg::shape_str(p.x) << " * " << hg::shape_str(p.w) << " " << hgtest::dname(dt));
      const Tensor x = hgtest::uniform(p.x, dt), w = hgtest::uniform(p.w, dt, -1, 1), b = hgtest::uniform({p.w[0]}, dt);
      Shape ys{p.x[0], p.w[0]};
      for (int i = 0; i < p.g.nd; ++i)
        ys.push_back((p.x[2 + i] + 2 * p.g.pad_before[i] - p.g.dilation[i] * (p.w[2 + i] - 1) - 1) / p.g.stride[i] + 1);
      const Tensor y1 = hg::empty(ys, dt), y2 = hg::empty(ys, dt);
      hg::kernels::cpu::conv_forward(x, w, b, p.g, y1);
      hg::kernels::cpu::conv_forward_direct(x, w, b, p.g, y2);
      HG_CHECK_CLOSE(y1, values(y2));
      const Tensor dy = hgtest::uniform(ys, dt);
      const Tensor dx1 = hg::empty(p.x, dt), dx2 = hg::empty(p.x, dt);
      hg::kernels::cpu::conv_backward_data(dy, w, p.g, dx1);
      hg::kernels::cpu::conv_backward_data_direct(dy, w, p.g, dx2);
      HG_CHECK_CLOSE(dx1, values(dx2));
      const Tensor dw1 = hg::empty(p.w, dt), dw2 = hg::empty(p.w, dt);
      const Tensor db1 = hg::empty({p.w[0]}, dt), db2 = hg::empty({p.w[0]}, dt);
      hg::kernels::cpu::conv_backward_weight(dy, x, p.g, dw1, db1);
      hg::kernels::cpu::conv_backward_weight_direct(dy, x, p.g, dw2, db2);
      HG_CHECK_CLOSE(dw1, values(dw2));
      HG_CHECK_CLOSE(db1, values(db2));
      if (dt == DType::BFloat16) {  // float32 sums (autocast's weight gradients), from both routes
        const Tensor fw1 = hg::empty(p.w), fw2 = hg::empty(p.w), fb1 = hg::empty({p.w[0]}), fb2 = hg::empty({p.w[0]});
        hg::kernels::cpu::conv_backward_weight(dy, x, p.g, fw1, fb1);
        hg::kernels::cpu::conv_backward_weight_direct(dy, x, p.g, fw2, fb2);
        HG_CHECK_CLOSE(fw1, values(fw2));
        HG_CHECK_CLOSE(fb1, values(fb2));
        CHECK_FALSE(hg::equal(fw1, fw1.to(DType::BFloat16).to(DType::Float32)));  // not rounded
      }
    }
  }
  // the direct depthwise loop on channels-last activations, float32 sums from
  // bfloat16, against the row-major direct loop
  const k::ConvGeometry g = geo(2, 16, 1, 2, 1);
  const Tensor x = hgtest::uniform({2, 16, 7, 7}, DType::BFloat16), dy = hgtest::uniform({2, 16, 7, 7}, DType::BFloat16);
  const Tensor dw1 = hg::empty({16, 1, 5, 5}), dw2 = hg::empty({16, 1, 5, 5}), db1 = hg::empty({16}), db2 = hg::empty({16});
  hg::kernels::cpu::conv_backward_weight_direct(dy.contiguous(hg::MemoryFormat::ChannelsLast),
                                       x.contiguous(hg::MemoryFormat::ChannelsLast), g, dw1, db1);
  hg::kernels::cpu::conv_backward_weight_direct(dy, x, g, dw2, db2);
  HG_CHECK_CLOSE(dw1, values(dw2));
  HG_CHECK_CLOSE(db1, values(db2));
  CHECK_FALSE(hg::equal(dw1, dw1.to(DType::BFloat16).to(DType::Float32)));
}
