// The cuBLASLt GEMM layer (kernels/cuda/gemm.h) on a CUDA device, against float64
// references built from the same rounded inputs: every dtype, transposed,
// padded and strided operands, shared (stride-0) batches, bias and beta, TF32
// off by default; the Linear epilogues (bias, ReLU, exact and tanh GELU, with
// and without the aux buffers backward needs) fused and unfused; the backward
// with the bias-gradient and dReLU/dGELU epilogues; and mm / bmm / matmul /
// addmm / linear through the public API against the CPU backend.
// Built only with the CUDA backend; without a usable GPU the [cuda] cases are
// reported skipped.
#include "test_util.h"

#if defined(HALFGRAD_WITH_CUDA)

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include <halfgrad.h>

#include <halfgrad/core/alias.h>
#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/kernels/cuda/gemm.h>
#include <halfgrad/kernels/kernels.h>

namespace hg = halfgrad;
namespace cops = halfgrad::kernels::cuda;
using namespace hgtest;

namespace {

const hg::Device kCuda = hg::Device::cuda();

Tensor dev(const Tensor& t) { return t.to(kCuda); }

// Settings are process-wide: every test puts them back.
struct PrecisionGuard {
  std::string saved = hg::get_float32_matmul_precision();
  ~PrecisionGuard() { hg::set_float32_matmul_precision(saved); }
};
struct FusionGuard {
  bool saved = cops::epilogue_fusion();
  explicit FusionGuard(bool on) { cops::set_epilogue_fusion(on); }
  ~FusionGuard() { cops::set_epilogue_fusion(saved); }
};
// cuBLASLt's RELU epilogues (NaN -> 0) are off by default; the mask exists only with them.
struct ReluFusionGuard {
  bool saved = cops::relu_epilogue_fusion();
  explicit ReluFusionGuard(bool on) { cops::set_relu_epilogue_fusion(on); }
  ~ReluFusionGuard() { cops::set_relu_epilogue_fusion(saved); }
};

// ---- operands in a given memory layout, the same on the host and the device -------------------
enum class Layout {
  RowMajor,     // contiguous
  Transposed,   // stored [cols, rows]: row stride 1 (CUBLAS_OP_T, no copy)
  Padded,       // rows of cols + 5 elements: a leading dimension larger than the width
  ColStride2,   // column stride 2: cuBLASLt cannot read it, the layer copies it first
  SharedBatch,  // one matrix for the whole batch (batch stride 0)
};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::RowMajor: return "row-major";
    case Layout::Transposed: return "transposed";
    case Layout::Padded: return "padded";
    case Layout::ColStride2: return "column stride 2";
    case Layout::SharedBatch: return "shared batch";
  }
  return "?";
}

struct Pair {
  Tensor cpu, gpu;  // the same logical values and geometry
};

// A [batch, rows, cols] (batch == 0: [rows, cols]) operand stored as `layout`.
Pair operand(int64_t batch, int64_t rows, int64_t cols, Layout layout, DType dt, double lo = -1, double hi = 1) {
  const bool b3 = batch > 0;
  const int64_t nb = b3 ? batch : 1;
  Shape shape = b3 ? Shape{batch, rows, cols} : Shape{rows, cols};
  Shape stored, strides;
  switch (layout) {
    case Layout::RowMajor:
      stored = {nb * rows * cols};
      strides = b3 ? Shape{rows * cols, cols, 1} : Shape{cols, 1};
      break;
    case Layout::Transposed:
      stored = {nb * rows * cols};
      strides = b3 ? Shape{rows * cols, 1, rows} : Shape{1, rows};
      break;
    case Layout::Padded:  // each matrix padded by 7 elements too: the batch stride below
      stored = {nb * (rows * (cols + 5) + 7)};
      strides = b3 ? Shape{rows * (cols + 5) + 7, cols + 5, 1} : Shape{cols + 5, 1};
      break;
    case Layout::ColStride2:
      stored = {nb * rows * cols * 2};
      strides = b3 ? Shape{rows * cols * 2, cols * 2, 2} : Shape{cols * 2, 2};
      break;
    case Layout::SharedBatch:
      REQUIRE(b3);
      stored = {rows * cols};
      strides = {0, cols, 1};
      break;
  }
  const Tensor base = uniform(stored, dt, lo, hi);
  const Tensor gpu_base = dev(base);
  return {hg::alias_with(base, shape, strides, 0), hg::alias_with(gpu_base, shape, strides, 0)};
}

// out[b] = a[b] @ b[b] (+ bias) (+ beta * c0[b]) in float64, from logical values.
std::vector<double> ref_gemm(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor(), double beta = 0,
                             const std::vector<double>& c0 = {}) {
  const bool b3 = a.dim() == 3;
  const int64_t batch = b3 ? a.shape()[0] : 1, m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1],
                n = b.shape()[b.dim() - 1];
  const auto av = values(a), bv = values(b);
  const auto biasv = bias.defined() ? values(bias) : std::vector<double>(static_cast<size_t>(n), 0.0);
  std::vector<double> out(static_cast<size_t>(batch * m * n));
  for (int64_t e = 0; e < batch; ++e) {
    const std::vector<double> as(av.begin() + e * m * k, av.begin() + (e + 1) * m * k);
    const std::vector<double> bs(bv.begin() + e * k * n, bv.begin() + (e + 1) * k * n);
    const auto r = matmul2d(as, bs, m, k, n);
    for (int64_t i = 0; i < m * n; ++i) {
      const size_t o = static_cast<size_t>(e * m * n + i);
      out[o] = r[static_cast<size_t>(i)] + biasv[static_cast<size_t>(i % n)] + (beta != 0 ? beta * c0[o] : 0.0);
    }
  }
  return out;
}

Tensor empty_cuda(const Shape& shape, DType dt) { return hg::make_tensor(shape, TensorOptions(dt, kCuda)); }

// ---- activations in float64 ----------------------------------------------------------------------
constexpr double kSqrt2OverPi = 0.79788456080286535588, kKappa = 0.044715;

double act_ref(cops::Epilogue e, double z) {
  switch (e) {
    case cops::Epilogue::BiasRelu: return z > 0 ? z : 0;
    case cops::Epilogue::BiasGelu: return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    case cops::Epilogue::BiasGeluTanh: return 0.5 * z * (1 + std::tanh(kSqrt2OverPi * (z + kKappa * z * z * z)));
    default: return z;
  }
}

// d act / dz; ReLU takes the output y (y > 0), as the layer does.
double act_grad_ref(cops::Epilogue e, double s) {
  switch (e) {
    case cops::Epilogue::BiasRelu: return s > 0 ? 1 : 0;
    case cops::Epilogue::BiasGelu:
      return 0.5 * (1 + std::erf(s / std::sqrt(2.0))) + s * std::exp(-0.5 * s * s) * 0.39894228040143267794;
    case cops::Epilogue::BiasGeluTanh: {
      const double t = std::tanh(kSqrt2OverPi * (s + kKappa * s * s * s));
      return 0.5 * (1 + t) + 0.5 * s * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kKappa * s * s);
    }
    default: return 1;
  }
}

const char* epi_name(cops::Epilogue e) {
  switch (e) {
    case cops::Epilogue::None: return "None";
    case cops::Epilogue::Bias: return "Bias";
    case cops::Epilogue::BiasRelu: return "BiasRelu";
    case cops::Epilogue::BiasGelu: return "BiasGelu";
    case cops::Epilogue::BiasGeluTanh: return "BiasGeluTanh";
  }
  return "?";
}

// cuBLASLt's tanh GELU may use the hardware tanh approximation (~2^-11
// relative): float32 cannot meet 1e-5 there.
double act_tol(cops::Epilogue e, DType dt) {
  return e == cops::Epilogue::BiasGeluTanh ? std::max(tol(dt), 1e-3) : tol(dt);
}

// z = x w^T + b in float64 ([N, out], row-major).
std::vector<double> ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return ref_gemm(x, w.t(), b);
}

// m^T @ v for row-major m [r, c] and v [r, d]: [c, d].
std::vector<double> ref_tn(const std::vector<double>& m, const std::vector<double>& v, int64_t r, int64_t c,
                           int64_t d) {
  std::vector<double> out(static_cast<size_t>(c * d), 0.0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t p = 0; p < d; ++p)
        out[static_cast<size_t>(j * d + p)] += m[static_cast<size_t>(i * c + j)] * v[static_cast<size_t>(i * d + p)];
  return out;
}

std::vector<double> col_sums(const std::vector<double>& m, int64_t r, int64_t c) {
  std::vector<double> out(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[static_cast<size_t>(j)] += m[static_cast<size_t>(i * c + j)];
  return out;
}

// A [rows, cols] device view with row stride ld >= cols (a padded aux buffer),
// and the host copy of its storage to read it back.
Tensor padded_cuda(int64_t rows, int64_t cols, int64_t ld, DType dt) {
  return hg::alias_with(empty_cuda({rows * ld}, dt), {rows, cols}, {ld, 1}, 0);
}
Tensor read_back(const Tensor& view) {  // any device view whose storage starts at offset 0
  const int64_t n = static_cast<int64_t>(view.storage()->nbytes / hg::itemsize(view.dtype()));
  const Tensor flat = hg::alias_with(view, {n}, {1}, 0).cpu();
  return hg::alias_with(flat, view.shape(), view.strides(), view.offset());
}

}  // namespace

// =============================================================================================
// Settings (no GPU needed)

TEST_CASE("float32 matmul precision takes PyTorch's names and rejects others", "[gemm]") {
  PrecisionGuard guard;
  CHECK(hg::get_float32_matmul_precision() == "highest");  // the default: exact float32
  hg::set_float32_matmul_precision("high");
  CHECK(hg::get_float32_matmul_precision() == "high");
  hg::set_float32_matmul_precision("medium");
  CHECK(hg::get_float32_matmul_precision() == "medium");
  hg::set_float32_matmul_precision("highest");
  CHECK(hg::get_float32_matmul_precision() == "highest");
  REQUIRE_THROWS_AS(hg::set_float32_matmul_precision("tf32"), hg::Error);
  REQUIRE_THROWS_WITH(hg::set_float32_matmul_precision("fast"), Catch::Contains("highest"));
  CHECK(hg::get_float32_matmul_precision() == "highest");  // a rejected name changes nothing
}

// =============================================================================================
// kernels::cuda::gemm

TEST_CASE("cuda gemm matches float64 for every dtype and operand layout", "[cuda][gemm]") {
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {Layout::RowMajor, Layout::RowMajor},     {Layout::Transposed, Layout::RowMajor},
      {Layout::RowMajor, Layout::Transposed},   {Layout::Transposed, Layout::Transposed},
      {Layout::Padded, Layout::Transposed},     {Layout::ColStride2, Layout::RowMajor},
      {Layout::RowMajor, Layout::ColStride2}};
  // odd sizes (unaligned rows), aligned sizes, and vectors (m or n == 1, k == 1)
  const std::vector<std::array<int64_t, 3>> sizes = {{37, 29, 23}, {64, 48, 32}, {1, 17, 9}, {9, 17, 1}, {5, 1, 7}};
  for (DType dt : kFloatDTypes)
    for (const auto& [la, lb] : layouts)
      for (const auto& [m, k, n] : sizes) {
        INFO(dname(dt) << " a " << layout_name(la) << ", b " << layout_name(lb) << ", m k n " << m << " " << k << " "
                       << n);
        const Pair a = operand(0, m, k, la, dt), b = operand(0, k, n, lb, dt);
        Tensor out = empty_cuda({m, n}, dt);
        cops::gemm(a.gpu, b.gpu, out, Tensor(), 0.f);
        HG_CHECK_CLOSE(out.cpu(), ref_gemm(a.cpu, b.cpu));
      }
}

TEST_CASE("cuda gemm batched with per-batch and shared operands", "[cuda][gemm]") {
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {Layout::RowMajor, Layout::RowMajor},    {Layout::Transposed, Layout::Transposed},
      {Layout::SharedBatch, Layout::RowMajor}, {Layout::RowMajor, Layout::SharedBatch},
      {Layout::Padded, Layout::Transposed},    {Layout::ColStride2, Layout::SharedBatch}};
  for (DType dt : kFloatDTypes)
    for (const auto& [la, lb] : layouts) {
      INFO(dname(dt) << " a " << layout_name(la) << ", b " << layout_name(lb));
      const int64_t batch = 5, m = 19, k = 24, n = 13;
      const Pair a = operand(batch, m, k, la, dt), b = operand(batch, k, n, lb, dt);
      Tensor out = empty_cuda({batch, m, n}, dt);
      cops::gemm(a.gpu, b.gpu, out, Tensor(), 0.f);
      HG_CHECK_CLOSE(out.cpu(), ref_gemm(a.cpu, b.cpu));
    }
}

TEST_CASE("cuda gemm adds the bias and beta times the old output", "[cuda][gemm]") {
  for (DType dt : kFloatDTypes)
    for (bool fused : {true, false})
      for (int batch : {0, 3}) {
        INFO(dname(dt) << (fused ? " fused" : " unfused") << " batch " << batch);
        FusionGuard fusion(fused);
        const int64_t m = 21, k = 40, n = 16;
        const Pair a = operand(batch, m, k, Layout::RowMajor, dt), b = operand(batch, k, n, Layout::Transposed, dt);
        const Tensor bias = uniform({n}, dt);
        const Shape out_shape = batch ? Shape{batch, m, n} : Shape{m, n};
        {
          INFO("bias");
          Tensor out = empty_cuda(out_shape, dt);
          cops::gemm(a.gpu, b.gpu, out, dev(bias), 0.f);
          HG_CHECK_CLOSE(out.cpu(), ref_gemm(a.cpu, b.cpu, bias));
        }
        const Tensor c0 = uniform(out_shape, dt);
        {
          INFO("beta = 1 (accumulate)");
          Tensor out = dev(c0);
          cops::gemm(a.gpu, b.gpu, out, Tensor(), 1.f);
          HG_CHECK_CLOSE(out.cpu(), ref_gemm(a.cpu, b.cpu, Tensor(), 1.0, values(c0)));
        }
        {
          INFO("bias and beta = 0.5 together");
          Tensor out = dev(c0);
          cops::gemm(a.gpu, b.gpu, out, dev(bias), 0.5f);
          HG_CHECK_CLOSE(out.cpu(), ref_gemm(a.cpu, b.cpu, bias, 0.5, values(c0)));
        }
      }
}

TEST_CASE("cuda gemm with k equal to 0 gives bias plus beta times out, and empty shapes do nothing", "[cuda][gemm]") {
  for (DType dt : kFloatDTypes) {
    INFO(dname(dt));
    const Tensor a = empty_cuda({4, 0}, dt), b = empty_cuda({0, 3}, dt);
    const Tensor bias = uniform({3}, dt), c0 = uniform({4, 3}, dt);
    Tensor out = empty_cuda({4, 3}, dt);
    cops::gemm(a, b, out, Tensor(), 0.f);
    HG_CHECK_EXACT(out.cpu(), std::vector<double>(12, 0.0));
    out = dev(c0);
    cops::gemm(a, b, out, dev(bias), 2.f);
    std::vector<double> ref = values(c0);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = round_to(2 * ref[i] + values(bias)[i % 3], dt);
    HG_CHECK_CLOSE(out.cpu(), ref);
    Tensor none = empty_cuda({0, 3}, dt);
    cops::gemm(empty_cuda({0, 5}, dt), dev(uniform({5, 3}, dt)), none, Tensor(), 0.f);  // must not throw
  }
}

TEST_CASE("cuda float32 gemm is exact float32 by default and uses TF32 only when asked", "[cuda][gemm]") {
  PrecisionGuard guard;
  const Pair a = operand(0, 256, 512, Layout::RowMajor, DType::Float32);
  const Pair b = operand(0, 512, 192, Layout::Transposed, DType::Float32);
  const auto ref = ref_gemm(a.cpu, b.cpu);
  Tensor out = empty_cuda({256, 192}, DType::Float32);
  REQUIRE(hg::get_float32_matmul_precision() == "highest");
  cops::gemm(a.gpu, b.gpu, out, Tensor(), 0.f);
  HG_CHECK_CLOSE_TOL(out.cpu(), ref, 1e-5);  // TF32 would be ~1e-4..1e-3 here

  hg::set_float32_matmul_precision("high");
  cops::gemm(a.gpu, b.gpu, out, Tensor(), 0.f);
  const Compare tf32 = compare(out.cpu(), ref, 5e-3);
  INFO(tf32.msg);
  CHECK(tf32.ok);  // TF32 is still close
  // Whether TF32 really ran (10-bit mantissas: an error well above float32's) is the
  // device's: tensor cores with TF32 exist from compute capability 8.0 (Ampere) on, and
  // cuBLASLt's heuristic reports no math mode, so the device is what is asked. Before
  // sm_80 there is no TF32 to see (and the build targets sm_90 and up: DESIGN.md 5).
  cudaDeviceProp prop{};
  HG_CUDA_CHECK(cudaGetDeviceProperties(&prop, kCuda.index()));
  INFO("compute capability " << prop.major << "." << prop.minor);
  if (prop.major >= 8) CHECK(tf32.err > 1e-6);
  else WARN("compute capability " << prop.major << "." << prop.minor << ": no TF32, error " << tf32.err);

  hg::set_float32_matmul_precision("highest");  // and back: exact again (the plan cache keys on it)
  cops::gemm(a.gpu, b.gpu, out, Tensor(), 0.f);
  HG_CHECK_CLOSE_TOL(out.cpu(), ref, 1e-5);
}

TEST_CASE("cuda gemm rejects bad arguments with a clear error", "[cuda][gemm]") {
  const Tensor a = dev(uniform({4, 5}, DType::Float32)), b = dev(uniform({5, 3}, DType::Float32));
  Tensor out = empty_cuda({4, 3}, DType::Float32);
  REQUIRE_THROWS_WITH(cops::gemm(a, dev(uniform({5, 3}, DType::Float16)), out, Tensor(), 0.f),
                      Catch::Contains("float16") && Catch::Contains("gemm"));
  REQUIRE_THROWS_AS(cops::gemm(a, uniform({5, 3}, DType::Float32), out, Tensor(), 0.f), hg::Error);  // host b
  REQUIRE_THROWS_AS(cops::gemm(a, dev(uniform({6, 3}, DType::Float32)), out, Tensor(), 0.f), hg::Error);
  REQUIRE_THROWS_AS(cops::gemm(a, b, out, dev(uniform({4}, DType::Float32)), 0.f), hg::Error);  // bias != n
  const Tensor strided_out = hg::alias_with(empty_cuda({24}, DType::Float32), {4, 3}, {1, 4}, 0);
  REQUIRE_THROWS_WITH(cops::gemm(a, b, strided_out, Tensor(), 0.f), Catch::Contains("contiguous"));
}

// =============================================================================================
// linear_forward

namespace {
// Whether cuBLASLt has a ReLU-mask (RELU_AUX) kernel for a dtype and shape is asked of
// the library (cops::relu_mask_epilogue_available, cuBLASLt's heuristic), never
// assumed: the first GPU run found one for float64 where an older cuBLAS had none.

// sum_k |x_k w_jk| + |b_j| per element of z = x w^T + b: the scale of z's rounding errors.
std::vector<double> ref_linear_abs(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t n = x.shape()[0], in = x.shape()[1], features = w.shape()[0];
  const auto xv = values(x), wv = values(w);
  const auto bv = b.defined() ? values(b) : std::vector<double>(static_cast<size_t>(features), 0.0);
  std::vector<double> out(static_cast<size_t>(n * features));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < features; ++j) {
      double a = std::fabs(bv[static_cast<size_t>(j)]);
      for (int64_t k = 0; k < in; ++k)
        a += std::fabs(xv[static_cast<size_t>(i * in + k)] * wv[static_cast<size_t>(j * in + k)]);
      out[static_cast<size_t>(i * features + j)] = a;
    }
  return out;
}


// The mask of a [rows, features] activation y, decoded by cuBLASLt itself: the DRELU
// epilogue of dx = ones @ I (one GEMM, k = features) gives mask ? 1 : 0 per element,
// whatever the mask's private bit order. No input.output is passed, so a missing DRELU
// kernel is an Error rather than a silent fallback to y.
std::vector<double> decode_mask(const Tensor& mask, const Tensor& y) {
  const int64_t rows = y.shape()[0], features = y.shape()[1];
  const DType dt = y.dtype();
  std::vector<double> eye(static_cast<size_t>(features * features), 0.0);
  for (int64_t i = 0; i < features; ++i) eye[static_cast<size_t>(i * features + i)] = 1.0;
  const Tensor ones = dev(make(std::vector<double>(static_cast<size_t>(rows * features), 1.0), {rows, features}, dt));
  const Tensor identity = dev(make(eye, {features, features}, dt));
  Tensor bits = empty_cuda({rows, features}, dt);
  cops::linear_backward_epilogue(ones, y, identity, cops::Epilogue::None, Tensor(), bits, Tensor(), Tensor(),
                                 cops::InputActivation{cops::Epilogue::BiasRelu, mask, Tensor()});
  return values(bits.cpu());
}

// relu'(z) as the mask should hold it: y > 0 (y = relu(z)).
std::vector<double> positives(const Tensor& y) {
  std::vector<double> v = values(y.cpu());
  for (auto& e : v) e = e > 0 ? 1.0 : 0.0;
  return v;
}
}  // namespace

TEST_CASE("cuda linear_forward applies bias and activation in every dtype, fused and unfused", "[cuda][linear]") {
  using E = cops::Epilogue;
  for (DType dt : kFloatDTypes)
    for (bool fused : {true, false})
      for (E epi : {E::None, E::Bias, E::BiasRelu, E::BiasGelu, E::BiasGeluTanh})
        for (bool with_bias : {true, false})
          for (int64_t features : {24, 20}) {  // 24: GELU aux leading dim a multiple of 8; 20: not
            if (epi == E::Bias && !with_bias) continue;
            INFO(dname(dt) << (fused ? " fused " : " unfused ") << epi_name(epi) << (with_bias ? " bias" : " no bias")
                           << " out_features " << features);
            FusionGuard fusion(fused);
            const int64_t n = 33, in = 40;
            const Tensor x = uniform({n, in}, dt, -1, 1), w = uniform({features, in}, dt, -0.3, 0.3);
            const Tensor b = with_bias ? uniform({features}, dt, -0.5, 0.5) : Tensor();
            const auto z = ref_linear(x, w, b);
            std::vector<double> y = z;
            for (auto& v : y) v = act_ref(epi, v);
            const Tensor xg = dev(x), wg = dev(w), bg = with_bias ? dev(b) : Tensor();

            Tensor out = empty_cuda({n, features}, dt);
            cops::linear_forward(xg, wg, bg, epi, out, Tensor());
            HG_CHECK_CLOSE_TOL(out.cpu(), y, act_tol(epi, dt));
            if (epi == E::None || epi == E::Bias) continue;

            // With z saved for backward: contiguous, and with a padded leading dim (32: a multiple of 8)
            for (int64_t ld : {features, int64_t{32}}) {
              INFO("aux z with leading dim " << ld);
              Tensor aux = padded_cuda(n, features, ld, dt);
              Tensor out2 = empty_cuda({n, features}, dt);
              cops::linear_forward(xg, wg, bg, epi, out2, aux);
              HG_CHECK_CLOSE_TOL(out2.cpu(), y, act_tol(epi, dt));
              HG_CHECK_CLOSE(read_back(aux), z);
            }
            if (epi == E::BiasRelu && fused) {
              INFO("ReLU mask");
              {  // by default cuBLASLt's RELU does not run (it maps NaN to 0): no mask, y right
                Tensor mask = cops::make_relu_mask(n, features, kCuda);
                Tensor out3 = empty_cuda({n, features}, dt);
                CHECK_FALSE(cops::linear_forward(xg, wg, bg, epi, out3, mask));
                HG_CHECK_CLOSE(out3.cpu(), y);
              }
              ReluFusionGuard relu_fusion(true);
              Tensor mask = cops::make_relu_mask(n, features, kCuda);
              Tensor out3 = empty_cuda({n, features}, dt);
              const bool available = cops::relu_mask_epilogue_available(xg, wg, bg, out3, mask);
              const bool wrote = cops::linear_forward(xg, wg, bg, epi, out3, mask);
              HG_CHECK_CLOSE(out3.cpu(), y);  // y is right either way
              // Written exactly where cuBLASLt has a RELU_AUX kernel; otherwise backward
              // must read y (the case "where linear_forward writes no ReLU mask" below).
              CHECK(wrote == available);
              if (wrote) {
                // The mask is relu'(z) of the y written: y > 0. Except where the kernel's z is
                // exactly 0 (y = 0, mask 1: cuBLASLt's relu'(0) = 1): on the H200 a bfloat16
                // RELU_AUX_BIAS kernel rounded x w^T to bfloat16 before adding the bias, so a
                // true z within that rounding of 0 can be 0 there. Those are not compared.
                const auto bits = decode_mask(mask, out3), pos = positives(out3);
                const auto scale = ref_linear_abs(x, w, b);
                const double u = unit_roundoff(dt), u_acc = dt == DType::Float64 ? 0x1p-53 : 0x1p-24;
                int64_t compared = 0, mismatched = 0;
                for (size_t i = 0; i < bits.size(); ++i) {
                  if (std::fabs(z[i]) <= (2 * u + static_cast<double>(in) * u_acc) * scale[i]) continue;
                  ++compared;
                  if (bits[i] != pos[i]) {
                    ++mismatched;
                    UNSCOPED_INFO("mask " << bits[i] << " but y " << values(out3.cpu())[i] << " at " << i);
                  }
                }
                CHECK(mismatched == 0);
                CHECK(compared > static_cast<int64_t>(bits.size()) / 2);
              }
            }
          }
}

// z = x w^T + b rounds once on the default paths (the BIAS epilogue; fusion off or no
// fused kernel: the plain GEMM with the bias in C), as on the CPU and in PyTorch: each
// output is z rounded to the dtype, but where float32 accumulation in another order
// could tip z across a rounding midpoint. Rounding the product before adding the bias
// (the unfused path until the first GPU run) misses in a few percent of the half-type
// elements, and near z = 0 flips ReLU's derivative. cuBLASLt's own ReLU epilogues
// (opt-in: set_relu_epilogue_fusion) are measured and reported, not required: whether
// they round once is its kernels' business (docs/numerics.md).
TEST_CASE("cuda linear_forward rounds x w^T + b once", "[cuda][linear]") {
  using E = cops::Epilogue;
  struct Dims {
    int64_t n, in, features;
  };
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (const Dims& d : {Dims{33, 40, 20}, Dims{64, 64, 64}, Dims{40, 24, 32}}) {
      INFO(dname(dt) << " [" << d.n << ", " << d.in << "] -> " << d.features);
      const Tensor x = uniform({d.n, d.in}, dt, -1, 1), w = uniform({d.features, d.in}, dt, -0.3, 0.3);
      const Tensor b = uniform({d.features}, dt, -0.5, 0.5);
      const Tensor xg = dev(x), wg = dev(w), bg = dev(b);
      const auto z = ref_linear(x, w, b), scale = ref_linear_abs(x, w, b);
      const Shape shape{d.n, d.features};
      std::vector<double> lo(z.size()), hi(z.size());
      for (size_t i = 0; i < z.size(); ++i) {
        const double slack = 2 * static_cast<double>(d.in) * 0x1p-24 * scale[i];
        lo[i] = z[i] - slack, hi[i] = z[i] + slack;
      }
      const auto once = values(make(z, shape, dt)), lo_r = values(make(lo, shape, dt)), hi_r = values(make(hi, shape, dt));
      // Elements off the once-rounded z (after `act`), where that rounding is not in doubt.
      const auto misses = [&](const Tensor& out, bool relu) {
        const auto got = values(out.cpu());
        int64_t n = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (lo_r[i] != hi_r[i]) continue;
          const double want = relu ? (once[i] > 0 ? once[i] : 0.0) : once[i];
          n += got[i] != want;
        }
        return n;
      };
      for (bool fused : {true, false}) {
        INFO((fused ? "fused" : "unfused"));
        FusionGuard fusion(fused);
        Tensor y = empty_cuda(shape, dt);
        cops::linear_forward(xg, wg, bg, E::Bias, y, Tensor());
        CHECK(misses(y, false) == 0);
        cops::linear_forward(xg, wg, bg, E::BiasRelu, y, Tensor());  // BIAS, then our ReLU pass
        CHECK(misses(y, true) == 0);
        cops::gemm(xg, wg.t(), y, bg, 0.f);  // a transposed view: no copy
        CHECK(misses(y, false) == 0);
      }
      {
        FusionGuard fusion(true);
        ReluFusionGuard relu_fusion(true);
        Tensor y = empty_cuda(shape, dt);
        cops::linear_forward(xg, wg, bg, E::BiasRelu, y, Tensor());  // RELU_BIAS
        const int64_t relu_bias = misses(y, true);
        const bool mask = cops::linear_forward(xg, wg, bg, E::BiasRelu, y, cops::make_relu_mask(d.n, d.features, kCuda));
        const int64_t relu_aux_bias = misses(y, true);
        WARN(dname(dt) << " [" << d.n << ", " << d.in << "] -> " << d.features << ": cuBLASLt RELU_BIAS misses "
                       << relu_bias << ", " << (mask ? "RELU_AUX_BIAS" : "(no mask kernel) fallback") << " misses "
                       << relu_aux_bias << " of " << z.size() << " once-rounded outputs");
      }
    }
}

namespace {
// z (float64, row-major) rounded once to dt, and which elements that rounding is not in
// doubt for: float32 sums in another order move z by at most 2 * k * 2^-24 * scale
// (scale: the sum of |terms|, ref_linear_abs), as in the case above.
struct OnceRounded {
  std::vector<double> once;
  std::vector<bool> sure;
  OnceRounded(const std::vector<double>& z, const std::vector<double>& scale, int64_t k, const Shape& shape,
              DType dt) {
    std::vector<double> lo(z.size()), hi(z.size());
    for (size_t i = 0; i < z.size(); ++i) {
      const double slack = 2 * static_cast<double>(k) * 0x1p-24 * scale[i];
      lo[i] = z[i] - slack, hi[i] = z[i] + slack;
    }
    once = values(make(z, shape, dt));
    const auto lo_r = values(make(lo, shape, dt)), hi_r = values(make(hi, shape, dt));
    sure.resize(z.size());
    for (size_t i = 0; i < z.size(); ++i) sure[i] = lo_r[i] == hi_r[i];
  }
  // Elements of out (on any device) off the once-rounded z, where that rounding is sure.
  int64_t misses(const Tensor& out) const {
    const auto got = values(out.cpu());
    REQUIRE(got.size() == once.size());
    int64_t n = 0;
    for (size_t i = 0; i < got.size(); ++i) n += sure[i] && got[i] != once[i];
    return n;
  }
  int64_t compared() const { return static_cast<int64_t>(std::count(sure.begin(), sure.end(), true)); }
};
}  // namespace

// addmm(bias, a, b) with beta = alpha = 1 on CUDA gives the bias to the GEMM (kernels::cuda::gemm's
// bias, as linear), so a @ b + bias rounds once in float16/bfloat16, fused (cuBLASLt's BIAS) or
// not (float32 sums, the bias, one rounding). Until this case it copied the bias into the output
// and ran the GEMM with beta = 1: the pattern that rounded twice on the H200. Every bias shape
// that is one row: [n], [1, n], [1] and a scalar.
TEST_CASE("cuda addmm rounds a @ b + bias once", "[cuda][gemm][addmm]") {
  struct Dims {
    int64_t n, in, features;
  };
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (const Dims& d : {Dims{33, 40, 20}, Dims{64, 64, 64}, Dims{40, 24, 32}}) {
      INFO(dname(dt) << " [" << d.n << ", " << d.in << "] @ [" << d.in << ", " << d.features << "]");
      const Tensor a = uniform({d.n, d.in}, dt, -1, 1), w = uniform({d.features, d.in}, dt, -0.3, 0.3);
      const Tensor bias = uniform({d.features}, dt, -0.5, 0.5), bias1 = uniform({1}, dt, -0.5, 0.5);
      const Tensor ag = dev(a), bg = dev(w).t();  // b = w^T: a transposed view, read in place
      const Shape shape{d.n, d.features};
      const Tensor bias_row = bias1.expand({d.features});  // what a [1] or scalar bias adds
      const OnceRounded once(ref_linear(a, w, bias), ref_linear_abs(a, w, bias), d.in, shape, dt);
      const OnceRounded once1(ref_linear(a, w, bias_row), ref_linear_abs(a, w, bias_row), d.in, shape, dt);
      CHECK(once.compared() > static_cast<int64_t>(once.once.size()) / 2);
      for (bool fused : {true, false}) {
        INFO((fused ? "fused" : "unfused"));
        FusionGuard fusion(fused);
        CHECK(once.misses(hg::addmm(dev(bias), ag, bg)) == 0);
        CHECK(once.misses(hg::addmm(dev(bias).reshape({1, d.features}), ag, bg)) == 0);
        CHECK(once1.misses(hg::addmm(dev(bias1), ag, bg)) == 0);
        CHECK(once1.misses(hg::addmm(dev(bias1).reshape({}), ag, bg)) == 0);
      }
    }
}

// kernels::cuda::gemm with a bias and beta != 0: on its fallback (fusion off, or no BIAS kernel)
// float16/bfloat16 add beta * out and the bias to the float32 sums and round once. With
// fusion on, cuBLASLt's BIAS epilogue reads beta * out from the half-type output: its
// kernel's rounding is measured and reported (WARN), not required (docs/numerics.md).
TEST_CASE("cuda gemm with a bias and beta rounds once on its fallback", "[cuda][gemm]") {
  struct Dims {
    int64_t n, in, features;
  };
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (const Dims& d : {Dims{33, 40, 20}, Dims{64, 64, 64}, Dims{40, 24, 32}}) {
      INFO(dname(dt) << " [" << d.n << ", " << d.in << "] -> " << d.features);
      const Tensor x = uniform({d.n, d.in}, dt, -1, 1), w = uniform({d.features, d.in}, dt, -0.3, 0.3);
      const Tensor bias = uniform({d.features}, dt, -0.5, 0.5), c0 = uniform({d.n, d.features}, dt, -1, 1);
      const Tensor xg = dev(x), wg = dev(w), bg = dev(bias);
      const Shape shape{d.n, d.features};
      const double beta = 0.5;
      auto z = ref_linear(x, w, bias), scale = ref_linear_abs(x, w, bias);
      const auto c0v = values(c0);
      for (size_t i = 0; i < z.size(); ++i) {
        z[i] += beta * c0v[i];
        scale[i] += std::fabs(beta * c0v[i]);
      }
      const OnceRounded once(z, scale, d.in, shape, dt);
      CHECK(once.compared() > static_cast<int64_t>(z.size()) / 2);
      {
        FusionGuard fusion(false);
        Tensor y = dev(c0);
        cops::gemm(xg, wg.t(), y, bg, static_cast<float>(beta));
        CHECK(once.misses(y) == 0);
      }
      {
        FusionGuard fusion(true);
        Tensor y = dev(c0);
        cops::reset_gemm_counts();
        cops::gemm(xg, wg.t(), y, bg, static_cast<float>(beta));
        const bool fused = cops::gemm_counts().fused_of(cops::FusedEpilogue::Bias) == 1;
        const int64_t misses = once.misses(y);
        if (!fused) CHECK(misses == 0);  // the fallback: ours
        WARN(dname(dt) << " [" << d.n << ", " << d.in << "] -> " << d.features << ": "
                       << (fused ? "cuBLASLt BIAS with beta 0.5" : "(no BIAS kernel) fallback") << " misses " << misses
                       << " of " << z.size() << " once-rounded outputs");
      }
    }
}

TEST_CASE("cuda linear_forward takes a transposed input and weight and a strided bias", "[cuda][linear]") {
  for (DType dt : kFloatDTypes) {
    INFO(dname(dt));
    const Pair x = operand(0, 17, 12, Layout::Transposed, dt), w = operand(0, 10, 12, Layout::Transposed, dt);
    const Tensor bias_base = uniform({20}, dt);
    const Tensor bias = hg::alias_with(bias_base, {10}, {2}, 0);
    const Tensor bias_gpu = hg::alias_with(dev(bias_base), {10}, {2}, 0);
    Tensor out = empty_cuda({17, 10}, dt);
    cops::linear_forward(x.gpu, w.gpu, bias_gpu, cops::Epilogue::BiasRelu, out, Tensor());
    auto y = ref_linear(x.cpu, w.cpu, bias);
    for (auto& v : y) v = v > 0 ? v : 0;
    HG_CHECK_CLOSE(out.cpu(), y);
  }
}

TEST_CASE("cuda linear_forward rejects mismatched aux buffers", "[cuda][linear]") {
  using E = cops::Epilogue;
  const Tensor x = dev(uniform({8, 6}, DType::Float32)), w = dev(uniform({5, 6}, DType::Float32));
  Tensor out = empty_cuda({8, 5}, DType::Float32);
  const Tensor mask = cops::make_relu_mask(8, 5, kCuda);
  CHECK(mask.shape() == Shape{8, 16});  // 128 bits per row
  REQUIRE_THROWS_AS(cops::linear_forward(x, w, Tensor(), E::BiasGelu, out, mask), hg::Error);
  REQUIRE_THROWS_AS(cops::linear_forward(x, w, Tensor(), E::None, out, empty_cuda({8, 5}, DType::Float32)), hg::Error);
  REQUIRE_THROWS_AS(cops::linear_forward(x, w, Tensor(), E::Bias, out, Tensor()), hg::Error);  // Bias needs a bias
  REQUIRE_THROWS_AS(cops::linear_forward(x, w, Tensor(), E::BiasRelu, out, cops::make_relu_mask(7, 5, kCuda)),
                    hg::Error);
  REQUIRE_THROWS_AS(cops::linear_forward(x, w, Tensor(), E::BiasGelu, out, empty_cuda({8, 5}, DType::Float16)),
                    hg::Error);
  {
    FusionGuard unfused(false);
    REQUIRE_THROWS_WITH(cops::linear_forward(x, w, Tensor(), E::BiasRelu, out, mask), Catch::Contains("fusion"));
  }
  REQUIRE_THROWS_WITH(cops::activation_backward(E::BiasRelu, out, mask, out), Catch::Contains("mask"));
}

// =============================================================================================
// linear_backward_epilogue

TEST_CASE("cuda linear backward gives dx, dw and db in every dtype, fused and unfused", "[cuda][linear][backward]") {
  using E = cops::Epilogue;
  for (DType dt : kFloatDTypes)
    for (bool fused : {true, false})
      for (E epi : {E::None, E::BiasRelu, E::BiasGelu, E::BiasGeluTanh})
        for (bool with_bias : {true, false}) {
          INFO(dname(dt) << (fused ? " fused " : " unfused ") << epi_name(epi) << (with_bias ? " bias" : " no bias"));
          FusionGuard fusion(fused);
          const int64_t n = 45, in = 28, features = 24;
          const Tensor x = uniform({n, in}, dt, -1, 1), w = uniform({features, in}, dt, -0.3, 0.3);
          const Tensor b = with_bias ? uniform({features}, dt, -0.5, 0.5) : Tensor();
          const Tensor g = uniform({n, features}, dt, -1, 1);
          const Tensor xg = dev(x), wg = dev(w), gg = dev(g);

          // Forward on the device, keeping what backward needs (y for ReLU, z for the GELUs).
          Tensor y = empty_cuda({n, features}, dt);
          Tensor z = epi == E::BiasGelu || epi == E::BiasGeluTanh ? empty_cuda({n, features}, dt) : Tensor();
          cops::linear_forward(xg, wg, with_bias ? dev(b) : Tensor(), epi, y, z);
          const Tensor saved = epi == E::BiasRelu ? y : z;

          Tensor dx = empty_cuda({n, in}, dt), dw = empty_cuda({features, in}, dt);
          Tensor db = with_bias ? empty_cuda({features}, dt) : Tensor();
          cops::linear_backward_epilogue(gg, xg, wg, epi, saved, dx, dw, db);

          // Reference from the saved tensor the device used (its own rounding of z or y).
          const auto gv = values(g), sv = saved.defined() ? values(saved.cpu()) : std::vector<double>();
          std::vector<double> gz(gv.size());
          for (size_t i = 0; i < gv.size(); ++i) gz[i] = gv[i] * (saved.defined() ? act_grad_ref(epi, sv[i]) : 1.0);
          HG_CHECK_CLOSE(dx.cpu(), matmul2d(gz, values(w), n, features, in));
          HG_CHECK_CLOSE(dw.cpu(), ref_tn(gz, values(x), n, features, in));
          if (with_bias) HG_CHECK_CLOSE(db.cpu(), col_sums(gz, n, features));
        }
}

TEST_CASE("cuda linear backward skips undefined gradients and handles a strided incoming gradient",
          "[cuda][linear][backward]") {
  for (DType dt : {DType::Float32, DType::Float16}) {
    INFO(dname(dt));
    const int64_t n = 16, in = 8, features = 12;
    const Tensor x = uniform({n, in}, dt), w = uniform({features, in}, dt);
    const Pair g = operand(0, n, features, Layout::Transposed, dt);  // e.g. from a transpose's backward
    Tensor dw = empty_cuda({features, in}, dt), db = empty_cuda({features}, dt);
    cops::linear_backward_epilogue(g.gpu, dev(x), dev(w), cops::Epilogue::None, Tensor(), Tensor(), dw, db);
    const auto gv = values(g.cpu);
    HG_CHECK_CLOSE(dw.cpu(), ref_tn(gv, values(x), n, features, in));
    HG_CHECK_CLOSE(db.cpu(), col_sums(gv, n, features));
    Tensor dx = empty_cuda({n, in}, dt);
    cops::linear_backward_epilogue(g.gpu, dev(x), dev(w), cops::Epilogue::None, Tensor(), dx, Tensor(), Tensor());
    HG_CHECK_CLOSE(dx.cpu(), matmul2d(gv, values(w), n, features, in));
  }
}

// Two layers, h = act(x W1^T + b1), y = h W2^T + b2: layer 2's backward hands
// layer 1's dReLU/dGELU and bias gradient to the epilogue of its dx GEMM.
TEST_CASE("cuda chain fusion: the next layer's dx GEMM applies dReLU or dGELU and reduces db",
          "[cuda][linear][backward]") {
  using E = cops::Epilogue;
  struct Variant {
    const char* name;
    E epi;
    bool mask;  // ReLU: save cuBLASLt's bit mask (else y); GELUs always save z
  };
  // hidden 32: z's row stride is a multiple of 8 (fused DGELU for tanh); 20:
  // it is not, so tanh takes the fallback (plain GEMM, then our dGELU pass).
  for (DType dt : kFloatDTypes)
    for (bool fused : {true, false})
      for (int64_t hidden : {32, 20})
        for (const Variant& v : {Variant{"relu mask", E::BiasRelu, true}, Variant{"relu output", E::BiasRelu, false},
                                 Variant{"gelu tanh", E::BiasGeluTanh, false}, Variant{"gelu exact", E::BiasGelu, false}}) {
          if (v.mask && !fused) continue;  // the mask exists only with fusion
          if (hidden % 8 != 0 && v.epi == E::BiasRelu) continue;  // the width rule is the GELU aux's
          INFO(dname(dt) << (fused ? " fused " : " unfused ") << v.name << " hidden " << hidden);
          FusionGuard fusion(fused);
          ReluFusionGuard relu_fusion(v.mask);  // the mask is cuBLASLt's RELU_AUX_BIAS's
          const int64_t n = 40, in = 24, out = 16;
          const Tensor x = uniform({n, in}, dt, -1, 1), w1 = uniform({hidden, in}, dt, -0.3, 0.3);
          const Tensor b1 = uniform({hidden}, dt, -0.5, 0.5), w2 = uniform({out, hidden}, dt, -0.3, 0.3);
          const Tensor g = uniform({n, out}, dt, -1, 1);
          const Tensor xg = dev(x), w1g = dev(w1), w2g = dev(w2);

          Tensor h = empty_cuda({n, hidden}, dt);
          Tensor aux = v.mask ? cops::make_relu_mask(n, hidden, kCuda)
                              : (v.epi == E::BiasRelu ? Tensor() : empty_cuda({n, hidden}, dt));
          const bool available = !v.mask || cops::relu_mask_epilogue_available(xg, w1g, dev(b1), h, aux);
          const bool wrote = cops::linear_forward(xg, w1g, dev(b1), v.epi, h, aux);
          CHECK(wrote == available);  // a mask exactly where cuBLASLt has a RELU_AUX kernel
          if (v.mask && !wrote) continue;  // no mask: the no-mask case below covers what backward does
          const Tensor saved = v.mask ? aux : (v.epi == E::BiasRelu ? h : aux);

          Tensor dz1 = empty_cuda({n, hidden}, dt), dw2 = empty_cuda({out, hidden}, dt);
          Tensor db2 = empty_cuda({out}, dt), db1 = empty_cuda({hidden}, dt);
          cops::linear_backward_epilogue(dev(g), h, w2g, E::None, Tensor(), dz1, dw2, db2,
                                         cops::InputActivation{v.epi, saved, db1});

          // Reference: dh = g W2, dz1 = dh * act'(.) from what the device saved: y for ReLU,
          // the mask as cuBLASLt itself decodes it (it may differ from y > 0 where its z is
          // exactly 0; the linear_forward case above checks it against y), z for the GELUs.
          const auto hv = values(h.cpu());
          const auto sv = v.mask ? decode_mask(aux, h) : v.epi == E::BiasRelu ? hv : values(aux.cpu());
          auto dz = matmul2d(values(g), values(w2), n, out, hidden);
          for (size_t i = 0; i < dz.size(); ++i) dz[i] *= act_grad_ref(v.epi, sv[i]);
          // (cuBLASLt's DGELU may use the hardware tanh: act_tol)
          HG_CHECK_CLOSE_TOL(dz1.cpu(), dz, act_tol(v.epi, dt));
          HG_CHECK_CLOSE_TOL(db1.cpu(), col_sums(dz, n, hidden), act_tol(v.epi, dt));
          HG_CHECK_CLOSE(dw2.cpu(), ref_tn(values(g), hv, n, out, hidden));
          HG_CHECK_CLOSE(db2.cpu(), col_sums(values(g), n, out));

          // Then layer 1's own weight gradient from dz1, as the chain would continue.
          Tensor dw1 = empty_cuda({hidden, in}, dt);
          cops::linear_backward_epilogue(dz1, xg, w1g, E::None, Tensor(), Tensor(), dw1, Tensor());
          HG_CHECK_CLOSE(dw1.cpu(), ref_tn(values(dz1.cpu()), values(x), n, hidden, in));
        }
}

// Where linear_forward writes no ReLU mask (cuBLASLt's RELU not allowed, which forces
// this branch on any GPU, or no RELU_AUX kernel for the dtype, as the library answers)
// it says so, y is right, and backward reads y instead (what linear_chain does).
// Where it writes one, backward's DRELU reads it.
TEST_CASE("cuda ReLU mask: backward reads the mask where linear_forward wrote one, else y",
          "[cuda][linear][backward]") {
  using E = cops::Epilogue;
  for (DType dt : kFloatDTypes)
    for (bool relu_epilogue : {false, true}) {
      INFO(dname(dt) << (relu_epilogue ? " cuBLASLt ReLU allowed" : " cuBLASLt ReLU not allowed"));
      FusionGuard fusion(true);
      ReluFusionGuard relu_fusion(relu_epilogue);
      const int64_t n = 40, in = 24, hidden = 32, out = 16;
      const Tensor x = uniform({n, in}, dt, -1, 1), w1 = uniform({hidden, in}, dt, -0.3, 0.3);
      const Tensor b1 = uniform({hidden}, dt, -0.5, 0.5), w2 = uniform({out, hidden}, dt, -0.3, 0.3);
      const Tensor g = uniform({n, out}, dt, -1, 1);
      const Tensor xg = dev(x), w1g = dev(w1), b1g = dev(b1);
      Tensor h = empty_cuda({n, hidden}, dt);
      const Tensor mask = cops::make_relu_mask(n, hidden, kCuda);
      const bool available = cops::relu_mask_epilogue_available(xg, w1g, b1g, h, mask);
      if (!relu_epilogue) CHECK_FALSE(available);
      const bool wrote = cops::linear_forward(xg, w1g, b1g, E::BiasRelu, h, mask);
      CHECK(wrote == available);
      auto y = ref_linear(x, w1, b1);
      for (auto& v : y) v = v > 0 ? v : 0;
      HG_CHECK_CLOSE(h.cpu(), y);

      // relu'(z) from what backward is given: the mask as cuBLASLt decodes it, or y > 0.
      const auto sv = wrote ? decode_mask(mask, h) : values(h.cpu());
      auto dz = matmul2d(values(g), values(w2), n, out, hidden);
      for (size_t i = 0; i < dz.size(); ++i) dz[i] *= sv[i] > 0 ? 1.0 : 0.0;
      Tensor dz1 = empty_cuda({n, hidden}, dt), db1 = empty_cuda({hidden}, dt);
      // No mask written: pass y (an unwritten mask must never be passed on). A mask: pass
      // it alone, so that a missing DRELU kernel is an Error rather than a silent read of y.
      cops::linear_backward_epilogue(dev(g), h, dev(w2), E::None, Tensor(), dz1, Tensor(), Tensor(),
                                     cops::InputActivation{E::BiasRelu, wrote ? mask : h, db1});
      HG_CHECK_CLOSE(dz1.cpu(), dz);
      HG_CHECK_CLOSE(db1.cpu(), col_sums(dz, n, hidden));
    }
}

// =============================================================================================
// NaN through ReLU: relu(NaN) = NaN (kernels/math.h, the CPU backend, PyTorch). cuBLASLt's RELU
// epilogue is max(x, 0), which may give 0: by default it does not run, so the fused path
// (BIAS epilogue + our pass) keeps NaN like the unfused one.

TEST_CASE("cuda Linear+ReLU keeps a NaN pre-activation NaN, fused and unfused", "[cuda][linear][nan]") {
  using E = cops::Epilogue;
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
    for (bool fused : {true, false}) {
      INFO(dname(dt) << (fused ? " fused" : " unfused"));
      FusionGuard fusion(fused);
      const int64_t n = 16, in = 32, features = 32, bad = 5;
      Tensor x = uniform({n, in}, dt, -1, 1);
      write_raw(x, bad * in + 3, std::nan(""));  // row 5's z is NaN in every feature
      const Tensor w = uniform({features, in}, dt, -0.3, 0.3), b = uniform({features}, dt, -0.5, 0.5);
      auto y = ref_linear(x, w, b);  // NaN in row 5 (NaN * w propagates)
      for (auto& v : y) v = std::isnan(v) ? v : (v > 0 ? v : 0);

      Tensor out = empty_cuda({n, features}, dt);
      cops::linear_forward(dev(x), dev(w), dev(b), E::BiasRelu, out, Tensor());
      const auto got = values(out.cpu());
      for (int64_t j = 0; j < features; ++j) CHECK(std::isnan(got[static_cast<size_t>(bad * features + j)]));
      HG_CHECK_CLOSE(out.cpu(), y);  // NaN where the reference is NaN (test_util compares NaN as equal)

      // The public op, and a Linear/ReLU chain (what nn.Sequential fuses), on the device.
      const Tensor yd = hg::linear(dev(x), dev(w), dev(b), hg::Activation::ReLU);
      const auto gy = values(yd.cpu());
      for (int64_t j = 0; j < features; ++j) CHECK(std::isnan(gy[static_cast<size_t>(bad * features + j)]));
      const std::vector<Tensor> h = {dev(x), empty_cuda({n, features}, dt), empty_cuda({n, 8}, dt)};
      const std::vector<Tensor> ws = {dev(w), dev(uniform({8, features}, dt))}, bs = {dev(b), Tensor()};
      cops::linear_chain(h, ws, bs, {E::BiasRelu, E::None}, /*keep=*/true);
      const auto gh = values(h[1].cpu()), gtop = values(h[2].cpu());
      for (int64_t j = 0; j < features; ++j) CHECK(std::isnan(gh[static_cast<size_t>(bad * features + j)]));
      for (int64_t j = 0; j < 8; ++j) CHECK(std::isnan(gtop[static_cast<size_t>(bad * 8 + j)]));  // reaches the loss
    }
  {
    // Opted in: cuBLASLt's RELU may give 0 for NaN (the documented trade); the other rows agree.
    FusionGuard fusion(true);
    ReluFusionGuard relu_fusion(true);
    const DType dt = DType::Float16;
    const int64_t n = 16, in = 32, features = 32, bad = 5;
    Tensor x = uniform({n, in}, dt, -1, 1);
    write_raw(x, bad * in + 3, std::nan(""));
    const Tensor w = uniform({features, in}, dt, -0.3, 0.3), b = uniform({features}, dt, -0.5, 0.5);
    auto y = ref_linear(x, w, b);
    for (auto& v : y) v = std::isnan(v) ? v : (v > 0 ? v : 0);
    Tensor out = empty_cuda({n, features}, dt);
    cops::linear_forward(dev(x), dev(w), dev(b), E::BiasRelu, out, Tensor());
    const auto got = values(out.cpu());
    for (int64_t j = 0; j < features; ++j) {
      const double v = got[static_cast<size_t>(bad * features + j)];
      CHECK((std::isnan(v) || v == 0.0));
      y[static_cast<size_t>(bad * features + j)] = v;  // whichever it gave
    }
    HG_CHECK_CLOSE(out.cpu(), y);
  }
}

// The setting's default, without a GPU: PyTorch's NaN semantics unless opted out.
TEST_CASE("cuBLASLt's NaN-to-zero ReLU epilogue is off by default", "[gemm_counts]") {
  CHECK_FALSE(cops::relu_epilogue_fusion());
  {
    ReluFusionGuard on(true);
    CHECK(cops::relu_epilogue_fusion());
  }
  CHECK_FALSE(cops::relu_epilogue_fusion());
}

// =============================================================================================
// Counters: a fused epilogue really ran (with every heuristic answering "unsupported" the
// cases above would still pass, on the fallbacks)

namespace {
uint64_t total_fused(const cops::GemmCounts& c) {
  uint64_t t = 0;
  for (uint64_t v : c.fused) t += v;
  return t;
}
uint64_t total_fallback(const cops::GemmCounts& c) {
  uint64_t t = 0;
  for (uint64_t v : c.fallback) t += v;
  return t;
}
}  // namespace

namespace {
// A GEMM layer call that asked for the epilogue `kind` `times` times, against cuBLASLt's answer
// for the same operands (cops::epilogue_available): fused where it has a kernel, else the
// fallback. Which kernels exist is asked, never assumed; a missing one is reported (WARN),
// since a fused path that never runs anywhere should be seen.
void check_asked(cops::FusedEpilogue kind, bool available, const cops::GemmCounts& c, uint64_t times = 1) {
  const char* name = cops::fused_epilogue_name(kind);
  INFO(name << (available ? ": cuBLASLt has a kernel" : ": cuBLASLt has no kernel"));
  CHECK(c.fused_of(kind) == (available ? times : 0));
  CHECK(c.fallback_of(kind) == (available ? 0 : times));
  if (!available) WARN("cuBLASLt has no " << name << " kernel for these operands: the fallback ran");
}
void check_not_asked(cops::FusedEpilogue kind, const cops::GemmCounts& c) {
  INFO(cops::fused_epilogue_name(kind) << " not asked for");
  CHECK(c.fused_of(kind) + c.fallback_of(kind) == 0);
}
}  // namespace

// Each Linear epilogue runs fused exactly where cuBLASLt has a kernel for it: the GEMM that
// asks for one counts as fused or fallback, and cuBLASLt's answer for the same operands
// (epilogue_available, the layer's own question) says which it must be. The numbers are
// checked either way. Aligned float16 and bfloat16 shapes, where kernels are expected.
TEST_CASE("cuda Linear epilogues on aligned float16 and bfloat16 shapes are fused where cuBLASLt has kernels",
          "[cuda][linear][fusion]") {
  using E = cops::Epilogue;
  using F = cops::FusedEpilogue;
  FusionGuard fusion(true);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dname(dt));
    const int64_t n = 64, in = 64, features = 64;  // every row 128 bytes: 16-byte aligned everywhere
    const Tensor xc = uniform({n, in}, dt, -1, 1), wc = uniform({features, in}, dt, -0.3, 0.3);
    const Tensor bc = uniform({features}, dt, -0.5, 0.5);
    const Tensor x = dev(xc), w = dev(wc), b = dev(bc);
    const auto z = ref_linear(xc, wc, bc);
    const auto act_of_z = [&](E e) {
      auto y = z;
      for (auto& v : y) v = act_ref(e, v);
      return y;
    };
    Tensor y = empty_cuda({n, features}, dt);
    const auto available = [&](F kind, const Tensor& aux) {
      return cops::epilogue_available(kind, x, w.t(), y, b, aux);
    };
    const Tensor mask = cops::make_relu_mask(n, features, kCuda);
    const bool bias_ok = available(F::Bias, Tensor());

    // ReLU by default: the bias in the GEMM's epilogue, our NaN-keeping ReLU pass after it.
    cops::reset_gemm_counts();
    cops::linear_forward(x, w, b, E::BiasRelu, y, Tensor());
    HG_CHECK_CLOSE(y.cpu(), act_of_z(E::BiasRelu));
    CHECK_FALSE(cops::linear_forward(x, w, b, E::BiasRelu, y, mask));  // cuBLASLt's ReLU not allowed: no mask
    HG_CHECK_CLOSE(y.cpu(), act_of_z(E::BiasRelu));
    check_asked(F::Bias, bias_ok, cops::gemm_counts(), 2);
    check_not_asked(F::Relu, cops::gemm_counts());
    check_not_asked(F::ReluMask, cops::gemm_counts());
    {
      ReluFusionGuard relu_fusion(true);  // cuBLASLt's RELU allowed
      const bool relu_ok = available(F::Relu, Tensor()), mask_ok = available(F::ReluMask, mask);
      CHECK(mask_ok == cops::relu_mask_epilogue_available(x, w, b, y, mask));  // one question, one answer
      cops::reset_gemm_counts();
      cops::linear_forward(x, w, b, E::BiasRelu, y, Tensor());
      check_asked(F::Relu, relu_ok, cops::gemm_counts());
      HG_CHECK_CLOSE(y.cpu(), act_of_z(E::BiasRelu));
      cops::reset_gemm_counts();
      CHECK(cops::linear_forward(x, w, b, E::BiasRelu, y, mask) == mask_ok);  // the mask written iff fused
      check_asked(F::ReluMask, mask_ok, cops::gemm_counts());
      HG_CHECK_CLOSE(y.cpu(), act_of_z(E::BiasRelu));
    }

    const bool gelu_ok = available(F::GeluTanh, Tensor());
    cops::reset_gemm_counts();
    cops::linear_forward(x, w, b, E::BiasGeluTanh, y, Tensor());
    check_asked(F::GeluTanh, gelu_ok, cops::gemm_counts());
    HG_CHECK_CLOSE_TOL(y.cpu(), act_of_z(E::BiasGeluTanh), act_tol(E::BiasGeluTanh, dt));

    Tensor zt = empty_cuda({n, features}, dt);
    const bool gelu_aux_ok = available(F::GeluTanhAux, zt);
    cops::reset_gemm_counts();
    cops::linear_forward(x, w, b, E::BiasGeluTanh, y, zt);
    check_asked(F::GeluTanhAux, gelu_aux_ok, cops::gemm_counts());
    HG_CHECK_CLOSE_TOL(y.cpu(), act_of_z(E::BiasGeluTanh), act_tol(E::BiasGeluTanh, dt));
    HG_CHECK_CLOSE(zt.cpu(), z);

    cops::reset_gemm_counts();
    cops::linear_forward(x, w, b, E::Bias, y, Tensor());
    check_asked(F::Bias, bias_ok, cops::gemm_counts());
    HG_CHECK_CLOSE(y.cpu(), z);

    // Backward: grad_w's GEMM reduces grad_bias (BGRADB, or a plain GEMM and a reduction);
    // dx is a plain GEMM.
    const Tensor gc = uniform({n, features}, dt), g = dev(gc);
    Tensor dx = empty_cuda({n, in}, dt), dw = empty_cuda({features, in}, dt), db = empty_cuda({features}, dt);
    const bool bgrad_ok = cops::epilogue_available(F::BiasGrad, g.t(), x, dw, db, Tensor());
    cops::reset_gemm_counts();
    cops::linear_backward_epilogue(g, x, w, E::None, Tensor(), dx, dw, db);
    const cops::GemmCounts c = cops::gemm_counts();
    check_asked(F::BiasGrad, bgrad_ok, c);
    CHECK(c.plain == (bgrad_ok ? 1u : 2u));
    CHECK(total_fallback(c) == (bgrad_ok ? 0u : 1u));
    HG_CHECK_CLOSE(dx.cpu(), matmul2d(values(gc), values(wc), n, features, in));
    HG_CHECK_CLOSE(dw.cpu(), ref_tn(values(gc), values(xc), n, features, in));
    HG_CHECK_CLOSE(db.cpu(), col_sums(values(gc), n, features));
  }
}

// A chain's hidden dReLU/dGELU and bias gradient ride in the top layer's dx GEMM
// (DRELU_BGRAD, DGELU_BGRAD) where cuBLASLt has the kernels: each epilogue the chain asks for
// is fused exactly where cuBLASLt says it has one for the same operands. (Stand-ins of the
// same shape stand for the buffers the chain allocates itself: fresh pool blocks, aligned
// alike. The chain's numbers: tests/kernels/cuda/test_linear_chain.cpp.)
TEST_CASE("cuda linear_chain's hidden dReLU and dGELU ride in DRELU_BGRAD and DGELU_BGRAD where cuBLASLt has them",
          "[cuda][linear][chain][fusion]") {
  using E = cops::Epilogue;
  using F = cops::FusedEpilogue;
  FusionGuard fusion(true);
  ReluFusionGuard relu_fusion(true);  // the ReLU mask and DRELU_BGRAD need cuBLASLt's RELU
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (E act : {E::BiasRelu, E::BiasGeluTanh}) {
      INFO(dname(dt) << " " << epi_name(act));
      const bool relu = act == E::BiasRelu;
      const int64_t n = 64, in = 64, hidden = 64, out = 32;
      const std::vector<Tensor> w = {dev(uniform({hidden, in}, dt, -0.3, 0.3)), dev(uniform({out, hidden}, dt, -0.3, 0.3))};
      const std::vector<Tensor> b = {dev(uniform({hidden}, dt)), dev(uniform({out}, dt))};
      const std::vector<Tensor> h = {dev(uniform({n, in}, dt)), empty_cuda({n, hidden}, dt), empty_cuda({n, out}, dt)};
      const std::vector<E> epi = {act, E::Bias};
      const F hidden_kind = relu ? F::ReluMask : F::GeluTanhAux;
      cops::reset_gemm_counts();
      const std::vector<Tensor> saved = cops::linear_chain(h, w, b, epi, /*keep=*/true);
      const cops::GemmCounts cf = cops::gemm_counts();
      // Layer 0's aux: the chain's z (kept either way), or a mask of the same shape for the
      // chain's (dropped when not written).
      const Tensor aux0 = relu ? cops::make_relu_mask(n, hidden, kCuda) : saved[0];
      const bool hidden_ok = cops::epilogue_available(hidden_kind, h[0], w[0].t(), h[1], b[0], aux0);
      check_asked(hidden_kind, hidden_ok, cf);
      if (relu) CHECK(saved[0].defined() == hidden_ok);  // the mask kept iff written
      check_asked(F::Bias, cops::epilogue_available(F::Bias, h[1], w[1].t(), h[2], b[1], Tensor()), cf);

      const Tensor g = dev(uniform({n, out}, dt)), dx = empty_cuda({n, in}, dt);
      std::vector<hg::kernels::ChainLayerGrad> layers(2);
      for (size_t i = 0; i < 2; ++i) {
        layers[i].w = w[i];
        layers[i].dw_wanted = true;
        layers[i].dw_dtype = dt;
        layers[i].db = empty_cuda({w[i].shape()[0]}, dt);
      }
      // The top layer's GEMMs: grad_w (BGRADB into its db), grad_x (layer 0's dReLU/dGELU
      // and db, reading its mask or z: asked only where the forward kept one).
      const Tensor dw1 = empty_cuda({out, hidden}, dt), dz0 = empty_cuda({n, hidden}, dt);
      const bool bgrad_ok = cops::epilogue_available(F::BiasGrad, g.t(), h[1], dw1, layers[1].db, Tensor());
      const F d_kind = relu ? F::DReluBiasGrad : F::DGeluBiasGrad;
      const bool d_asked = saved[0].defined();
      const bool d_ok = d_asked && cops::epilogue_available(d_kind, g, w[1], dz0, layers[0].db, saved[0]);
      cops::reset_gemm_counts();
      cops::linear_chain_backward(g, h, epi, saved, dx, layers);
      CHECK((layers[0].dw.defined() && layers[1].dw.defined() && !layers[0].w.defined()));
      const cops::GemmCounts c = cops::gemm_counts();
      if (d_asked) check_asked(d_kind, d_ok, c);
      else check_not_asked(d_kind, c);
      check_asked(F::BiasGrad, bgrad_ok, c);  // the top layer's db
    }
}

TEST_CASE("cuda GEMM counters count the documented fallbacks, and nothing fused with fusion off",
          "[cuda][linear][fusion]") {
  using E = cops::Epilogue;
  using F = cops::FusedEpilogue;
  const int64_t n = 32, in = 32, features = 32;
  // The mask epilogue is asked for; what happened is counted: fused where cuBLASLt has a
  // RELU_AUX kernel (its answer, asked first), else one fallback and one plain GEMM.
  // Every dtype, and shapes where a kernel is less likely (one row, odd widths).
  struct Dims {
    int64_t n, in, features;
  };
  for (DType dt : kFloatDTypes)
    for (const Dims& d : {Dims{n, in, features}, Dims{1, in, features}, Dims{33, 33, 33}}) {
      INFO(dname(dt) << " [" << d.n << ", " << d.in << "] -> " << d.features);
      FusionGuard fusion(true);
      ReluFusionGuard relu_fusion(true);
      const Tensor x = dev(uniform({d.n, d.in}, dt)), w = dev(uniform({d.features, d.in}, dt));
      const Tensor b = dev(uniform({d.features}, dt));
      Tensor y = empty_cuda({d.n, d.features}, dt);
      const Tensor mask = cops::make_relu_mask(d.n, d.features, kCuda);
      cops::reset_gemm_counts();
      const bool available = cops::relu_mask_epilogue_available(x, w, b, y, mask);
      CHECK(cops::gemm_counts().plain + total_fused(cops::gemm_counts()) + total_fallback(cops::gemm_counts()) ==
            0);  // asking counts nothing
      CHECK(cops::linear_forward(x, w, b, E::BiasRelu, y, mask) == available);
      const cops::GemmCounts c = cops::gemm_counts();
      CHECK(c.fused_of(F::ReluMask) == (available ? 1 : 0));
      CHECK(c.fallback_of(F::ReluMask) == (available ? 0 : 1));
      CHECK(c.plain == (available ? 0 : 1));
    }
  for (DType dt : kFloatDTypes) {
    INFO(dname(dt) << " fusion off");
    FusionGuard fusion(false);
    const Tensor x = dev(uniform({n, in}, dt)), w = dev(uniform({features, in}, dt)), b = dev(uniform({features}, dt));
    Tensor y = empty_cuda({n, features}, dt), z = empty_cuda({n, features}, dt);
    Tensor dx = empty_cuda({n, in}, dt), dw = empty_cuda({features, in}, dt), db = empty_cuda({features}, dt);
    cops::reset_gemm_counts();
    cops::linear_forward(x, w, b, E::BiasRelu, y, Tensor());
    cops::linear_forward(x, w, b, E::BiasGeluTanh, y, z);
    cops::linear_backward_epilogue(dev(uniform({n, features}, dt)), x, w, E::BiasGeluTanh, z, dx, dw, db);
    const cops::GemmCounts c = cops::gemm_counts();
    CHECK(total_fused(c) == 0);
    CHECK(total_fallback(c) == 0);
    CHECK(c.plain == 4);
  }
}

// cuBLASLt needs 16-byte aligned epilogue pointers; a bias (or bias gradient, or aux)
// that is a view at an odd offset is not. The layer copies the bias to an aligned
// temporary and computes a bias gradient into one: still fused, and right.
TEST_CASE("cuda epilogues take under-aligned bias, bias-gradient and aux views", "[cuda][linear][fusion]") {
  using E = cops::Epilogue;
  using F = cops::FusedEpilogue;
  FusionGuard fusion(true);
  for (DType dt : {DType::Float16, DType::BFloat16, DType::Float32}) {
    INFO(dname(dt));
    const int64_t n = 64, in = 64, features = 64;
    const Tensor x = uniform({n, in}, dt, -1, 1), w = uniform({features, in}, dt, -0.3, 0.3);
    const Tensor b = uniform({features}, dt, -0.5, 0.5), g = uniform({n, features}, dt);
    const Tensor xg = dev(x), wg = dev(w), gg = dev(g);
    // Element 1 of a device buffer: 2 or 4 bytes past a 16-byte boundary.
    const auto odd_view = [&](const Shape& shape) {
      return hg::alias_with(empty_cuda({hg::shape_numel(shape) + 1}, dt), shape, hg::contiguous_strides(shape), 1);
    };
    Tensor bias = odd_view({features});
    hg::kernels::copy(bias, dev(b));

    // Still asked for (and fused where cuBLASLt has the kernel: its answer for the same operands).
    Tensor y = empty_cuda({n, features}, dt);
    const bool bias_ok = cops::epilogue_available(F::Bias, xg, wg.t(), y, bias, Tensor());
    cops::reset_gemm_counts();
    cops::linear_forward(xg, wg, bias, E::Bias, y, Tensor());
    check_asked(F::Bias, bias_ok, cops::gemm_counts());
    HG_CHECK_CLOSE(y.cpu(), ref_linear(x, w, b));

    Tensor db = odd_view({features});
    Tensor dw = empty_cuda({features, in}, dt);
    const bool bgrad_ok = cops::epilogue_available(F::BiasGrad, gg.t(), xg, dw, db, Tensor());
    cops::reset_gemm_counts();
    cops::linear_backward_epilogue(gg, xg, wg, E::None, Tensor(), Tensor(), dw, db);
    check_asked(F::BiasGrad, bgrad_ok, cops::gemm_counts());
    HG_CHECK_CLOSE(db.cpu(), col_sums(values(g), n, features));

    // z at an odd offset: cuBLASLt cannot take it as GELU_AUX, so the GEMM writes it
    // and a pass applies tanh GELU (no fused aux epilogue, same numbers).
    Tensor z = odd_view({n, features});
    CHECK_FALSE(cops::epilogue_available(F::GeluTanhAux, xg, wg.t(), y, dev(b), z));  // nor would it be
    cops::reset_gemm_counts();
    cops::linear_forward(xg, wg, dev(b), E::BiasGeluTanh, y, z);
    CHECK(cops::gemm_counts().fused_of(F::GeluTanhAux) == 0);
    CHECK(cops::gemm_counts().fallback_of(F::GeluTanhAux) == 0);  // not even asked
    HG_CHECK_CLOSE(z.cpu(), ref_linear(x, w, b));

    // Chain: the layer below's bias gradient at an odd offset, reduced by DRELU_BGRAD.
    if (dt != DType::Float32) {
      ReluFusionGuard relu_fusion(true);
      Tensor h = empty_cuda({n, features}, dt);
      const Tensor mask = cops::make_relu_mask(n, features, kCuda), bg = dev(b);
      // The mask is written where cuBLASLt has a RELU_AUX kernel (asked); else backward reads h.
      const bool mask_ok = cops::relu_mask_epilogue_available(xg, wg, bg, h, mask);
      const bool wrote = cops::linear_forward(xg, wg, bg, E::BiasRelu, h, mask);
      CHECK(wrote == mask_ok);
      const Tensor w2 = uniform({32, features}, dt, -0.3, 0.3), g2 = uniform({n, 32}, dt);
      const Tensor w2g = dev(w2), g2g = dev(g2);
      Tensor dz = empty_cuda({n, features}, dt), db1 = odd_view({features});
      const bool drelu_ok =
          wrote && cops::epilogue_available(F::DReluBiasGrad, g2g, w2g, dz, db1, mask);
      cops::reset_gemm_counts();
      // h as the output too: read where no DRELU_BGRAD kernel runs
      cops::linear_backward_epilogue(g2g, h, w2g, E::None, Tensor(), dz, Tensor(), Tensor(),
                                     cops::InputActivation{E::BiasRelu, wrote ? mask : h, db1, h});
      if (wrote) check_asked(F::DReluBiasGrad, drelu_ok, cops::gemm_counts());
      else check_not_asked(F::DReluBiasGrad, cops::gemm_counts());
      const auto hv = values(h.cpu());
      auto ref = matmul2d(values(g2), values(w2), n, 32, features);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] *= hv[i] > 0 ? 1.0 : 0.0;
      HG_CHECK_CLOSE(dz.cpu(), ref);
      HG_CHECK_CLOSE(db1.cpu(), col_sums(ref, n, features));
    }
  }
}

// The cuBLASLt workspace is per call, from the stream-ordered pool: GEMMs on many
// short-lived streams leave nothing behind (it used to be a 32 MiB cudaMalloc per
// stream handle, never freed, and shared by a new stream that got a dead one's handle).
// [alone]: it reads the device's free memory, which other processes' allocations move,
// so scripts/gpu-check runs it with nothing beside it.
TEST_CASE("cuda GEMMs on short-lived streams leave no workspace behind", "[cuda][gemm][alone]") {
  const DType dt = DType::Float16;
  // A long k invites split-K, so some algorithm may well want a workspace.
  const Tensor a = dev(uniform({64, 8192}, dt)), b = dev(uniform({8192, 64}, dt));
  const auto ref = ref_gemm(a.cpu(), b.cpu());
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool;
  HG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  HG_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  size_t free_before = 0, free_after = 0, total = 0;
  HG_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 16; ++i) {
    INFO("stream " << i);
    cudaStream_t s = nullptr;
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    hg::cuda::set_current_stream(s);
    {
      Tensor out = empty_cuda({64, 64}, dt);
      cops::gemm(a, b, out, Tensor(), 0.f);
      HG_CHECK_CLOSE(out.cpu(), ref);  // .cpu() waits for s
    }
    HG_CUDA_CHECK(cudaStreamSynchronize(s));
    hg::cuda::set_current_stream(nullptr);
    HG_CUDA_CHECK(cudaStreamDestroy(s));
  }
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  HG_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  HG_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  // Sixteen 32 MiB workspaces would be 512 MiB; allow some driver noise.
  CHECK(free_after + (size_t{64} << 20) >= free_before);
}

// The bookkeeping alone, without a GPU.
TEST_CASE("GEMM epilogue counters count per kind and reset", "[gemm_counts]") {
  using F = cops::FusedEpilogue;
  cops::reset_gemm_counts();
  cops::detail::count_epilogue(F::DReluBiasGrad, true);
  cops::detail::count_epilogue(F::DReluBiasGrad, true);
  cops::detail::count_epilogue(F::ReluMask, false);
  cops::detail::count_plain();
  cops::GemmCounts c = cops::gemm_counts();
  CHECK(c.fused_of(F::DReluBiasGrad) == 2);
  CHECK(c.fallback_of(F::DReluBiasGrad) == 0);
  CHECK(c.fallback_of(F::ReluMask) == 1);
  CHECK(c.fused_of(F::ReluMask) == 0);
  CHECK(c.plain == 1);
  CHECK(total_fused(c) == 2);
  CHECK(total_fallback(c) == 1);
  cops::reset_gemm_counts();
  c = cops::gemm_counts();
  CHECK(total_fused(c) == 0);
  CHECK(total_fallback(c) == 0);
  CHECK(c.plain == 0);
  std::set<std::string> names;
  for (int i = 0; i < cops::kFusedEpilogueKinds; ++i) names.insert(cops::fused_epilogue_name(static_cast<F>(i)));
  CHECK(names.size() == static_cast<size_t>(cops::kFusedEpilogueKinds));
  CHECK(names.count("?") == 0);
}

// =============================================================================================
// The public API on CUDA against the CPU backend (needs kernels::gemm wired to kernels::cuda::gemm)

namespace {
// CUDA result vs the same op on the CPU, relative error within the dtype's
// tolerance (both sides round), or within `tolerance` when it is larger.
void check_like_cpu(const Tensor& gpu, const Tensor& cpu_result, double tolerance = 0) {
  REQUIRE(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu_result.dtype());
  CHECK(gpu.shape() == cpu_result.shape());
  HG_CHECK_CLOSE_TOL(gpu.cpu(), values(cpu_result), std::max(2 * tol(cpu_result.dtype()), tolerance));
}
}  // namespace

TEST_CASE("cuda mm bmm matmul addmm and linear match the CPU backend", "[cuda][gemm][ops]") {
  for (DType dt : kFloatDTypes) {
    INFO(dname(dt));
    const Tensor a = uniform({13, 20}, dt), b = uniform({20, 11}, dt);
    check_like_cpu(hg::mm(dev(a), dev(b)), hg::mm(a, b));
    const Tensor at = uniform({20, 13}, dt), bt = uniform({11, 20}, dt);
    check_like_cpu(hg::mm(dev(at).t(), dev(bt).t()), hg::mm(at.t(), bt.t()));  // transposed operands, no copy

    const Tensor a3 = uniform({4, 13, 20}, dt), b3 = uniform({4, 20, 11}, dt);
    check_like_cpu(hg::bmm(dev(a3), dev(b3)), hg::bmm(a3, b3));
    check_like_cpu(hg::bmm(dev(a3), dev(b3).transpose(1, 2).contiguous().transpose(1, 2)), hg::bmm(a3, b3));

    // matmul broadcasting: [3, 13, 20] @ [20, 11] shares b across the batch (stride 0)
    const Tensor a4 = uniform({3, 13, 20}, dt);
    check_like_cpu(hg::matmul(dev(a4), dev(b)), hg::matmul(a4, b));
    const Tensor v = uniform({20}, dt);
    check_like_cpu(hg::matmul(dev(a), dev(v)), hg::matmul(a, v));

    const Tensor bias = uniform({11}, dt);
    check_like_cpu(hg::addmm(dev(bias), dev(a), dev(b)), hg::addmm(bias, a, b));  // beta = 1
    check_like_cpu(hg::addmm(dev(bias), dev(a), dev(b), 0.5, 2.0), hg::addmm(bias, a, b, 0.5, 2.0));

    const Tensor x = uniform({2, 5, 20}, dt), w = uniform({11, 20}, dt);
    check_like_cpu(hg::linear(dev(x), dev(w), dev(bias)), hg::linear(x, w, bias));
    check_like_cpu(hg::linear(dev(x), dev(w)), hg::linear(x, w));
  }
}

// out_features 8: the GELUs' z is contiguous with a row stride that is a
// multiple of 8, so tanh GELU is one GEMM with GELU_AUX_BIAS; 12: cuBLASLt
// cannot write that aux, and the layer falls back to the GEMM (bias in its
// epilogue) and one pass of the shared math. The gradients come from z through
// our dGELU pass either way (one op's backward has no GEMM to fuse DGELU into).
TEST_CASE("cuda linear with ReLU or GELU and its gradients match the CPU backend", "[cuda][linear][ops][backward]") {
  using A = hg::Activation;
  for (DType dt : kFloatDTypes)
    for (auto act : {A::None, A::ReLU, A::GELU, A::GELUTanh})
      for (int64_t features : {8, 12}) {
        INFO(dname(dt) << " activation " << static_cast<int>(act) << " out_features " << features);
        // cuBLASLt's tanh GELU epilogue may use the hardware tanh (only the fused forward)
        const double y_tol = act == A::GELUTanh ? 1e-3 : 0;
        const Tensor x = uniform({6, 16}, dt, -1, 1), w = uniform({features, 16}, dt, -0.5, 0.5);
        const Tensor b = uniform({features}, dt), g = uniform({6, features}, dt);
        Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
        Tensor xd = dev(x).requires_grad_(), wd = dev(w).requires_grad_(), bd = dev(b).requires_grad_();
        const Tensor yc = hg::linear(xc, wc, bc, act), yd = hg::linear(xd, wd, bd, act);
        check_like_cpu(yd, yc, y_tol);
        {
          hg::no_grad off;  // no z kept: cuBLASLt's GELU_BIAS for tanh at any width
          check_like_cpu(hg::linear(dev(x), dev(w), dev(b), act), yc.detach(), y_tol);
        }
        yc.backward(g);
        yd.backward(dev(g));
        check_like_cpu(xd.grad(), xc.grad());
        check_like_cpu(wd.grad(), wc.grad());
        check_like_cpu(bd.grad(), bc.grad());
      }
}

#endif  // HALFGRAD_WITH_CUDA
