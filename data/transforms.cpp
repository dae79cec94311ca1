// Normalize (data/transforms.h): one broadcast subtract and divide. Pad: a
// filled tensor with the input copied into its middle.
#include <halfgrad/data/transforms.h>

#include <cmath>

#include <halfgrad/ops/ops.h>

namespace halfgrad::data {

Normalize::Normalize(std::vector<double> m, std::vector<double> s) : mean(std::move(m)), std(std::move(s)) {
  HG_CHECK(!mean.empty() && mean.size() == std.size(),
           "Normalize: mean has {} values and std {}; give one per channel (or one for all), the same number",
           mean.size(), std.size());
  for (size_t c = 0; c < std.size(); ++c)
    HG_CHECK(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] > 0,
             "Normalize: channel {} has mean {} and std {}; both must be finite and std positive", c, mean[c],
             std[c]);
}

Tensor Normalize::operator()(const Tensor& x) const {
  HG_CHECK(x.is_floating_point(), "Normalize: expected a floating tensor, got {}; convert first (x.to(kFloat))",
           x.describe());
  HG_CHECK(x.dim() >= 3, "Normalize: expected [..., C, H, W] (channels at dimension -3), got {}", x.describe());
  const auto channels = static_cast<int64_t>(mean.size());
  const int64_t c = x.size(x.dim() - 3);
  HG_CHECK(channels == 1 || channels == c, "Normalize: {} has {} channels (dimension -3) but {} mean/std values",
           x.describe(), c, channels);
  const Tensor m = tensor(mean, {channels, 1, 1}, TensorOptions(x.dtype(), x.device()));
  const Tensor s = tensor(std, {channels, 1, 1}, TensorOptions(x.dtype(), x.device()));
  return div(sub(x, m), s);
}

Example Normalize::operator()(Example e) const {
  e.input = (*this)(e.input);
  return e;
}

Pad::Pad(int64_t p, double f) : padding(p), fill(f) {
  HG_CHECK(padding >= 0, "Pad: padding must be >= 0, got {}", padding);
}

Tensor Pad::operator()(const Tensor& x) const {
  HG_CHECK(x.dim() >= 2, "Pad: expected [..., H, W], got {}", x.describe());
  if (padding == 0) return x;
  Shape shape = x.shape();
  shape[shape.size() - 2] += 2 * padding;
  shape.back() += 2 * padding;
  Tensor out = full(shape, fill, x.options());
  out.narrow(x.dim() - 2, padding, x.size(x.dim() - 2)).narrow(x.dim() - 1, padding, x.size(x.dim() - 1)).copy_(x);
  return out;
}

Example Pad::operator()(Example e) const {
  e.input = (*this)(e.input);
  return e;
}

}  // namespace halfgrad::data
