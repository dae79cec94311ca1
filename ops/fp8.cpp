// fp8 ops: checks and the kernel calls (ops/fp8_ops.h). None has an autocast
// row (PyTorch's _scaled_mm has none) and none records a node: the gradient of
// an fp8 layer is amp::fp8_linear's own backward.
#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/fp8_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {
void check_scale(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined() && t.numel() == 1 && t.dtype() == DType::Float32,
           "{}: {} must be a one-element float32 tensor (a dequantisation or quantisation scale), got {}", op, what,
           t.defined() ? t.describe() : "an undefined tensor");
}
}  // namespace

Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 const ScaledMmOptions& options) {
  ops::check_defined("scaled_mm", {{"a", &a}, {"b", &b}});
  HG_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()),
           "scaled_mm: a and b must be fp8 (float8_e4m3fn or float8_e5m2), got {} and {}; quantise them with "
           "fp8_quantize (or .to(hg::float8_e4m3fn)) first",
           a.describe(), b.describe());
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
           "scaled_mm: expected a [m, k] and b [k, n], got {} and {}", a.describe(), b.describe());
  HG_CHECK(options.out_dtype == DType::Float32 || is_low_precision(options.out_dtype),
           "scaled_mm: out_dtype must be float32, bfloat16 or float16, got {}", dtype_name(options.out_dtype));
  check_scale("scaled_mm", "scale_a", scale_a);
  check_scale("scaled_mm", "scale_b", scale_b);
  Tensor bias = options.bias;
  if (bias.defined()) {
    HG_CHECK(bias.dim() == 1 && bias.size(0) == b.size(1), "scaled_mm: bias must be [{}], got {}", b.size(1),
             bias.describe());
    bias = bias.detach().to(options.out_dtype).contiguous();
  }
  if (options.amax_out.defined()) check_scale("scaled_mm", "amax_out", options.amax_out);
  dispatch::check_same_device("scaled_mm", {a, b, scale_a, scale_b, bias, options.amax_out});
  return dispatch::call_nograd(OpId::scaled_mm, {a, b, scale_a, scale_b}, [&](const std::vector<Tensor>& in) {
    Tensor out = make_tensor({a.size(0), b.size(1)}, TensorOptions(options.out_dtype).device(a.device()));
    if (out.numel() > 0) {
      if (a.size(1) == 0) {
        out.zero_();
        if (bias.defined()) out.add_(bias);
        if (Tensor m = options.amax_out; m.defined()) m.copy_(amax(abs(out)).reshape({1}).to(DType::Float32));
      } else {
        kernels::scaled_mm(in[0], in[1], in[2], in[3], bias, out, options.amax_out);
      }
    } else if (Tensor m = options.amax_out; m.defined()) {
      m.fill_(0.0);
    }
    return out;
  });
}

Tensor fp8_quantize(const Tensor& x, const Tensor& scale, DType fp8_dtype, const Tensor& amax,
                    const Tensor& saturated) {
  ops::check_defined("fp8_quantize", {{"x", &x}, {"amax", &amax}});
  HG_CHECK(is_float8(fp8_dtype), "fp8_quantize: the target must be float8_e4m3fn or float8_e5m2, got {}",
           dtype_name(fp8_dtype));
  HG_CHECK(is_floating(x.dtype()), "fp8_quantize: x must be floating, got {}", x.describe());
  check_scale("fp8_quantize", "scale", scale);
  check_scale("fp8_quantize", "amax", amax);
  if (saturated.defined())
    HG_CHECK(saturated.numel() == 1 && saturated.dtype() == DType::Int64,
             "fp8_quantize: saturated must be a one-element int64 tensor, got {}", saturated.describe());
  dispatch::check_same_device("fp8_quantize", {x, scale, amax, saturated});
  return dispatch::call_nograd(OpId::fp8_quantize, {x, scale}, [&](const std::vector<Tensor>& in) {
    Tensor out = make_tensor(x.shape(), TensorOptions(fp8_dtype).device(x.device()));
    kernels::fp8_quantize(in[0].detach().contiguous(), in[1], out, amax, saturated);
    return out;
  });
}

void fp8_update_scales(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, int64_t first,
                       const std::vector<float>& fp8_max, float margin, bool most_recent) {
  HG_CHECK(history.defined() && history.dim() == 2 && history.dtype() == DType::Float32 && history.is_contiguous(),
           "fp8_update_scales: history must be a contiguous [L, n] float32 tensor, got {}",
           history.defined() ? history.describe() : "an undefined tensor");
  const int64_t n = history.size(1);
  HG_CHECK(!fp8_max.empty() && first >= 0 && first + static_cast<int64_t>(fp8_max.size()) <= n &&
               fp8_max.size() <= 3,
           "fp8_update_scales: columns [{}, {}) are not 1 to 3 columns of {}", first,
           first + static_cast<int64_t>(fp8_max.size()), history.describe());
  for (const Tensor* t : {&scale, &scale_inv})
    HG_CHECK(t->defined() && t->dim() == 1 && t->size(0) == n && t->dtype() == DType::Float32 && t->is_contiguous(),
             "fp8_update_scales: scale and scale_inv must be contiguous float32 [{}], got {}", n,
             t->defined() ? t->describe() : "an undefined tensor");
  dispatch::inplace(OpId::fp8_update_scales, history, {scale, scale_inv}, [&] {
    kernels::fp8_update_scales(history, scale, scale_inv, first, fp8_max, margin, most_recent);
  });
}

}  // namespace halfgrad
