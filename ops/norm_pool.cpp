// batch_norm and the 2-d pools: argument checks, output sizes (PyTorch's
// rules), the kernel calls (kernels/kernels.h) and, next to them, the backward
// formulas. None has an autocast row (they run in the input's dtype).
#include <cmath>
#include <optional>
#include <string>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {

// float64 for a float64 input, else float32: what the statistics are computed and kept in.
DType stat_dtype(DType input) { return input == DType::Float64 ? DType::Float64 : DType::Float32; }

// t as a contiguous tensor of the statistics dtype (t itself when it is one).
Tensor as_stat(const Tensor& t, DType a) {
  if (!t.defined()) return t;
  const Tensor c = t.dtype() == a ? t : t.to(a);
  return c.is_contiguous() ? c : c.contiguous();
}

void check_channel_tensor(const char* what, const Tensor& t, const Tensor& input) {
  if (!t.defined()) return;
  const int64_t c = input.shape()[1];
  HG_CHECK(t.dim() == 1 && t.shape()[0] == c,
           "batch_norm: {} should contain {} elements (one per channel of input {}), got {}", what, c,
           input.describe(), t.describe());
  HG_CHECK(t.dtype() == input.dtype() || t.dtype() == DType::Float32,
           "batch_norm: {} {} must be float32 or the input's dtype ({}); cast it, e.g. .to(float32)", what,
           t.describe(), dtype_name(input.dtype()));
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  ops::check_defined("batch_norm", {{"input", &input}});
  HG_CHECK(input.dim() >= 2,
           "batch_norm: input {} must have at least 2 dims [N, C, *]; a single sample [C] needs unsqueeze(0)",
           input.describe());
  HG_CHECK(is_floating(input.dtype()), "batch_norm: input {} must be floating; cast it first, e.g. .to(float32)",
           input.describe());
  check_channel_tensor("weight", weight, input);
  check_channel_tensor("bias", bias, input);
  check_channel_tensor("running_mean", running_mean, input);
  check_channel_tensor("running_var", running_var, input);
  HG_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: give both running_mean and running_var or neither (got {} and {})", running_mean.describe(),
           running_var.describe());
  HG_CHECK(training || running_mean.defined(),
           "batch_norm: running_mean and running_var are needed when training is false (evaluation normalises with "
           "them); pass training=true to use the batch statistics");
  HG_CHECK(!running_mean.defined() || (!running_mean.requires_grad() && !running_var.requires_grad()),
           "batch_norm: the running statistics ({}, {}) must not require grad (they are updated in place); "
           "register them as buffers or detach() them",
           running_mean.describe(), running_var.describe());
  const int64_t c = input.shape()[1];
  const int64_t per_channel = c == 0 ? 0 : input.numel() / c;
  HG_CHECK(!training || per_channel != 1,
           "batch_norm: Expected more than 1 value per channel when training, got input size {} (the batch variance "
           "of one value is undefined); use a batch of 2 or more, or eval mode",
           shape_str(input.shape()));
  dispatch::check_same_device("batch_norm", {input, weight, bias, running_mean, running_var});
  const Tensor rm = running_mean, rv = running_var;
  return dispatch::call(
      OpId::batch_norm, {input, weight, bias},
      [rm, rv, training, momentum, eps, c, per_channel](const std::vector<Tensor>& in) {
        const Tensor x = in[0].contiguous(in[0].suggest_memory_format());  // row-major or channels-last
        const DType a = stat_dtype(x.dtype());
        const TensorOptions stat_opts(a, x.device());
        const Tensor w = as_stat(in[1], a), b = as_stat(in[2], a);
        Tensor mean, invstd;
        Tensor y = ops::empty_like(x, x.options());
        if (training) {
          mean = make_tensor({c}, stat_opts);
          invstd = make_tensor({c}, stat_opts);
          if (per_channel == 0) {  // an empty batch: nothing to normalise, the running stats unchanged (PyTorch)
            kernels::fill(mean, 0.0);
            kernels::fill(invstd, 0.0);
          } else {
            // the kernel updates statistics of its own dtype; others go through a copy
            const Tensor rm_s = as_stat(rm, a), rv_s = as_stat(rv, a);
            kernels::batch_norm_training(x, eps, w, b, mean, invstd, rm_s, rv_s, momentum, y);
            if (rm.defined()) {
              if (!rm_s.is_same(rm)) kernels::copy(rm, rm_s);
              if (!rv_s.is_same(rv)) kernels::copy(rv, rv_s);
              rm.bump_version();
              rv.bump_version();
            }
          }
        } else {
          // copies, so a later training step on the running stats leaves this op's backward valid
          mean = rm.dtype() == a ? rm.clone() : as_stat(rm, a);
          invstd = pow(add(as_stat(rv, a), eps), -0.5);
          kernels::batch_norm_forward(x, mean, invstd, w, b, y);
        }
        if (dispatch::recording()) {
          dispatch::save_for_backward(mean);
          dispatch::save_for_backward(invstd);
        }
        return y;
      },
      dispatch::once_differentiable(OpId::batch_norm, [training, c](const Saved& s, const Tensor& g) -> Grads {
        const MemoryFormat f = s.input(0).suggest_memory_format();
        const Tensor x = s.input(0).contiguous(f);
        const DType a = stat_dtype(x.dtype());
        const Tensor w = as_stat(s.input(1), a);
        const TensorOptions stat_opts(a, x.device());
        Tensor dx = s.needs_grad[0] ? make_tensor(x.shape(), x.options(), f) : Tensor();
        Tensor dw = s.input(1).defined() && s.needs_grad[1] ? make_tensor({c}, stat_opts) : Tensor();
        Tensor db = s.input(2).defined() && s.needs_grad[2] ? make_tensor({c}, stat_opts) : Tensor();
        kernels::batch_norm_backward(g.contiguous(f), x, s.extra(0), s.extra(1), w, training, dx, dw, db);
        return {dx, dw, db};  // the engine casts dw, db to the parameters' dtype
      }),
      Save::Inputs);
}

// ---- pooling ---------------------------------------------------------------------------------

namespace {

struct PoolPlan {
  kernels::Pool2dGeometry geo;
  int64_t oh = 0, ow = 0;
  Shape out_shape;
};

// floor division (PyTorch's div_rtn) for a possibly negative numerator
int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape.
int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  int64_t out = div_floor(in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  // the last window must start inside the input or the left padding
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

void check_pool_input(const char* op, const Tensor& x) {
  ops::check_defined(op, {{"input", &x}});
  const bool rank_ok = x.dim() == 3 || x.dim() == 4;
  bool sizes_ok = rank_ok;
  for (int64_t d = x.dim() - 3; rank_ok && d < x.dim(); ++d) sizes_ok = sizes_ok && x.shape()[d] > 0;
  HG_CHECK(sizes_ok,
           "{}: Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, and non-zero C, H "
           "and W, but got {}; give [N, C, H, W] or [C, H, W]",
           op, x.describe());
  HG_CHECK(is_floating(x.dtype()), "{}: input {} must be floating; cast it first, e.g. .to(float32)", op,
           x.describe());
}

PoolPlan plan_pool(const char* op, const Tensor& x, const SizeArg& kernel_size, const std::optional<SizeArg>& stride,
                   const SizeArg& padding, const SizeArg& dilation, bool ceil_mode) {
  check_pool_input(op, x);
  const auto k = kernel_size.expand(2, op, "kernel_size");
  const auto st = stride && !stride->values().empty() ? stride->expand(2, op, "stride") : k;
  const auto pad = padding.expand(2, op, "padding");
  const auto dil = dilation.expand(2, op, "dilation");
  HG_CHECK(k[0] > 0 && k[1] > 0, "{}: kernel size should be greater than zero, but got {} (input {})", op,
           kernel_size.str(), x.describe());
  HG_CHECK(st[0] > 0 && st[1] > 0, "{}: stride should be greater than zero, but got ({}, {}) (input {})", op, st[0],
           st[1], x.describe());
  HG_CHECK(dil[0] > 0 && dil[1] > 0, "{}: dilation should be greater than zero, but got {} (input {})", op,
           dilation.str(), x.describe());
  HG_CHECK(pad[0] >= 0 && pad[1] >= 0, "{}: pad must be non-negative, but got {} (input {})", op, padding.str(),
           x.describe());
  HG_CHECK(pad[0] <= k[0] / 2 && pad[1] <= k[1] / 2,
           "{}: pad should be smaller than or equal to half of kernel size, but got padding {} for kernel_size {} "
           "(input {}); use a smaller padding or a larger kernel",
           op, padding.str(), kernel_size.str(), x.describe());
  const int64_t h = x.shape()[x.dim() - 2], w = x.shape()[x.dim() - 1];
  PoolPlan p;
  p.oh = pool_out(h, k[0], pad[0], st[0], dil[0], ceil_mode);
  p.ow = pool_out(w, k[1], pad[1], st[1], dil[1], ceil_mode);
  HG_CHECK(p.oh >= 1 && p.ow >= 1,
           "{}: Given input size {}, calculated output size [{}, {}]. Output size is too small (kernel_size {}, "
           "stride ({}, {}), padding {}, dilation {}); use a smaller kernel or more padding",
           op, shape_str(x.shape()), p.oh, p.ow, kernel_size.str(), st[0], st[1], padding.str(), dilation.str());
  for (int i = 0; i < 2; ++i) {
    p.geo.kernel[i] = k[i];
    p.geo.stride[i] = st[i];
    p.geo.padding[i] = pad[i];
    p.geo.dilation[i] = dil[i];
  }
  p.out_shape = x.shape();
  p.out_shape[x.dim() - 2] = p.oh;
  p.out_shape[x.dim() - 1] = p.ow;
  return p;
}

// The pools keep their input's layout: row-major, or channels-last for a 4-d input.
Tensor dense(const Tensor& t, MemoryFormat f) { return t.contiguous(f); }

}  // namespace

Tensor max_pool2d(const Tensor& input, SizeArg kernel_size, std::optional<SizeArg> stride, SizeArg padding,
                  SizeArg dilation, bool ceil_mode) {
  const PoolPlan p = plan_pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode);
  const MemoryFormat f = input.suggest_memory_format();
  return dispatch::call(
      OpId::max_pool2d, {input},
      [p, f](const std::vector<Tensor>& in) {
        const Tensor x = dense(in[0], f);
        Tensor y = make_tensor(p.out_shape, x.options(), f);
        Tensor idx = make_tensor(p.out_shape, TensorOptions(DType::Int64, x.device()), f);
        kernels::max_pool2d(x, p.geo, y, idx);
        if (dispatch::recording()) dispatch::save_for_backward(idx);
        return y;
      },
      dispatch::once_differentiable(OpId::max_pool2d, [p, f, in_shape = input.shape()](const Saved& s, const Tensor& g) -> Grads {
        Tensor dx = make_tensor(in_shape, g.options(), f);
        kernels::max_pool2d_backward(dense(g, f), s.extra(0), p.geo, dx);
        return {dx};
      }),
      Save::Nothing);
}

Tensor avg_pool2d(const Tensor& input, SizeArg kernel_size, std::optional<SizeArg> stride, SizeArg padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  HG_CHECK(!divisor_override || *divisor_override != 0,
           "avg_pool2d: divisor must be not zero (divisor_override = 0 for input {}); pass std::nullopt for the "
           "window's size",
           input.defined() ? input.describe() : std::string("undefined"));
  PoolPlan p = plan_pool("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode);
  p.geo.count_include_pad = count_include_pad;
  p.geo.divisor_override = divisor_override.value_or(0);
  const MemoryFormat f = input.suggest_memory_format();
  return dispatch::call(
      OpId::avg_pool2d, {input},
      [p, f](const std::vector<Tensor>& in) {
        const Tensor x = dense(in[0], f);
        Tensor y = make_tensor(p.out_shape, x.options(), f);
        kernels::avg_pool2d(x, p.geo, y);
        return y;
      },
      dispatch::once_differentiable(OpId::avg_pool2d, [p, f, in_shape = input.shape()](const Saved&, const Tensor& g) -> Grads {
        Tensor dx = make_tensor(in_shape, g.options(), f);
        kernels::avg_pool2d_backward(dense(g, f), p.geo, dx);
        return {dx};
      }),
      Save::Nothing);
}

Tensor adaptive_avg_pool2d(const Tensor& input, SizeArg output_size) {
  check_pool_input("adaptive_avg_pool2d", input);
  const auto os = output_size.expand(2, "adaptive_avg_pool2d", "output_size");
  HG_CHECK(os[0] >= 0 && os[1] >= 0,
           "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0, got {} (input {})",
           output_size.str(), input.describe());
  Shape out_shape = input.shape();
  out_shape[input.dim() - 2] = os[0];
  out_shape[input.dim() - 1] = os[1];
  const MemoryFormat f = input.suggest_memory_format();
  return dispatch::call(
      OpId::adaptive_avg_pool2d, {input},
      [out_shape, f](const std::vector<Tensor>& in) {
        const Tensor x = dense(in[0], f);
        Tensor y = make_tensor(out_shape, x.options(), f);
        kernels::adaptive_avg_pool2d(x, y);
        return y;
      },
      dispatch::once_differentiable(OpId::adaptive_avg_pool2d, [f, in_shape = input.shape()](const Saved&, const Tensor& g) -> Grads {
        Tensor dx = make_tensor(in_shape, g.options(), f);
        kernels::adaptive_avg_pool2d_backward(dense(g, f), dx);
        return {dx};
      }),
      Save::Nothing);
}

}  // namespace halfgrad
