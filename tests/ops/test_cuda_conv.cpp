// Convolutions on a CUDA device against the CPU backend on the same values,
// through the public API: forward and backward (input, weight and bias
// gradients), float32/float16/bfloat16, MobileNetV3-small's layer shapes
// (3x3 stride-2 stem, depthwise 3x3/5x5 with groups = channels, 1x1
// pointwise), 1d/3d, dilation, "same", transposed with output_padding,
// non-contiguous inputs and autocast. Run only where a GPU is usable ("[cuda]").
// float32 is compared with TF32 off: cuDNN may use TF32 tensor cores for float32
// convolutions by default (cudnn_allow_tf32(), PyTorch's default), ~1e-3 off.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <string>
#include <vector>

#include <halfgrad/kernels/cuda/cudnn_conv.h>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::PaddingArg;
using hg::Shape;
using hg::SizeArg;
using hg::Tensor;
using hgtest::cuda::expect_same;
using hgtest::cuda::kCpu;
using hgtest::cuda::kCuda;
using hgtest::cuda::leaf_on;

namespace {

// Exact float32 for the comparison, put back afterwards (the settings are process-wide).
// Every convolution, 1x1 ones included, runs on cuDNN (cudnn_allow_tf32); the matmul
// setting is turned off too, so that a 1x1 convolution routed to cuBLASLt one day
// stays exact here.
struct ExactFloat32 {
  bool cudnn = hg::cudnn_allow_tf32();
  std::string matmul = hg::get_float32_matmul_precision();
  ExactFloat32() {
    hg::set_cudnn_allow_tf32(false);
    hg::set_float32_matmul_precision("highest");
  }
  ~ExactFloat32() {
    hg::set_cudnn_allow_tf32(cudnn);
    hg::set_float32_matmul_precision(matmul);
  }
};

struct Case {
  std::string name;
  int nd;
  Shape x, w;
  std::vector<int64_t> s, d;
  PaddingArg p;
  int64_t groups;
  bool bias;
  bool transposed = false;
  std::vector<int64_t> op = {0};
};

Tensor run(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const SizeArg s(c.s), d(c.d);
  if (c.transposed) {
    const SizeArg p = c.p.sizes(), op(c.op);
    if (c.nd == 1) return hg::conv_transpose1d(x, w, b, s, p, op, c.groups, d);
    if (c.nd == 2) return hg::conv_transpose2d(x, w, b, s, p, op, c.groups, d);
    return hg::conv_transpose3d(x, w, b, s, p, op, c.groups, d);
  }
  if (c.nd == 1) return hg::conv1d(x, w, b, s, c.p, d, c.groups);
  if (c.nd == 2) return hg::conv2d(x, w, b, s, c.p, d, c.groups);
  return hg::conv3d(x, w, b, s, c.p, d, c.groups);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {"stem 3x3 stride 2", 2, {4, 3, 32, 32}, {16, 3, 3, 3}, {2}, {1}, PaddingArg(1), 1, false},
      {"depthwise 3x3 stride 2", 2, {4, 16, 28, 28}, {16, 1, 3, 3}, {2}, {1}, PaddingArg(1), 16, false},
      {"depthwise 3x3", 2, {4, 72, 14, 14}, {72, 1, 3, 3}, {1}, {1}, PaddingArg(1), 72, false},
      {"depthwise 5x5 stride 2", 2, {2, 96, 14, 14}, {96, 1, 5, 5}, {2}, {1}, PaddingArg(2), 96, false},
      {"depthwise 5x5", 2, {2, 240, 7, 7}, {240, 1, 5, 5}, {1}, {1}, PaddingArg(2), 240, false},
      {"pointwise 16 -> 72", 2, {4, 16, 28, 28}, {72, 16, 1, 1}, {1}, {1}, PaddingArg(0), 1, false},
      {"pointwise 576 -> 1024 (the head, with bias)", 2, {2, 576, 1, 1}, {1024, 576, 1, 1}, {1}, {1}, PaddingArg(0), 1,
       true},
      {"squeeze-excite 1x1 with bias", 2, {4, 96, 1, 1}, {24, 96, 1, 1}, {1}, {1}, PaddingArg(0), 1, true},
      {"grouped, dilated, per-dim", 2, {2, 8, 13, 11}, {12, 4, 3, 2}, {2, 1}, {1, 2}, PaddingArg({1, 0}), 2, true},
      {"same even kernel", 2, {2, 4, 9, 9}, {4, 4, 4, 4}, {1}, {1}, PaddingArg("same"), 1, true},
      {"1d", 1, {3, 4, 33}, {6, 2, 5}, {2}, {2}, PaddingArg(2), 2, true},
      {"3d", 3, {2, 4, 6, 7, 8}, {8, 4, 3, 3, 3}, {1, 2, 2}, {1}, PaddingArg(1), 1, true},
      {"transposed 2d output_padding", 2, {2, 8, 7, 7}, {8, 4, 3, 3}, {2}, {1}, PaddingArg(1), 2, true, true, {1}},
      {"transposed 1d op >= stride", 1, {2, 4, 9}, {4, 3, 3}, {1}, {2}, PaddingArg(0), 1, true, true, {1}},
      {"transposed 3d", 3, {1, 4, 3, 4, 4}, {4, 2, 2, 3, 3}, {2, 1, 2}, {1}, PaddingArg(1), 1, true, true, {1, 0, 1}},
  };
  return cs;
}

}  // namespace

TEST_CASE("cuda conv: forward and backward match the CPU", "[cuda][conv]") {
  ExactFloat32 exact;
  REQUIRE_FALSE(hg::cudnn_allow_tf32());  // asked, not assumed: the library's own answer
  REQUIRE_FALSE(hg::float32_matmul_allows_tf32());
  for (const Case& c : cases()) {
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      INFO(c.name << " " << hgtest::dname(dt));
      const Tensor x = hgtest::uniform(c.x, dt), w = hgtest::uniform(c.w, dt, -1, 1);
      const int64_t c_out = c.transposed ? c.w[1] * c.groups : c.w[0];
      const Tensor b = c.bias ? hgtest::uniform({c_out}, dt) : Tensor();
      Tensor xc = leaf_on(x, kCpu), wc = leaf_on(w, kCpu), bc = b.defined() ? leaf_on(b, kCpu) : Tensor();
      Tensor xg = leaf_on(x, kCuda), wg = leaf_on(w, kCuda), bg = b.defined() ? leaf_on(b, kCuda) : Tensor();
      const Tensor yc = run(c, xc, wc, bc), yg = run(c, xg, wg, bg);
      expect_same(yg, yc, "forward");
      const Tensor v = hgtest::uniform(yc.shape(), dt);
      yc.backward(v);
      yg.backward(v.to(kCuda));
      // gradients sum over many products: allow twice the dtype's tolerance
      expect_same(xg.grad(), xc.grad(), "grad input", false, 2 * hgtest::tol(dt));
      expect_same(wg.grad(), wc.grad(), "grad weight", false, 2 * hgtest::tol(dt));
      if (b.defined()) expect_same(bg.grad(), bc.grad(), "grad bias", false, 2 * hgtest::tol(dt));
    }
  }
}

// output_padding >= stride (legal while < dilation): the convolution behind it has
// negative padding, which cuDNN rejects; the backend runs on the part of the output
// that inputs reach, and the rest gets the bias only, as on the CPU.
TEST_CASE("cuda conv_transpose with output_padding >= stride crops instead of padding negatively", "[cuda][conv]") {
  ExactFloat32 exact;
  const Tensor x = hgtest::uniform({2, 4, 9}, DType::Float32), w = hgtest::uniform({4, 3, 3}, DType::Float32, -1, 1);
  const Tensor b = hgtest::uniform({3}, DType::Float32);
  Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda), wc = leaf_on(w, kCpu), wg = leaf_on(w, kCuda);
#if defined(HALFGRAD_WITH_CUDA)  // the backend's counters exist only in a CUDA build
  hg::kernels::cuda::reset_conv_plan_counts();
#endif
  const Tensor yc = hg::conv_transpose1d(xc, wc, b, 1, 0, 1, 1, 2);
  const Tensor yg = hg::conv_transpose1d(xg, wg, b.to(kCuda), 1, 0, 1, 1, 2);
#if defined(HALFGRAD_WITH_CUDA)
  CHECK(hg::kernels::cuda::conv_plan_counts().cropped >= 1);
#endif
  REQUIRE(yg.shape() == Shape{2, 3, 14});
  expect_same(yg, yc, "forward");
  // the last position is reached by no input: the bias alone
  expect_same(yg.narrow(2, 13, 1), b.view({1, 3, 1}).expand({2, 3, 1}).contiguous(), "the unreached tail");
  const Tensor v = hgtest::uniform(yc.shape(), DType::Float32);
  yc.backward(v);
  yg.backward(v.to(kCuda));
  expect_same(xg.grad(), xc.grad(), "grad input", false, 2e-5);
  expect_same(wg.grad(), wc.grad(), "grad weight", false, 2e-5);
}

TEST_CASE("cuda conv: non-contiguous and unbatched inputs, weight gradient only", "[cuda][conv]") {
  const Tensor base = hgtest::uniform({2, 10, 6, 12}, DType::Float32);  // [N, H, C, W]
  const Tensor x = base.permute({0, 2, 1, 3}).narrow(3, 1, 10);         // [2, 6, 10, 10], strided
  const Tensor w = hgtest::uniform({6, 1, 3, 3}, DType::Float32);
  Tensor wc = leaf_on(w, kCpu), wg = leaf_on(w, kCuda);
  const Tensor xg = base.to(kCuda).permute({0, 2, 1, 3}).narrow(3, 1, 10);
  REQUIRE_FALSE(xg.is_contiguous());
  const Tensor yc = hg::conv2d(x, wc, {}, 1, 1, 1, 6), yg = hg::conv2d(xg, wg, {}, 1, 1, 1, 6);
  expect_same(yg, yc, "depthwise on a strided view");
  hg::sum(yc).backward();
  hg::sum(yg).backward();
  expect_same(wg.grad(), wc.grad(), "weight grad", false, 2e-5);
  const Tensor u = hgtest::uniform({3, 8, 8}, DType::Float32), wu = hgtest::uniform({5, 3, 3, 3}, DType::Float32);
  expect_same(hg::conv2d(u.to(kCuda), wu.to(kCuda), {}, 2, 1), hg::conv2d(u, wu, {}, 2, 1), "unbatched");
}

TEST_CASE("cuda conv under autocast: float16 output, float32 weight gradient", "[cuda][conv][amp]") {
  const Tensor x = hgtest::uniform({2, 16, 14, 14}, DType::Float32).to(kCuda);
  Tensor w = leaf_on(hgtest::uniform({16, 1, 3, 3}, DType::Float32), kCuda);
  Tensor y;
  {
    hg::amp::autocast region(hg::DeviceType::CUDA);
    y = hg::conv2d(x, w, {}, 1, 1, 1, 16);
  }
  CHECK(y.dtype() == DType::Float16);
  hg::sum(y.to(DType::Float32)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::Float32);
  const Tensor yc = hg::conv2d(x.cpu().to(DType::Float16), w.detach().cpu().to(DType::Float16), {}, 1, 1, 1, 16);
  expect_same(y, yc, "autocast forward");
}
