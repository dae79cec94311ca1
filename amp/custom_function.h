#pragma once
// PyTorch's torch.amp.custom_fwd(device_type, cast_inputs) and custom_bwd,
// the decorators of a custom Function's forward and backward under autocast,
// as wrappers of their bodies (autograd/function.h):
//
//   struct MyMM : hg::autograd::Function<MyMM> {
//     static hg::Tensor forward(hg::autograd::FunctionCtx& ctx, const hg::Tensor& a, const hg::Tensor& b) {
//       return hg::amp::custom_fwd(ctx, hg::kCUDA, std::nullopt, [&] {
//         ctx.save_for_backward({a, b});
//         return hg::mm(a, b);
//       });
//     }
//     static std::vector<hg::Tensor> backward(hg::autograd::FunctionCtx& ctx, const hg::Tensor& grad) {
//       return hg::amp::custom_bwd(ctx, [&] {
//         auto s = ctx.saved_tensors();
//         return std::vector<hg::Tensor>{hg::mm(grad, s[1].t()), hg::mm(s[0].t(), grad)};
//       });
//     }
//   };
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/amp/autocast.h>
#include <halfgrad/autograd/function.h>

namespace halfgrad::amp {

namespace detail {
// PyTorch's _cast: floating tensors on `device_type`, float64 excepted.
inline Tensor cast_input(const Tensor& t, DeviceType device_type, DType dtype) {
  const bool eligible = t.defined() && is_floating(t.dtype()) && t.dtype() != DType::Float64 &&
                        t.device().type() == device_type;
  return eligible ? t.to(dtype) : t;
}
template <class T>
decltype(auto) cast_arg(T&& arg, DeviceType device_type, DType dtype) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    return cast_input(arg, device_type, dtype);
  } else if constexpr (std::is_same_v<std::decay_t<T>, std::vector<Tensor>>) {
    std::vector<Tensor> out;
    for (const Tensor& t : arg) out.push_back(cast_input(t, device_type, dtype));
    return out;
  } else {
    return std::forward<T>(arg);
  }
}
}  // namespace detail

// Runs forward's body. Without cast_inputs: as it is, under the caller's
// autocast state, which ctx keeps for custom_bwd. With cast_inputs, inside an
// enabled autocast region for device_type: the floating Tensor arguments on
// that device type (float64 excepted) are cast to *cast_inputs and the body
// runs with autocast disabled (so its ops run in that dtype); outside one, the
// body runs as it is. body(args...) receives the (cast) arguments.
template <class Body, class... Args>
auto custom_fwd(autograd::FunctionCtx& ctx, DeviceType device_type, std::optional<DType> cast_inputs, Body&& body,
                Args&&... args) {
  const bool enabled = is_autocast_enabled(device_type);
  ctx.autocast = {cast_inputs ? false : enabled, device_type, autocast_dtype(device_type)};
  if (!cast_inputs || !enabled) return std::forward<Body>(body)(std::forward<Args>(args)...);
  autocast off(device_type, std::nullopt, /*enabled=*/false);
  return std::forward<Body>(body)(detail::cast_arg(std::forward<Args>(args), device_type, *cast_inputs)...);
}

// Runs backward's body under the autocast state forward ran in (enabled or
// not, its dtype): the backward engine otherwise runs every formula without
// autocast.
template <class Body>
auto custom_bwd(const autograd::FunctionCtx& ctx, Body&& body) {
  AutocastAllowed allowed;
  autocast region(ctx.autocast.device, ctx.autocast.dtype, ctx.autocast.used);
  return std::forward<Body>(body)();
}

}  // namespace halfgrad::amp
