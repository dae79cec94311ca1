// fp8_autocast and the fp8 Linear (amp/fp8.h). The layer is a custom autograd
// Function: its forward and backward below read top to bottom as the recipe.
#include <halfgrad/amp/autocast.h>
#include <halfgrad/amp/fp8.h>
#include <halfgrad/autograd/function.h>
#include <halfgrad/core/error.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::amp {

namespace {
thread_local bool g_enabled = false;
thread_local Fp8Recipe g_recipe;

DType forward_dtype(const Fp8Recipe&) { return DType::Float8_e4m3fn; }
DType backward_dtype(const Fp8Recipe& r) {
  return r.format == Fp8Format::Hybrid ? DType::Float8_e5m2 : DType::Float8_e4m3fn;
}
float max_of(DType fp8) { return fp8 == DType::Float8_e4m3fn ? kE4M3Max : kE5M2Max; }

// A one-element view of column c of a [3] tensor, or of row 0 of the history.
Tensor col(const Tensor& t, int64_t c) { return t.narrow(0, c, 1); }
Tensor newest_amax(const Fp8State& s, int64_t c) { return s.amax_history.select(0, 0).narrow(0, c, 1); }

void update(const Fp8State& s, int64_t first, std::vector<float> fp8_max, const Fp8Recipe& r) {
  fp8_update_scales(s.amax_history, s.scale, s.scale_inv, first, fp8_max, r.margin,
                    r.amax_compute_algo == AmaxCompute::MostRecent);
}

struct Fp8Linear : autograd::Function<Fp8Linear> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Fp8State& s, const Fp8Recipe& r) {
    const DType fwd = forward_dtype(r);
    const int64_t in = weight.size(1), out = weight.size(0);
    // 1. New scales for x and W from the amaxes of earlier steps (delayed scaling).
    update(s, kFp8Input, {max_of(fwd), max_of(fwd)}, r);
    // 2. Quantise with them, recording this step's amaxes into the history's newest row.
    const Tensor x2 = x.reshape({-1, in});
    const Tensor xq = fp8_quantize(x2, col(s.scale, kFp8Input), fwd, newest_amax(s, kFp8Input), col(s.saturated, 0));
    const Tensor wq = fp8_quantize(weight, col(s.scale, kFp8Weight), fwd, newest_amax(s, kFp8Weight),
                                   col(s.saturated, 1));
    // The inverse scales these copies were made with, for backward (the next
    // forward's update may change the state's before this backward runs).
    const Tensor inv = s.scale_inv.narrow(0, 0, 2).clone();
    // 3. One fp8 GEMM: float32 sums times 1/s_x * 1/s_w, plus the bias.
    const DType out_dtype =
        is_autocast_enabled(x.device().type()) ? autocast_dtype(x.device().type()) : x.dtype();
    Tensor y = scaled_mm(xq, wq.t(), inv.narrow(0, 0, 1), inv.narrow(0, 1, 1),
                         {.bias = bias.defined() ? bias.detach() : Tensor(), .out_dtype = out_dtype});
    ctx.save_for_backward({xq, wq, inv});
    ctx.saved_data["state"] = s;
    ctx.saved_data["recipe"] = r;
    ctx.saved_data["x_shape"] = x.shape();
    ctx.saved_data["x_dtype"] = x.dtype();
    ctx.saved_data["w_dtype"] = weight.dtype();
    auto shape = x.shape();
    shape.back() = out;
    return y.reshape(shape);
  }

  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const Tensor& grad) {
    const auto saved = ctx.saved_tensors();
    const Tensor &xq = saved[0], &wq = saved[1], &inv = saved[2];
    const auto s = std::any_cast<Fp8State>(ctx.saved_data["state"]);
    const auto r = std::any_cast<Fp8Recipe>(ctx.saved_data["recipe"]);
    const DType bwd = backward_dtype(r);
    // 1-2. The gradient's scale from its history, then its quantised copy.
    update(s, kFp8GradOutput, {max_of(bwd)}, r);
    const Tensor g2 = grad.reshape({-1, wq.size(0)});
    const Tensor gq = fp8_quantize(g2, col(s.scale, kFp8GradOutput), bwd, newest_amax(s, kFp8GradOutput),
                                   col(s.saturated, 2));
    const Tensor g_inv = col(s.scale_inv, kFp8GradOutput).clone();
    // 3. dx = g @ W and dW = g^T @ x, both fp8 GEMMs; db from the unquantised gradient.
    Tensor dx, dw, db;
    if (ctx.needs_input_grad(0))
      dx = scaled_mm(gq, wq, g_inv, inv.narrow(0, 1, 1), {.out_dtype = std::any_cast<DType>(ctx.saved_data["x_dtype"])})
               .reshape(std::any_cast<Shape>(ctx.saved_data["x_shape"]));
    if (ctx.needs_input_grad(1))
      dw = scaled_mm(gq.t(), xq, g_inv, inv.narrow(0, 0, 1), {.out_dtype = std::any_cast<DType>(ctx.saved_data["w_dtype"])});
    if (ctx.needs_input_grad(2)) db = g2.to(DType::Float32).sum({0});
    return {dx, dw, db};
  }
};
}  // namespace

fp8_autocast::fp8_autocast(const Fp8Recipe& recipe, bool enabled) : prev_enabled_(g_enabled), prev_recipe_(g_recipe) {
  HG_CHECK(recipe.amax_history_len >= 1 && recipe.amax_history_len <= 8192,
           "fp8_autocast: amax_history_len must be in [1, 8192], got {}", recipe.amax_history_len);
  HG_CHECK(recipe.margin >= 0.f, "fp8_autocast: margin must be >= 0, got {}", recipe.margin);
  g_enabled = enabled;
  if (enabled) g_recipe = recipe;
}
fp8_autocast::~fp8_autocast() {
  g_enabled = prev_enabled_;
  g_recipe = prev_recipe_;
}
bool is_fp8_enabled() { return g_enabled; }
const Fp8Recipe& fp8_recipe() { return g_recipe; }

Fp8State Fp8State::create(int64_t amax_history_len, Device device) {
  HG_CHECK(amax_history_len >= 1 && amax_history_len <= 8192,
           "Fp8State: amax_history_len must be in [1, 8192], got {}", amax_history_len);
  const auto f32 = TensorOptions(DType::Float32).device(device);
  return {ones({3}, f32), ones({3}, f32), zeros({amax_history_len, 3}, f32),
          zeros({3}, TensorOptions(DType::Int64).device(device))};
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8State& state,
                  const Fp8Recipe& recipe) {
  HG_CHECK(state.defined(), "fp8_linear: the layer has no fp8 state; call hg::nn::enable_fp8(model, recipe) once "
                            "after building the model");
  HG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
           "fp8_linear: expected x [..., {}] for weight {}, got {}", weight.size(1), weight.describe(), x.describe());
  HG_CHECK(state.amax_history.size(0) == recipe.amax_history_len,
           "fp8_linear: the layer's amax history has {} rows but the recipe asks for {}; enable fp8 with the "
           "recipe you train with",
           state.amax_history.size(0), recipe.amax_history_len);
  HG_CHECK(state.scale.device() == weight.device(),
           "fp8_linear: the fp8 state is on {} but the weight on {}; move the model with .to() after enable_fp8 (it "
           "moves the state too)",
           state.scale.device().str(), weight.device().str());
  return Fp8Linear::apply(x, weight, bias, state, recipe);
}

}  // namespace halfgrad::amp
