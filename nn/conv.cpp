#include <halfgrad/nn/conv.h>

#include <fmt/format.h>

#include <cmath>

#include <halfgrad/nn/init.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

namespace {
// Python's tuple repr: "(3,)" for one element, "(3, 3)" for two.
std::string tuple_str(const std::vector<int64_t>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}
bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}
}  // namespace

namespace detail {

ConvNd::ConvNd(const char* name, int nd, bool transposed_, int64_t in, int64_t out, const SizeArg& k,
               const SizeArg& stride_, const PaddingArg& padding_, const SizeArg& dilation_,
               const SizeArg& output_padding_, int64_t groups_, bool has_bias, const std::string& padding_mode_)
    : in_channels(in), out_channels(out), groups(groups_), transposed(transposed_), padding_mode(padding_mode_) {
  HG_CHECK(groups > 0, "{}: groups must be a positive integer, got {}", name, groups);
  HG_CHECK(in >= 0 && out >= 0, "{}: in_channels ({}) and out_channels ({}) must be non-negative", name, in, out);
  HG_CHECK(in % groups == 0, "{}: in_channels ({}) must be divisible by groups ({})", name, in, groups);
  HG_CHECK(out % groups == 0, "{}: out_channels ({}) must be divisible by groups ({})", name, out, groups);
  HG_CHECK(padding_mode == "zeros",
           "{}: padding_mode '{}' is not supported yet (only 'zeros'; PyTorch also has 'reflect', 'replicate' and "
           "'circular')",
           name, padding_mode);
  kernel_size = k.expand(nd, name, "kernel_size");
  stride = stride_.expand(nd, name, "stride");
  dilation = dilation_.expand(nd, name, "dilation");
  output_padding = output_padding_.expand(nd, name, "output_padding");
  for (int64_t v : kernel_size) HG_CHECK(v > 0, "{}: kernel_size must be positive, got {}", name, k.str());
  for (int64_t v : stride) HG_CHECK(v > 0, "{}: stride must be positive, got {}", name, stride_.str());
  for (int64_t v : dilation) HG_CHECK(v > 0, "{}: dilation must be positive, got {}", name, dilation_.str());
  if (padding_.is_mode()) {
    padding_string = padding_.mode();
    HG_CHECK(padding_string == "same" || padding_string == "valid",
             "{}: padding must be a number, one per spatial dim, 'same' or 'valid', got '{}'", name, padding_string);
    HG_CHECK(padding_string != "same" || all_equal(stride, 1),
             "{}: padding='same' is not supported for strided convolutions (stride {})", name, tuple_str(stride));
    padding = std::vector<int64_t>(static_cast<size_t>(nd), 0);
  } else {
    padding = padding_.sizes().expand(nd, name, "padding");
    for (int64_t v : padding) HG_CHECK(v >= 0, "{}: padding must be non-negative, got {}", name, padding_.str());
  }
  Shape wshape = transposed ? Shape{in, out / groups} : Shape{out, in / groups};
  wshape.insert(wshape.end(), kernel_size.begin(), kernel_size.end());
  weight = empty(wshape);
  register_parameter("weight", weight);
  if (has_bias) {
    bias = empty({out});
    register_parameter("bias", bias);
  }
  reset_parameters();
}

PaddingArg ConvNd::padding_arg() const {
  if (!padding_string.empty()) return PaddingArg(padding_string);
  return PaddingArg(padding);
}

void ConvNd::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string ConvNd::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, tuple_str(kernel_size),
                              tuple_str(stride));
  if (!padding_string.empty()) s += ", padding=" + padding_string;
  else if (!all_equal(padding, 0)) s += ", padding=" + tuple_str(padding);
  if (!all_equal(dilation, 1)) s += ", dilation=" + tuple_str(dilation);
  if (!all_equal(output_padding, 0)) s += ", output_padding=" + tuple_str(output_padding);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != "zeros") s += ", padding_mode=" + padding_mode;
  return s;
}

}  // namespace detail

#define HG_CONV_LAYER(Name, nd, fn)                                                                             \
  Name::Name(int64_t in, int64_t out, SizeArg k, SizeArg s, PaddingArg p, SizeArg d, int64_t g, bool b,         \
             std::string mode)                                                                                  \
      : ConvNd(#Name, nd, false, in, out, k, s, p, d, 0, g, b, mode) {}                                         \
  Tensor Name::forward(const Tensor& x) const { return fn(x, weight, bias, stride, padding_arg(), dilation, groups); }

HG_CONV_LAYER(Conv1d, 1, conv1d)
HG_CONV_LAYER(Conv2d, 2, conv2d)
HG_CONV_LAYER(Conv3d, 3, conv3d)
#undef HG_CONV_LAYER

#define HG_CONV_T_LAYER(Name, nd, fn)                                                                            \
  Name::Name(int64_t in, int64_t out, SizeArg k, SizeArg s, SizeArg p, SizeArg op, int64_t g, bool b, SizeArg d) \
      : ConvNd(#Name, nd, true, in, out, k, s, PaddingArg(p), d, op, g, b, "zeros") {                             \
    for (int i = 0; i < nd; ++i) {                                                                                 \
      HG_CHECK(output_padding[i] >= 0 && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]),     \
               #Name ": output padding must be smaller than either stride or dilation, but got output_padding {}, " \
                     "stride {}, dilation {}",                                                                    \
               tuple_str(output_padding), tuple_str(stride), tuple_str(dilation));                                \
    }                                                                                                              \
  }                                                                                                                \
  Tensor Name::forward(const Tensor& x) const {                                                                    \
    return fn(x, weight, bias, stride, padding, output_padding, groups, dilation);                                 \
  }

HG_CONV_T_LAYER(ConvTranspose1d, 1, conv_transpose1d)
HG_CONV_T_LAYER(ConvTranspose2d, 2, conv_transpose2d)
HG_CONV_T_LAYER(ConvTranspose3d, 3, conv_transpose3d)
#undef HG_CONV_T_LAYER

}  // namespace halfgrad::nn
