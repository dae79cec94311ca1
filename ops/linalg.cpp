// Matrix products. Their one-dtype check runs inside the forward, after the
// dispatcher's autocast step has had its chance to cast the inputs.
// mm, bmm, addmm and linear are ops with their own GEMM
// call and backward; matmul is composite (PyTorch's shape rules on top of
// mm/bmm) but still one dispatcher entry, so autocast sees "matmul".
#include <iterator>
#include <memory>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/grad_ops.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

using dispatch::Grads;
using dispatch::Save;
using dispatch::Saved;
using ops::gemm_operand;

namespace {
void check_float(std::string_view op, const Tensor& t) {
  HG_CHECK(is_floating(t.dtype()), "{}: expected a floating tensor, got {}. Cast it first, e.g. .to(float32).", op,
           t.describe());
}

Tensor gemm_new(const Tensor& a, const Tensor& b, const Shape& shape, const Tensor& bias = Tensor()) {
  Tensor out = make_tensor(shape, a.options());
  kernels::gemm(gemm_operand(a), gemm_operand(b), out, bias);
  return out;
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  ops::check_defined("mm", {{"input", &a}, {"mat2", &b}});
  HG_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors, got {} and {}", a.describe(), b.describe());
  HG_CHECK(a.shape()[1] == b.shape()[0], "mm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(b.shape()), a.shape()[1], b.shape()[0]);
  check_float("mm", a);
  return dispatch::call(
      OpId::mm, {a, b},
      [](const std::vector<Tensor>& in) {
        ops::check_same_dtype("mm", in);
        return gemm_new(in[0], in[1], {in[0].shape()[0], in[1].shape()[1]});
      },
      [](const Saved& s, const Tensor& g) -> Grads {
        return {s.needs_grad[0] ? mm(g, s.input(1).t()) : Tensor(), s.needs_grad[1] ? mm(s.input(0).t(), g) : Tensor()};
      },
      Save::Inputs);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  ops::check_defined("bmm", {{"input", &a}, {"mat2", &b}});
  HG_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-d tensors, got {} and {}", a.describe(), b.describe());
  HG_CHECK(a.shape()[0] == b.shape()[0] && a.shape()[2] == b.shape()[1],
           "bmm: shapes {} and {} cannot be multiplied (batch {} vs {}, inner {} vs {})", shape_str(a.shape()),
           shape_str(b.shape()), a.shape()[0], b.shape()[0], a.shape()[2], b.shape()[1]);
  check_float("bmm", a);
  return dispatch::call(
      OpId::bmm, {a, b},
      [](const std::vector<Tensor>& in) {
        ops::check_same_dtype("bmm", in);
        return gemm_new(in[0], in[1], {in[0].shape()[0], in[0].shape()[1], in[1].shape()[2]});
      },
      [](const Saved& s, const Tensor& g) -> Grads {
        return {s.needs_grad[0] ? bmm(g, s.input(1).transpose(1, 2)) : Tensor(),
                s.needs_grad[1] ? bmm(s.input(0).transpose(1, 2), g) : Tensor()};
      },
      Save::Inputs);
}

namespace {
// addmm in a half dtype with beta or alpha != 1: computed in float32 and rounded
// once (scaling a half operand, or beta * bias, would round each on its own).
bool scaled_half(DType dt, double beta, double alpha) {
  return (dt == DType::Float16 || dt == DType::BFloat16) && (beta != 1.0 || alpha != 1.0);
}
}  // namespace

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  ops::check_defined("addmm", {{"self (the bias)", &bias}, {"mat1", &a}, {"mat2", &b}});
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && a.shape()[1] == b.shape()[0],
           "addmm: shapes {} and {} cannot be multiplied", shape_str(a.shape()), shape_str(b.shape()));
  check_float("addmm", a);
  const Shape out_shape{a.shape()[0], b.shape()[1]};
  // PyTorch expands self to the output: it must broadcast TO [m, n]
  ops::check_broadcasts_to("addmm", "the bias (self)", bias.shape(), out_shape,
                           "; it is added to mat1 @ mat2, whose shape is [mat1 rows, mat2 columns]");
  const Shape bias_shape = bias.shape();
  return dispatch::call(
      OpId::addmm, {bias, a, b},
      [out_shape, beta, alpha](const std::vector<Tensor>& in) {
        ops::check_same_dtype("addmm", in);
        const DType dt = in[1].dtype();
        if (scaled_half(dt, beta, alpha)) {  // in float32, rounded once to the half type
          const Tensor prod = mm(in[1].to(DType::Float32), in[2].to(DType::Float32));
          return add(mul(prod, alpha), mul(ops::broadcast_to(in[0], out_shape).to(DType::Float32), beta)).to(dt);
        }
        // CUDA, beta = alpha = 1, a bias that is one row repeated down the output ([n], [1],
        // [1, n], [1, 1] or a scalar): the bias goes to the GEMM as its bias, as linear's, so
        // a @ b + bias rounds once (cuBLASLt's BIAS epilogue, or float32 sums plus the bias,
        // then one rounding: kernels::cuda::gemm). The bias in out with beta = 1 below rounds a
        // float16/bfloat16 GEMM twice on the GPU (docs/numerics.md). The CPU keeps that path.
        const Tensor& self = in[0];
        const bool row_bias = self.dim() <= 1 || (self.dim() == 2 && self.shape()[0] == 1);
        if (in[1].device().is_cuda() && self.device() == in[1].device() && beta == 1.0 && alpha == 1.0 && row_bias) {
          const Tensor row = self.dim() == 2 ? self.reshape({self.shape()[1]}) : self;
          return gemm_new(in[1], in[2], out_shape, ops::broadcast_to(row, {out_shape[1]}));
        }
        // out = beta * bias (broadcast), then out += alpha * (a @ b) in one GEMM
        Tensor out = make_tensor(out_shape, in[1].options());
        kernels::copy(out, ops::broadcast_to(beta == 1.0 ? in[0] : mul(in[0], beta), out_shape));
        Tensor a = alpha == 1.0 ? in[1] : mul(in[1], alpha);
        kernels::gemm(gemm_operand(a), gemm_operand(in[2]), out, Tensor(), 1.0f);
        return out;
      },
      [beta, alpha, bias_shape](const Saved& s, const Tensor& g) -> Grads {
        const DType dt = s.input(1).dtype();
        if (scaled_half(dt, beta, alpha)) {  // each gradient in float32, rounded once
          const Tensor g32 = g.to(DType::Float32);
          return {sum_to(mul(g32, beta), bias_shape).to(dt), mul(mm(g32, s.input(2).t().to(DType::Float32)), alpha).to(dt),
                  mul(mm(s.input(1).t().to(DType::Float32), g32), alpha).to(dt)};
        }
        const Tensor ga = mm(g, s.input(2).t()), gb = mm(s.input(1).t(), g);
        return {sum_to(beta == 1.0 ? g : mul(g, beta), bias_shape), alpha == 1.0 ? ga : mul(ga, alpha),
                alpha == 1.0 ? gb : mul(gb, alpha)};
      },
      Save::Inputs);
}

// linear and Linear+activation are one op with one GEMM: the bias (and the
// activation) ride in the GEMM's epilogue, and the backward is one call that
// applies dReLU/dGELU, produces dx and dw, and reduces db.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  ops::check_defined("linear", {{"input", &x}, {"weight", &weight}});
  static constexpr OpId kOps[] = {OpId::linear, OpId::linear_relu, OpId::linear_gelu, OpId::linear_gelu_tanh};
  HG_CHECK(static_cast<size_t>(act) < std::size(kOps), "linear: activation {} is not one of None, ReLU, GELU, GELUTanh",
           static_cast<int>(act));
  const OpId id = kOps[static_cast<int>(act)];
  const std::string_view name = op_name(id);
  HG_CHECK(weight.dim() == 2, "{}: weight must be 2-d [out_features, in_features], got {}", name, weight.describe());
  HG_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1],
           "{}: input {} does not match weight {} (input's last dim must be in_features = {})", name, x.describe(),
           weight.describe(), weight.shape()[1]);
  HG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == weight.shape()[0]),
           "{}: bias {} must be 1-d with out_features = {} elements", name, bias.describe(), weight.shape()[0]);
  check_float(name, x);
  // The GELUs' backward needs the pre-activation z. Only a recorded op keeps
  // it: without it CUDA's tanh GELU is the GEMM alone (GELU_BIAS, no aux write).
  const bool gelu_act = kernels::is_gelu(act);
  return dispatch::call(
      id, {x, weight, bias},
      [act, name, gelu_act](const std::vector<Tensor>& in) {
        const bool keep_pre = gelu_act && dispatch::recording();
        ops::check_same_dtype(name, in);
        const Tensor& x = in[0];
        const Tensor& w = in[1];
        // [*, in] -> [N, in]
        const Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.shape().back()});
        Tensor y = make_tensor({x2.shape()[0], w.shape()[0]}, x.options());
        // contiguous [N, out]: cuBLASLt writes z in the GEMM when out is a multiple of 8
        Tensor pre = keep_pre ? make_tensor(y.shape(), y.options()) : Tensor();
        kernels::linear_act(gemm_operand(x2), w, in[2], act, y, pre);
        if (keep_pre) dispatch::save_for_backward(pre);
        if (x.dim() == 2) return y;
        Shape out_shape = x.shape();
        out_shape.back() = w.shape()[0];
        return y.view(out_shape);
      },
      [act](const Saved& s, const Tensor& g) -> Grads {
        const Tensor& x = s.input(0);
        const Tensor& w = s.input(1);
        const bool has_bias = s.input(2).defined();
        const Tensor g2 = (g.dim() == 2 ? g : g.reshape({-1, g.shape().back()})).contiguous();
        if (ops::creating_graph()) {  // with ops, differentiable again; the GELUs' z recomputed from x
          const Tensor xr = x.dim() == 2 ? x : x.reshape({-1, x.shape().back()});
          const Tensor z = act == Activation::ReLU ? s.output().reshape(g2.shape())
                           : kernels::is_gelu(act)  ? linear(xr, w, s.input(2))
                                                    : Tensor();
          const Tensor gz = ops::activation_grad_ops(act, g2, z);
          const Tensor dx = s.needs_grad[0] ? mm(gz, w) : Tensor();
          return {dx.defined() && x.dim() != 2 ? dx.reshape(x.shape()) : dx, s.needs_grad[1] ? mm(gz.t(), xr) : Tensor(),
                  has_bias && s.needs_grad[2] ? sum(gz, {0}) : Tensor()};
        }
        const Tensor x2 = gemm_operand(x.dim() == 2 ? x : x.reshape({-1, x.shape().back()}));
        Tensor saved;
        if (act == Activation::ReLU) saved = s.output().reshape(g2.shape());
        if (kernels::is_gelu(act)) saved = s.extra(0);  // the pre-activation z
        // only the gradients someone needs (the first layer's input needs none)
        Tensor dx = s.needs_grad[0] ? make_tensor(x2.shape(), g.options()) : Tensor();
        // a weight cast from float32 (autocast) gets the GEMM's float32 sums on the CPU (Saved::grad_dtypes)
        Tensor dw = s.needs_grad[1] ? make_tensor(w.shape(), g.options().dtype(s.grad_dtypes[1])) : Tensor();
        Tensor db = has_bias && s.needs_grad[2] ? make_tensor({w.shape()[0]}, g.options()) : Tensor();
        kernels::linear_act_backward(g2, x2, gemm_operand(w), act, saved, dx, dw, db);
        return {dx.defined() && x.dim() != 2 ? dx.view(x.shape()) : dx, dw, db};
      },
      act == Activation::ReLU ? Save::Both : Save::Inputs);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear(x, weight, bias, Activation::None);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_defined("matmul", {{"input", &a}, {"other", &b}});
  HG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got {} and {}", a.describe(),
           b.describe());
  return dispatch::composite(OpId::matmul, {a, b}, [](const std::vector<Tensor>& in) -> Tensor {
    const Tensor &a = in[0], &b = in[1];
    // checked here so the messages name matmul, the op the user called
    ops::check_same_dtype("matmul", in);
    const int64_t ka = a.shape().back(), kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
    HG_CHECK(ka == kb, "matmul: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
             shape_str(b.shape()), ka, kb);
    if (a.dim() == 1 && b.dim() == 1) {
      HG_CHECK(a.shape()[0] == b.shape()[0], "matmul: 1-d tensors of different sizes {} and {}", a.describe(),
               b.describe());
      return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
    }
    if (a.dim() == 2 && b.dim() == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
    if (a.dim() == 1 && b.dim() == 2) return mm(a.unsqueeze(0), b).squeeze(0);
    if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
    // Batched: broadcast the batch dims, fold them into one, bmm, unfold.
    const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    const Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
    const Shape batch = ops::broadcast_shapes(
        fmt::format("matmul of {} and {}, batch dims", shape_str(a.shape()), shape_str(b.shape())), ba, bb);
    const int64_t m = a2.shape()[a2.dim() - 2], k = a2.shape().back(), n = b2.shape().back();
    HG_CHECK(b2.shape()[b2.dim() - 2] == k, "matmul: shapes {} and {} cannot be multiplied ({} != {})",
             shape_str(a.shape()), shape_str(b.shape()), k, b2.shape()[b2.dim() - 2]);
    Shape ea = batch, eb = batch;
    ea.insert(ea.end(), {m, k});
    eb.insert(eb.end(), {k, n});
    const int64_t nb = shape_numel(batch);
    Tensor y = bmm(a2.expand(ea).reshape({nb, m, k}), b2.expand(eb).reshape({nb, k, n}));
    Shape out = batch;
    if (a.dim() > 1) out.push_back(m);
    if (b.dim() > 1) out.push_back(n);
    return y.reshape(out);
  });
}

}  // namespace halfgrad
