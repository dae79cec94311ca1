// The cuDNN convolution backend (kernels/cuda/cudnn_conv.cpp: kernels::cuda::conv_forward /
// conv_backward_data / conv_backward_weight) called directly on device
// tensors, against a naive float64 convolution computed here on the CPU from
// the same rounded inputs: 1-d, 2-d and 3-d, strides, asymmetric padding,
// dilation, groups (depthwise too), bias, float32 with TF32 off, float16,
// bfloat16, contiguous, channels-last, mixed and offset (misaligned) layouts;
// outputs start as NaN, so an element the backend does not write fails. Also
// the plan cache (a second call is a hit), the TF32 switch, float64, empty
// shapes and the errors.
// Built only with the CUDA backend; without a usable GPU the [cuda] cases are
// reported skipped.
#include "test_util.h"

#include <halfgrad.h>

// The setting exists (and is false-able) in every build; only CUDA reads it.
TEST_CASE("cudnn_allow_tf32 defaults to true, as PyTorch's torch.backends.cudnn.allow_tf32", "[cudnn]") {
  CHECK(halfgrad::cudnn_allow_tf32());
  halfgrad::set_cudnn_allow_tf32(false);
  CHECK_FALSE(halfgrad::cudnn_allow_tf32());
  halfgrad::set_cudnn_allow_tf32(true);
  CHECK(halfgrad::cudnn_allow_tf32());
}

#if defined(HALFGRAD_WITH_CUDA)

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <halfgrad/kernels/cuda/cudnn_conv.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/kernels.h>

namespace hg = halfgrad;
namespace cops = halfgrad::kernels::cuda;
using hg::kernels::ConvGeometry;
using namespace hgtest;

namespace {

const hg::Device kCuda = hg::Device::cuda();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Settings are process-wide: every test puts them back.
struct Tf32Guard {
  bool saved = hg::cudnn_allow_tf32();
  explicit Tf32Guard(bool on) { hg::set_cudnn_allow_tf32(on); }
  ~Tf32Guard() { hg::set_cudnn_allow_tf32(saved); }
};

// ---- the float64 reference ----------------------------------------------------------------
// Shapes padded to 3 spatial dims with leading 1s (a 2-d [N, C, H, W] flattens as [N, C, 1, H, W]).
struct Problem {
  std::string name;
  int64_t n, cin, cout;
  std::vector<int64_t> in, k;  // nd entries each
  ConvGeometry g;
  int nd() const { return static_cast<int>(in.size()); }
  std::vector<int64_t> out() const {
    std::vector<int64_t> o(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      o[i] = (in[i] + g.pad_before[i] + g.pad_after[i] - g.dilation[i] * (k[i] - 1) - 1) / g.stride[i] + 1;
    return o;
  }
  Shape x_shape() const { return cat({n, cin}, in); }
  Shape w_shape() const { return cat({cout, cin / g.groups}, k); }
  Shape y_shape() const { return cat({n, cout}, out()); }
  static Shape cat(Shape a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
};

ConvGeometry geometry(int nd, int64_t groups, std::vector<int64_t> stride, std::vector<int64_t> dilation,
                      std::vector<int64_t> pad_before, std::vector<int64_t> pad_after) {
  ConvGeometry g;
  g.nd = nd;
  g.groups = groups;
  for (int i = 0; i < nd; ++i) {
    g.stride[i] = stride[i];
    g.dilation[i] = dilation[i];
    g.pad_before[i] = pad_before[i];
    g.pad_after[i] = pad_after[i];
  }
  return g;
}

// Calls f(y index, x index, w index) for every product of the convolution.
template <typename F>
void for_each_product(const Problem& p, F&& f) {
  const int nd = p.nd(), shift = 3 - nd;
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1}, st{1, 1, 1}, dil{1, 1, 1}, pb{0, 0, 0};
  const auto o = p.out();
  for (int i = 0; i < nd; ++i) {
    in[i + shift] = p.in[i], k[i + shift] = p.k[i], out[i + shift] = o[i];
    st[i + shift] = p.g.stride[i], dil[i + shift] = p.g.dilation[i], pb[i + shift] = p.g.pad_before[i];
  }
  const int64_t cin_g = p.cin / p.g.groups, cout_g = p.cout / p.g.groups;
  const int64_t in_sz = in[0] * in[1] * in[2], out_sz = out[0] * out[1] * out[2], k_sz = k[0] * k[1] * k[2];
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t co = 0; co < p.cout; ++co) {
      const int64_t grp = co / cout_g;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            const int64_t yi = (n * p.cout + co) * out_sz + (o0 * out[1] + o1) * out[2] + o2;
            for (int64_t c = 0; c < cin_g; ++c)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * st[0] - pb[0] + k0 * dil[0];
                    const int64_t i1 = o1 * st[1] - pb[1] + k1 * dil[1];
                    const int64_t i2 = o2 * st[2] - pb[2] + k2 * dil[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t xi = (n * p.cin + grp * cin_g + c) * in_sz + (i0 * in[1] + i1) * in[2] + i2;
                    const int64_t wi = (co * cin_g + c) * k_sz + (k0 * k[1] + k1) * k[2] + k2;
                    f(yi, xi, wi);
                  }
          }
    }
}

std::vector<double> ref_forward(const Problem& p, const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& bias) {
  std::vector<double> y(static_cast<size_t>(numel(p.y_shape())), 0.0);
  for_each_product(p, [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
  if (!bias.empty()) {
    const int64_t per = static_cast<int64_t>(y.size()) / (p.n * p.cout);
    for (size_t i = 0; i < y.size(); ++i) y[i] += bias[(static_cast<int64_t>(i) / per) % p.cout];
  }
  return y;
}

std::vector<double> ref_backward_data(const Problem& p, const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(static_cast<size_t>(numel(p.x_shape())), 0.0);
  for_each_product(p, [&](int64_t yi, int64_t xi, int64_t wi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}

std::vector<double> ref_backward_weight(const Problem& p, const std::vector<double>& dy, const std::vector<double>& x) {
  std::vector<double> dw(static_cast<size_t>(numel(p.w_shape())), 0.0);
  for_each_product(p, [&](int64_t yi, int64_t xi, int64_t wi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}

std::vector<double> ref_bias_grad(const Problem& p, const std::vector<double>& dy) {
  std::vector<double> db(static_cast<size_t>(p.cout), 0.0);
  const int64_t per = static_cast<int64_t>(dy.size()) / (p.n * p.cout);
  for (size_t i = 0; i < dy.size(); ++i) db[(static_cast<int64_t>(i) / per) % p.cout] += dy[i];
  return db;
}

// ---- device tensors in a layout ------------------------------------------------------------
enum class Layout { Contiguous, ChannelsLast, Offset };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::ChannelsLast: return "channels-last";
    case Layout::Offset: return "offset (narrowed along N, misaligned)";
  }
  return "?";
}

// The permutation from [N, *spatial, C] to [N, C, *spatial].
Shape to_nc(int64_t rank) {
  Shape perm{0, rank - 1};
  for (int64_t i = 1; i < rank - 1; ++i) perm.push_back(i);
  return perm;
}
Shape nhwc_shape(const Shape& s) {
  Shape r{s[0]};
  r.insert(r.end(), s.begin() + 2, s.end());
  r.push_back(s[1]);
  return r;
}

// A device tensor of `shape` in layout l holding cpu's values (cpu: contiguous, any dtype).
Tensor on_device(const Tensor& cpu, Layout l) {
  const int64_t rank = cpu.dim();
  switch (l) {
    case Layout::Contiguous: return cpu.to(kCuda);
    case Layout::ChannelsLast: {
      Shape inv{0};  // [N, C, *spatial] -> [N, *spatial, C]
      for (int64_t i = 2; i < rank; ++i) inv.push_back(i);
      inv.push_back(1);
      return cpu.permute(inv).contiguous().to(kCuda).permute(to_nc(rank));
    }
    case Layout::Offset: {
      // one extra sample in front: the view starts C * spatial elements in (odd for the shapes below)
      Shape big = cpu.shape();
      big[0] += 1;
      Tensor b = hg::zeros(big, TensorOptions(cpu.dtype(), kCuda));
      Tensor v = b.narrow(0, 1, cpu.shape()[0]);
      v.copy_(cpu.to(kCuda));
      return v;
    }
  }
  return Tensor();
}

// An output in layout l, filled with NaN (so an unwritten element shows).
Tensor nan_output(const Shape& shape, DType dt, Layout l) {
  switch (l) {
    case Layout::Contiguous: return hg::full(shape, kNaN, TensorOptions(dt, kCuda));
    case Layout::ChannelsLast:
      return hg::full(nhwc_shape(shape), kNaN, TensorOptions(dt, kCuda)).permute(to_nc(static_cast<int64_t>(shape.size())));
    case Layout::Offset: {
      Shape big = shape;
      big[0] += 1;
      return hg::full(big, kNaN, TensorOptions(dt, kCuda)).narrow(0, 1, shape[0]);
    }
  }
  return Tensor();
}

// A weight tensor in a layout: the offset layout makes no sense for a weight (contiguous then).
Layout weight_layout(Layout l) { return l == Layout::Offset ? Layout::Contiguous : l; }

double tolerance(DType dt) {
  // float32 runs with TF32 off here; the half types round inputs once (exact in
  // the reference) and the output once, with float32 sums.
  return dt == DType::Float32 ? 1e-5 : tol(dt);
}

const std::vector<Problem>& problems() {
  static const std::vector<Problem> ps = {
      {"1-d, stride 2, asymmetric padding", 2, 3, 4, {11}, {3}, geometry(1, 1, {2}, {1}, {1}, {2})},
      {"1-d dilated, groups 3", 2, 6, 3, {13}, {3}, geometry(1, 3, {1}, {3}, {2}, {0})},
      {"2-d, stride (1, 2), padding (1, 0) / (2, 1), dilation (2, 1), groups 2", 2, 4, 6, {8, 7}, {3, 2},
       geometry(2, 2, {1, 2}, {2, 1}, {1, 0}, {2, 1})},
      {"2-d depthwise 3x3, padding 1", 2, 6, 6, {9, 9}, {3, 3}, geometry(2, 6, {1, 1}, {1, 1}, {1, 1}, {1, 1})},
      {"2-d depthwise with multiplier 2, stride 2", 1, 4, 8, {10, 9}, {5, 5}, geometry(2, 4, {2, 2}, {1, 1}, {2, 2}, {2, 2})},
      {"2-d pointwise 1x1, 16 -> 24 channels", 3, 16, 24, {5, 6}, {1, 1}, geometry(2, 1, {1, 1}, {1, 1}, {0, 0}, {0, 0})},
      {"3-d, stride (1, 2, 1), padding (1, 0, 1) / (0, 1, 1), dilation (1, 1, 2)", 1, 2, 3, {5, 6, 7}, {2, 3, 2},
       geometry(3, 1, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {0, 1, 1})},
  };
  return ps;
}

// Runs all three entries on one problem and compares each with the reference.
void check_problem(const Problem& p, DType dt, Layout l, bool with_bias) {
  INFO(p.name << ", " << dname(dt) << ", " << layout_name(l) << (with_bias ? ", bias" : ", no bias"));
  const Tensor x = uniform(p.x_shape(), dt), w = uniform(p.w_shape(), dt, -1.0, 1.0);
  const Tensor dy = uniform(p.y_shape(), dt);
  const Tensor bias = with_bias ? uniform({p.cout}, dt) : Tensor();
  const std::vector<double> xv = values(x), wv = values(w), dyv = values(dy);
  const std::vector<double> bv = with_bias ? values(bias) : std::vector<double>{};

  // forward
  const Tensor y = nan_output(p.y_shape(), dt, l);
  cops::conv_forward(on_device(x, l), on_device(w, weight_layout(l)), with_bias ? bias.to(kCuda) : Tensor(), p.g, y);
  HG_CHECK_CLOSE_TOL(y.contiguous().cpu(), ref_forward(p, xv, wv, bv), tolerance(dt));

  // backward data
  const Tensor dx = nan_output(p.x_shape(), dt, l);
  cops::conv_backward_data(on_device(dy, l), on_device(w, weight_layout(l)), p.g, dx);
  HG_CHECK_CLOSE_TOL(dx.contiguous().cpu(), ref_backward_data(p, dyv, wv), tolerance(dt));

  // backward weight (+ bias)
  const Tensor dw = nan_output(p.w_shape(), dt, weight_layout(l));
  // db: a strided view (every other element) in the offset layout, dense otherwise
  Tensor db;
  if (with_bias)
    db = l == Layout::Offset ? hg::full({2 * p.cout}, kNaN, TensorOptions(dt, kCuda)).slice(0, 0, 2 * p.cout, 2)
                             : hg::full({p.cout}, kNaN, TensorOptions(dt, kCuda));
  cops::conv_backward_weight(on_device(dy, l), on_device(x, l), p.g, dw, db);
  HG_CHECK_CLOSE_TOL(dw.contiguous().cpu(), ref_backward_weight(p, dyv, xv), tolerance(dt));
  if (with_bias) HG_CHECK_CLOSE_TOL(db.cpu(), ref_bias_grad(p, dyv), tolerance(dt));
}

}  // namespace

TEST_CASE("cudnn conv: forward, backward data and backward weight match float64 in every layout and dtype",
          "[cuda][cudnn]") {
  Tf32Guard off(false);
  for (const Problem& p : problems())
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
      for (Layout l : {Layout::Contiguous, Layout::ChannelsLast, Layout::Offset})
        for (bool with_bias : {false, true}) check_problem(p, dt, l, with_bias);
}

TEST_CASE("cudnn conv: a channels-last input with a contiguous weight (mixed layouts)", "[cuda][cudnn]") {
  Tf32Guard off(false);
  const Problem p{"mixed", 2, 8, 4, {6, 5}, {3, 3}, geometry(2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1})};
  for (DType dt : {DType::Float32, DType::Float16}) {
    INFO(dname(dt));
    const Tensor x = uniform(p.x_shape(), dt), w = uniform(p.w_shape(), dt), bias = uniform({p.cout}, dt);
    const Tensor y = nan_output(p.y_shape(), dt, Layout::ChannelsLast);
    cops::conv_forward(on_device(x, Layout::ChannelsLast), on_device(w, Layout::Contiguous), bias.to(kCuda), p.g, y);
    HG_CHECK_CLOSE_TOL(y.contiguous().cpu(), ref_forward(p, values(x), values(w), values(bias)), tolerance(dt));
    // and a contiguous output from a channels-last weight
    const Tensor y2 = nan_output(p.y_shape(), dt, Layout::Contiguous);
    cops::conv_forward(on_device(x, Layout::Contiguous), on_device(w, Layout::ChannelsLast), Tensor(), p.g, y2);
    HG_CHECK_CLOSE_TOL(y2.contiguous().cpu(), ref_forward(p, values(x), values(w), {}), tolerance(dt));
  }
}

TEST_CASE("cudnn conv: the second call with the same shapes reuses the cached plan", "[cuda][cudnn]") {
  Tf32Guard off(false);
  // shapes no other test uses, so the first call builds
  const Problem p{"cache", 1, 5, 7, {13, 11}, {3, 3}, geometry(2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1})};
  const Tensor x = uniform(p.x_shape(), DType::Float32).to(kCuda), w = uniform(p.w_shape(), DType::Float32).to(kCuda);
  const Tensor y = hg::empty(p.y_shape(), TensorOptions(DType::Float32, kCuda));
  cops::reset_conv_plan_counts();
  cops::conv_forward(x, w, Tensor(), p.g, y);
  CHECK(cops::conv_plan_counts().built == 1);
  CHECK(cops::conv_plan_counts().hits == 0);
  cops::conv_forward(x, w, Tensor(), p.g, y);
  CHECK(cops::conv_plan_counts().built == 1);
  CHECK(cops::conv_plan_counts().hits == 1);
  // other shapes (a bigger batch) build a plan of their own
  const Problem p2{"cache", 2, 5, 7, {13, 11}, {3, 3}, p.g};
  const Tensor x2 = uniform(p2.x_shape(), DType::Float32).to(kCuda);
  const Tensor y2 = hg::empty(p2.y_shape(), TensorOptions(DType::Float32, kCuda));
  cops::conv_forward(x2, w, Tensor(), p.g, y2);
  CHECK(cops::conv_plan_counts().built == 2);
  // and so does the other TF32 setting (the engine filter differs)
  {
    Tf32Guard on(true);
    cops::conv_forward(x, w, Tensor(), p.g, y);
    CHECK(cops::conv_plan_counts().built == 3);
  }
}

TEST_CASE("cudnn conv: float32 with TF32 allowed (the default) is close to float64", "[cuda][cudnn]") {
  Tf32Guard on(true);
  const Problem p{"tf32", 2, 32, 16, {12, 12}, {3, 3}, geometry(2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1})};
  const Tensor x = uniform(p.x_shape(), DType::Float32), w = uniform(p.w_shape(), DType::Float32);
  const Tensor y = nan_output(p.y_shape(), DType::Float32, Layout::Contiguous);
  cops::conv_forward(x.to(kCuda), w.to(kCuda), Tensor(), p.g, y);
  // TF32 keeps 10 mantissa bits of each input: ~1e-3 relative
  HG_CHECK_CLOSE_TOL(y.cpu(), ref_forward(p, values(x), values(w), {}), 5e-3);
}

TEST_CASE("cudnn conv: float64 runs exactly where an engine takes it, else an Error that says to use the CPU",
          "[cuda][cudnn]") {
  const Problem p{"f64", 2, 3, 4, {7, 6}, {3, 2}, geometry(2, 1, {2, 1}, {1, 2}, {1, 0}, {0, 1})};
  const Tensor x = uniform(p.x_shape(), DType::Float64), w = uniform(p.w_shape(), DType::Float64);
  const Tensor bias = uniform({p.cout}, DType::Float64);
  const Tensor y = nan_output(p.y_shape(), DType::Float64, Layout::Contiguous);
  try {
    cops::conv_forward(x.to(kCuda), w.to(kCuda), bias.to(kCuda), p.g, y);
  } catch (const hg::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::Contains("float64"));
    CHECK_THAT(msg, Catch::Matchers::Contains("CPU"));
    CHECK_THAT(msg, Catch::Matchers::Contains("conv_forward"));
    return;
  }
  HG_CHECK_CLOSE(y.cpu(), ref_forward(p, values(x), values(w), values(bias)));
}

TEST_CASE("cudnn conv: empty batches and channels", "[cuda][cudnn]") {
  const auto g = geometry(2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1});
  const auto opts = TensorOptions(DType::Float32, kCuda);
  // N = 0: nothing to write forward; dw and db are 0
  {
    const Tensor x = hg::empty({0, 3, 5, 5}, opts), w = uniform({4, 3, 3, 3}, DType::Float32).to(kCuda);
    const Tensor y = hg::empty({0, 4, 5, 5}, opts);
    cops::conv_forward(x, w, Tensor(), g, y);
    const Tensor dx = hg::empty({0, 3, 5, 5}, opts);
    cops::conv_backward_data(y, w, g, dx);
    const Tensor dw = hg::full({4, 3, 3, 3}, kNaN, opts), db = hg::full({4}, kNaN, opts);
    cops::conv_backward_weight(y, x, g, dw, db);
    HG_CHECK_EXACT(dw.cpu(), std::vector<double>(4 * 3 * 3 * 3, 0.0));
    HG_CHECK_EXACT(db.cpu(), std::vector<double>(4, 0.0));
  }
  // C_in = 0: y is the bias; dx has nothing, dw is empty, db the sum of dy
  {
    const Tensor x = hg::empty({2, 0, 5, 5}, opts), w = hg::empty({4, 0, 3, 3}, opts);
    const Tensor bias = uniform({4}, DType::Float32);
    const Tensor y = hg::full({2, 4, 5, 5}, kNaN, opts);
    cops::conv_forward(x, w, bias.to(kCuda), g, y);
    std::vector<double> ref;
    for (int n = 0; n < 2; ++n)
      for (double b : values(bias)) ref.insert(ref.end(), 25, b);
    HG_CHECK_EXACT(y.cpu(), ref);
    const Tensor dy = uniform({2, 4, 5, 5}, DType::Float32);
    const Tensor dw = hg::empty({4, 0, 3, 3}, opts), db = hg::full({4}, kNaN, opts);
    cops::conv_backward_weight(dy.to(kCuda), x, g, dw, db);
    const Problem p{"c0", 2, 0, 4, {5, 5}, {3, 3}, g};
    HG_CHECK_CLOSE(db.cpu(), ref_bias_grad(p, values(dy)));
  }
}

TEST_CASE("cudnn conv: bad tensors are Errors that name the op and the tensor", "[cuda][cudnn]") {
  const auto g = geometry(2, 1, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  const Tensor x = uniform({1, 2, 4, 4}, DType::Float32).to(kCuda), w = uniform({3, 2, 3, 3}, DType::Float32).to(kCuda);
  const Tensor y = hg::empty({1, 3, 2, 2}, TensorOptions(DType::Float32, kCuda));
  REQUIRE_THROWS_WITH(cops::conv_forward(x, w.to(DType::Float16), Tensor(), g, y),
                      Catch::Contains("conv_forward") && Catch::Contains("dtype"));
  REQUIRE_THROWS_WITH(cops::conv_forward(x.cpu(), w, Tensor(), g, y),
                      Catch::Contains("conv_forward") && Catch::Contains("not on a CUDA device"));
  REQUIRE_THROWS_WITH(cops::conv_forward(x, w, Tensor(), g, y.to(DType::Int64)), Catch::Contains("conv_forward"));
  // a view that is neither NC* nor channels-last dense: every other column
  const Tensor wide = uniform({1, 2, 4, 8}, DType::Float32).to(kCuda);
  const Tensor strided = wide.slice(3, 0, 8, 2);
  REQUIRE_THROWS_WITH(cops::conv_forward(strided, w, Tensor(), g, y),
                      Catch::Contains("neither dense") && Catch::Contains("contiguous"));
  // channels that do not fit the groups
  auto g2 = g;
  g2.groups = 2;
  REQUIRE_THROWS_WITH(cops::conv_forward(x, w, Tensor(), g2, y), Catch::Contains("groups"));
  REQUIRE_THROWS_WITH(cops::conv_forward(x, w, uniform({4}, DType::Float32).to(kCuda), g, y),
                      Catch::Contains("bias"));
}

#endif  // HALFGRAD_WITH_CUDA
