// Custom autograd Functions: forward without recording, backward with saved
// tensors (version-checked), saved_data and needs_input_grad; gradients
// against finite differences and, written with ops, twice differentiable
// (a saved output re-attached to its node); mark_non_differentiable; errors
// for a wrong number of gradients; and amp::custom_fwd / custom_bwd:
// cast_inputs runs the body in float32 with autocast off, custom_bwd runs
// backward under the autocast state forward saw.
#include <catch2/catch.hpp>

#include <any>
#include <cmath>
#include <vector>

#include <halfgrad.h>
#include <halfgrad/autograd/gradcheck.h>
#include <halfgrad/dispatch/node.h>  // grad_fn()->name

#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {

struct MyExp : autograd::Function<MyExp> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    CHECK_FALSE(autograd::grad_enabled());  // forward's ops record nothing
    Tensor y = exp(x);
    ctx.save_for_backward({y});  // the output itself
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const Tensor& grad) {
    return {mul(grad, ctx.saved_tensors()[0])};
  }
};

// x * w * scale, with a non-tensor argument kept in saved_data.
struct ScaledMul : autograd::Function<ScaledMul> {
  static int backward_calls;
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, const Tensor& w, double scale) {
    ctx.save_for_backward({x, w});
    ctx.saved_data["scale"] = scale;
    return mul(mul(x, w), scale);
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const Tensor& grad) {
    ++backward_calls;
    const auto s = ctx.saved_tensors();
    const double scale = std::any_cast<double>(ctx.saved_data.at("scale"));
    return {ctx.needs_input_grad(0) ? mul(mul(grad, s[1]), scale) : Tensor(),
            ctx.needs_input_grad(1) ? mul(mul(grad, s[0]), scale) : Tensor()};
  }
};
int ScaledMul::backward_calls = 0;

struct WrongCount : autograd::Function<WrongCount> {
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x, const Tensor& y) { return add(x, y); }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const Tensor& grad) { return {grad}; }
};

struct Mask : autograd::Function<Mask> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    Tensor m = gt(x, 0.0).to(x.dtype());
    ctx.mark_non_differentiable(m);
    return m;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const Tensor&) { return {Tensor()}; }
};

// PyTorch's AMP examples page: MyMM with custom_fwd / custom_bwd.
struct MyMM : autograd::Function<MyMM> {
  static DType backward_mm_dtype;
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
    return amp::custom_fwd(ctx, kCPU, std::nullopt, [&] {
      ctx.save_for_backward({a, b});
      return mm(a, b);
    });
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const Tensor& grad) {
    return amp::custom_bwd(ctx, [&] {
      const auto s = ctx.saved_tensors();
      Tensor ga = mm(grad, s[1].t());
      backward_mm_dtype = ga.dtype();
      return std::vector<Tensor>{ga, mm(s[0].t(), grad)};
    });
  }
};
DType MyMM::backward_mm_dtype = DType::Float64;

// ... and MyFloat32Func with cast_inputs = float32.
struct MyFloat32Func : autograd::Function<MyFloat32Func> {
  static DType seen;
  static bool autocast_in_backward;
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, const Tensor& w) {
    return amp::custom_fwd(ctx, kCPU, kFloat32, [&](const Tensor& x, const Tensor& w) {
      seen = x.dtype();
      ctx.save_for_backward({x, w});
      return mm(x, w);  // float32: autocast is off in here
    }, x, w);
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const Tensor& grad) {
    return amp::custom_bwd(ctx, [&] {
      autocast_in_backward = amp::is_autocast_enabled(kCPU);
      const auto s = ctx.saved_tensors();
      return std::vector<Tensor>{mm(grad, s[1].t()), mm(s[0].t(), grad)};
    });
  }
};
DType MyFloat32Func::seen = DType::Float64;
bool MyFloat32Func::autocast_in_backward = true;

}  // namespace

TEST_CASE("a custom Function records one node named after it, with gradients from its backward",
          "[autograd][function]") {
  const Tensor x = hgtest::leaf({2, 3});
  const Tensor y = MyExp::apply(x);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name == "MyExp");
  const auto xv = values(x), yv = values(y);
  for (size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == Approx(std::exp(xv[i])));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return MyExp::apply(in[0]); }, {x}).ok);
  // written with ops, backward is differentiable again: d2/dx2 exp = exp (the saved output re-attached)
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) { return MyExp::apply(in[0]); }, {x}).ok);
  const Tensor w = hgtest::leaf({2, 3});
  auto fn = [](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], in[1], 1.5); };
  CHECK(gradcheck(fn, {x, w}).ok);
  CHECK(gradgradcheck(fn, {x, w}).ok);
}

TEST_CASE("a custom Function: needs_input_grad, no graph without grad, in-place checks, errors",
          "[autograd][function][errors]") {
  const Tensor x = hgtest::leaf({3});
  const Tensor c = hgtest::uniform({3}, float64);
  ScaledMul::backward_calls = 0;
  sum(ScaledMul::apply(x, c, 2.0)).backward();  // only x needs a gradient
  CHECK(ScaledMul::backward_calls == 1);
  const auto gv = values(x.grad()), cv = values(c);
  for (size_t i = 0; i < 3; ++i) CHECK(gv[i] == Approx(2 * cv[i]));
  CHECK_FALSE(ScaledMul::apply(c, c, 2.0).requires_grad());  // no input requires grad: nothing recorded
  {
    no_grad guard;
    CHECK_FALSE(ScaledMul::apply(x, c, 2.0).requires_grad());
  }
  // a saved tensor changed in place before backward
  Tensor c2 = hgtest::uniform({3}, float64);
  const Tensor y = ScaledMul::apply(x, c2, 1.0);
  c2.add_(1.0);
  REQUIRE_THROWS_WITH(sum(y).backward(), Contains("ScaledMul backward") && Contains("modified by an in-place"));
  REQUIRE_THROWS_WITH(sum(WrongCount::apply(x, c)).backward(),
                      Contains("WrongCount backward returned 1 gradients, expected 2"));
  // mark_non_differentiable: the output carries no gradient
  const Tensor m = Mask::apply(x);
  CHECK_FALSE(m.requires_grad());
  CHECK_FALSE(m.grad_fn());
}

TEST_CASE("custom_fwd / custom_bwd: the AMP examples page's MyMM and MyFloat32Func", "[autograd][function][amp]") {
  const Tensor a = hgtest::uniform({4, 3}, float32).requires_grad_();
  const Tensor b = hgtest::uniform({3, 5}, float32).requires_grad_();
  Tensor y;
  {
    amp::autocast region(kCPU);  // bfloat16
    y = MyMM::apply(a, b);       // no cast_inputs: mm runs under autocast
  }
  CHECK(y.dtype() == DType::BFloat16);
  sum(y).backward();
  // custom_bwd: backward runs under autocast as forward did (outside it, a float32 mm of
  // a bfloat16 grad and float32 saved inputs would be a dtype error)
  CHECK(MyMM::backward_mm_dtype == DType::BFloat16);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().dtype() == DType::Float32);

  const Tensor x = hgtest::uniform({4, 3}, float32).requires_grad_();
  const Tensor w = hgtest::uniform({3, 2}, float32).requires_grad_();
  Tensor z;
  {
    amp::autocast region(kCPU);
    const Tensor xb = x.to(DType::BFloat16);  // a bfloat16 input is cast back to float32
    z = MyFloat32Func::apply(xb, w);
  }
  CHECK(MyFloat32Func::seen == DType::Float32);
  CHECK(z.dtype() == DType::Float32);
  sum(z).backward();
  CHECK_FALSE(MyFloat32Func::autocast_in_backward);  // forward ran with autocast off
  CHECK(x.grad().defined());
  CHECK(x.grad().dtype() == DType::Float32);
  // outside autocast, cast_inputs does nothing
  const Tensor xb = x.detach().to(DType::BFloat16);
  MyFloat32Func::apply(xb, w.detach().to(DType::BFloat16));
  CHECK(MyFloat32Func::seen == DType::BFloat16);
}
