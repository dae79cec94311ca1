// Convolutions and transposed convolutions (ops/conv_ops.h): checks, the
// kernels::ConvGeometry, one dispatch::call per op and its backward.
//
//   conv:            y  = conv_forward(x, w) + b
//                    dx = conv_backward_data(g, w), dw, db = conv_backward_weight(g, x)
//   conv_transpose:  y  = conv_backward_data(x, w) + b    (the conv from y's shape to x's)
//                    dx = conv_forward(g, w), dw = conv_backward_weight(dy = x, x = g), db = sum(g)
#include <halfgrad/ops/conv_ops.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;

namespace {

std::string dims_str(const std::vector<int64_t>& v) { return fmt::format("({})", fmt::join(v, ", ")); }

// The checks both kinds share: defined, dims, floating dtypes, groups, bias.
// Returns whether the input is batched.
bool check_common(std::string_view op, int nd, const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups,
                  bool transposed) {
  ops::check_defined(op, {{"input", &x}, {"weight", &w}});
  const char* spatial = nd == 1 ? "L" : nd == 2 ? "H, W" : "D, H, W";
  HG_CHECK(x.dim() == nd + 1 || x.dim() == nd + 2,
           "{}: expected a {}-d (unbatched) or {}-d (batched) input [N, C_in, {}], got {}", op, nd + 1, nd + 2,
           spatial, x.describe());
  HG_CHECK(w.dim() == nd + 2, "{}: weight must be {}-d [{}, {}, {}], got {}", op, nd + 2,
           transposed ? "C_in" : "C_out", transposed ? "C_out / groups" : "C_in / groups", spatial, w.describe());
  for (const Tensor* t : {&x, &w, &b}) {
    HG_CHECK(!t->defined() || is_floating(t->dtype()),
             "{}: expected floating tensors, got {}. Cast it first, e.g. .to(float32).", op, t->describe());
  }
  HG_CHECK(groups > 0, "{}: groups must be a positive integer, got {}", op, groups);
  const bool batched = x.dim() == nd + 2;
  const int64_t c_in = x.shape()[batched ? 1 : 0];
  if (!transposed) {
    HG_CHECK(w.shape()[0] % groups == 0, "{}: out_channels (weight.size(0) = {}) must be divisible by groups = {} ({})",
             op, w.shape()[0], groups, w.describe());
    HG_CHECK(w.shape()[1] * groups == c_in,
             "{}: input {} has {} channels but weight {} with groups = {} expects {} (weight.size(1) * groups)", op,
             x.describe(), c_in, w.describe(), groups, w.shape()[1] * groups);
    HG_CHECK(!b.defined() || (b.dim() == 1 && b.shape()[0] == w.shape()[0]),
             "{}: bias {} must be 1-d with out_channels = {} elements", op, b.describe(), w.shape()[0]);
  } else {
    HG_CHECK(c_in % groups == 0, "{}: in_channels ({}) must be divisible by groups = {} (input {})", op, c_in, groups,
             x.describe());
    HG_CHECK(w.shape()[0] == c_in,
             "{}: input {} has {} channels but weight {} expects {} (weight.size(0), the in_channels of a transposed "
             "convolution)",
             op, x.describe(), c_in, w.describe(), w.shape()[0]);
    HG_CHECK(!b.defined() || (b.dim() == 1 && b.shape()[0] == w.shape()[1] * groups),
             "{}: bias {} must be 1-d with out_channels = {} elements (weight.size(1) * groups)", op, b.describe(),
             w.shape()[1] * groups);
  }
  return batched;
}

// The one-dtype rule, checked after the autocast step (inside the forward).
void check_dtypes(std::string_view op, const Tensor& x, const Tensor& w, const Tensor& b) {
  HG_CHECK(x.dtype() == w.dtype(),
           "{}: input is {} but weight is {} (input {}, weight {}): input, weight and bias must have one dtype. Use "
           "amp::autocast (or cast the input with .to({}))",
           op, dtype_name(x.dtype()), dtype_name(w.dtype()), x.describe(), w.describe(), dtype_name(w.dtype()));
  HG_CHECK(!b.defined() || b.dtype() == w.dtype(),
           "{}: bias is {} but weight is {} (bias {}, weight {}): input, weight and bias must have one dtype. Use "
           "amp::autocast (or cast the bias with .to({}))",
           op, dtype_name(b.dtype()), dtype_name(w.dtype()), b.describe(), w.describe(), dtype_name(w.dtype()));
}

std::vector<int64_t> positive(std::string_view op, std::string_view what, const SizeArg& a, int nd) {
  std::vector<int64_t> v = a.expand(nd, op, what);
  for (int64_t e : v) HG_CHECK(e > 0, "{}: {} must be positive, got {}", op, what, a.str());
  return v;
}

std::vector<int64_t> non_negative(std::string_view op, std::string_view what, const SizeArg& a, int nd) {
  std::vector<int64_t> v = a.expand(nd, op, what);
  for (int64_t e : v) HG_CHECK(e >= 0, "{}: {} must be non-negative, got {}", op, what, a.str());
  return v;
}

// The layout of a convolution's activations (input, output and their
// gradients): channels-last when the input is, as in PyTorch; the weight is
// given to the kernels row-major.
MemoryFormat activation_format(const Tensor& x) { return x.suggest_memory_format(); }

// Adds bias [C] to y [N, C, *] in place (inside a forward: no autograd).
void add_bias(const Tensor& y, const Tensor& bias) {
  Shape bshape(static_cast<size_t>(y.dim()), 1);
  bshape[1] = bias.shape()[0];
  kernels::binary(kernels::BinaryOp::Add, y, ops::broadcast_to(bias.view(bshape), y.shape()), y, 1.0);
}

// Sums g [N, C, *] over all dims but 1: the bias gradient.
Tensor bias_grad(const Tensor& g) {
  Shape dims{0};
  for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
  return sum(g, dims);
}

Tensor conv_nd(OpId id, int nd, const Tensor& input, const Tensor& weight, const Tensor& bias, const SizeArg& stride_a,
               const PaddingArg& padding_a, const SizeArg& dilation_a, int64_t groups) {
  const std::string_view op = op_name(id);
  const bool batched = check_common(op, nd, input, weight, bias, groups, false);
  const std::vector<int64_t> stride = positive(op, "stride", stride_a, nd);
  const std::vector<int64_t> dilation = positive(op, "dilation", dilation_a, nd);
  kernels::ConvGeometry g;
  g.nd = nd;
  g.groups = groups;
  const Tensor x = batched ? input : input.unsqueeze(0);
  if (padding_a.is_mode()) {
    const std::string& mode = padding_a.mode();
    HG_CHECK(mode == "same" || mode == "valid", "{}: padding must be a number, one per spatial dim, 'same' or 'valid', got '{}'",
             op, mode);
    if (mode == "same") {
      for (int i = 0; i < nd; ++i) {
        HG_CHECK(stride[i] == 1, "{}: padding='same' is not supported for strided convolutions (stride {}); give the "
                 "padding as numbers instead", op, dims_str(stride));
      }
    }
    for (int i = 0; i < nd; ++i) {
      // "same": total = dilation * (k - 1); an odd total puts the extra element after (PyTorch)
      const int64_t total = mode == "same" ? dilation[i] * (weight.shape()[2 + i] - 1) : 0;
      g.pad_before[i] = total / 2;
      g.pad_after[i] = total - total / 2;
    }
  } else {
    const std::vector<int64_t> pad = non_negative(op, "padding", padding_a.sizes(), nd);
    for (int i = 0; i < nd; ++i) g.pad_before[i] = g.pad_after[i] = pad[i];
  }
  Shape out_shape{x.shape()[0], weight.shape()[0]};
  for (int i = 0; i < nd; ++i) {
    g.stride[i] = stride[i];
    g.dilation[i] = dilation[i];
    const int64_t in = x.shape()[2 + i], k = weight.shape()[2 + i];
    const int64_t padded = in + g.pad_before[i] + g.pad_after[i], extent = dilation[i] * (k - 1) + 1;
    HG_CHECK(in > 0 && padded >= extent,
             "{}: input {} with padding {} is too small for weight {} with dilation {}: the padded input size {} in "
             "spatial dim {} is smaller than the dilated kernel size {} (and every input size must be > 0). Pad the "
             "input or use a smaller kernel",
             op, input.describe(), padding_a.str(), weight.describe(), dims_str(dilation), padded, i, extent);
    out_shape.push_back((padded - extent) / stride[i] + 1);
  }
  Tensor y = dispatch::call(
      id, {x, weight, bias},
      [op, g, out_shape](const std::vector<Tensor>& in) {
        check_dtypes(op, in[0], in[1], in[2]);
        const MemoryFormat f = activation_format(in[0]);
        const Tensor x = in[0].contiguous(f), w = in[1].contiguous();
        const Tensor b = in[2].defined() ? in[2].contiguous() : Tensor();
        Tensor y = make_tensor(out_shape, x.options(), f);
        kernels::conv_forward(x, w, b, g, y);
        return y;
      },
      dispatch::once_differentiable(id, [g](const Saved& s, const Tensor& grad) -> Grads {
        const MemoryFormat f = activation_format(s.input(0));
        const Tensor dy = grad.contiguous(f);
        const bool has_bias = s.input(2).defined();
        Tensor dx, dw, db;
        if (s.needs_grad[0]) {
          dx = make_tensor(s.input(0).shape(), dy.options(), f);
          kernels::conv_backward_data(dy, s.input(1).contiguous(), g, dx);
        }
        const bool want_db = has_bias && s.needs_grad[2];
        if (s.needs_grad[1]) {
          // float32 for an autocast copy of a float32 weight on the CPU: oneDNN writes
          // its float32 sums, no rounding to bfloat16 and no cast pass (Saved::grad_dtypes)
          dw = make_tensor(s.input(1).shape(), dy.options().dtype(s.grad_dtypes[1]));
          if (want_db) db = make_tensor({dw.shape()[0]}, dw.options());
          kernels::conv_backward_weight(dy, s.input(0).contiguous(f), g, dw, db);
        } else if (want_db) {
          db = bias_grad(dy);
        }
        return {dx, dw, db};
      }));
  return batched ? y : y.squeeze(0);
}

Tensor conv_transpose_nd(OpId id, int nd, const Tensor& input, const Tensor& weight, const Tensor& bias,
                         const SizeArg& stride_a, const SizeArg& padding_a, const SizeArg& output_padding_a,
                         int64_t groups, const SizeArg& dilation_a) {
  const std::string_view op = op_name(id);
  const bool batched = check_common(op, nd, input, weight, bias, groups, true);
  const std::vector<int64_t> stride = positive(op, "stride", stride_a, nd);
  const std::vector<int64_t> dilation = positive(op, "dilation", dilation_a, nd);
  const std::vector<int64_t> pad = non_negative(op, "padding", padding_a, nd);
  const std::vector<int64_t> opad = non_negative(op, "output_padding", output_padding_a, nd);
  for (int i = 0; i < nd; ++i) {
    HG_CHECK(opad[i] < stride[i] || opad[i] < dilation[i],
             "{}: output padding must be smaller than either stride or dilation, but got output_padding {}, stride "
             "{}, dilation {}",
             op, dims_str(opad), dims_str(stride), dims_str(dilation));
  }
  const Tensor x = batched ? input : input.unsqueeze(0);
  kernels::ConvGeometry g;  // of the convolution from y's shape to x's
  g.nd = nd;
  g.groups = groups;
  Shape out_shape{x.shape()[0], weight.shape()[1] * groups};
  for (int i = 0; i < nd; ++i) {
    const int64_t in = x.shape()[2 + i], k = weight.shape()[2 + i];
    const int64_t out = (in - 1) * stride[i] - 2 * pad[i] + dilation[i] * (k - 1) + opad[i] + 1;
    HG_CHECK(in > 0 && out > 0,
             "{}: input {} with weight {}, stride {}, padding {}, output_padding {} and dilation {} gives an output "
             "size {} in spatial dim {} (every input and output size must be > 0). Use less padding",
             op, input.describe(), weight.describe(), dims_str(stride), dims_str(pad), dims_str(opad),
             dims_str(dilation), out, i);
    out_shape.push_back(out);
    g.stride[i] = stride[i];
    g.dilation[i] = dilation[i];
    g.pad_before[i] = pad[i];
    // The kernels' floor formula must give back `in` from `out`: with
    // output_padding < stride, pad_after = padding does; with a larger one
    // (allowed when < dilation) the whole strides in it come off pad_after
    // (the positions past the last one any input reaches get the bias only).
    g.pad_after[i] = pad[i] - (opad[i] - opad[i] % stride[i]);
  }
  Tensor y = dispatch::call(
      id, {x, weight, bias},
      [op, g, out_shape](const std::vector<Tensor>& in) {
        check_dtypes(op, in[0], in[1], in[2]);
        const MemoryFormat f = activation_format(in[0]);
        const Tensor x = in[0].contiguous(f), w = in[1].contiguous();
        Tensor y = make_tensor(out_shape, x.options(), f);
        kernels::conv_backward_data(x, w, g, y);
        if (in[2].defined()) add_bias(y, in[2]);
        return y;
      },
      dispatch::once_differentiable(id, [g](const Saved& s, const Tensor& grad) -> Grads {
        const MemoryFormat f = activation_format(s.input(0));
        const Tensor gy = grad.contiguous(f);
        Tensor dx, dw, db;
        if (s.needs_grad[0]) {
          dx = make_tensor(s.input(0).shape(), gy.options(), f);
          kernels::conv_forward(gy, s.input(1).contiguous(), Tensor(), g, dx);
        }
        if (s.needs_grad[1]) {
          dw = make_tensor(s.input(1).shape(), gy.options().dtype(s.grad_dtypes[1]));
          kernels::conv_backward_weight(s.input(0).contiguous(f), gy, g, dw, Tensor());
        }
        if (s.input(2).defined() && s.needs_grad[2]) db = bias_grad(gy);
        return {dx, dw, db};
      }));
  return batched ? y : y.squeeze(0);
}

}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, PaddingArg padding,
              SizeArg dilation, int64_t groups) {
  return conv_nd(OpId::conv1d, 1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, PaddingArg padding,
              SizeArg dilation, int64_t groups) {
  return conv_nd(OpId::conv2d, 2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, PaddingArg padding,
              SizeArg dilation, int64_t groups) {
  return conv_nd(OpId::conv3d, 3, input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, SizeArg padding,
                        SizeArg output_padding, int64_t groups, SizeArg dilation) {
  return conv_transpose_nd(OpId::conv_transpose1d, 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation);
}
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, SizeArg padding,
                        SizeArg output_padding, int64_t groups, SizeArg dilation) {
  return conv_transpose_nd(OpId::conv_transpose2d, 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation);
}
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, SizeArg stride, SizeArg padding,
                        SizeArg output_padding, int64_t groups, SizeArg dilation) {
  return conv_transpose_nd(OpId::conv_transpose3d, 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation);
}

}  // namespace halfgrad
