#pragma once
// Seeing the numerics of mixed precision on a model's own tensors: a histogram
// of log2|x| (one bin per binade), the figure of "Mixed Precision Training"
// (Micikevicius et al., 2018, Figure 3), and what it says about float16's and
// bfloat16's ranges. The counts accumulate on the tensor's device (no host
// sync); Log2Histogram::read copies them to the host once.
//
//   auto counts = amp::Log2Histogram::zeros(device);
//   for (auto& p : model.parameters()) amp::accumulate_log2_histogram(p.grad(), counts);
//   auto h = amp::Log2Histogram::read(counts);
//   h.share_below(std::ldexp(1.0, -24));   // would underflow float16 (below its smallest subnormal)
//
// Bins (kBins = 60):
//   0            zeros (+0 and -0)
//   1            0 < |x| < 2^-40
//   2 + (k + 40) the binade 2^k <= |x| < 2^(k+1), for k = -40 ... 15
//   58           finite |x| >= 2^16 (float16's largest finite value is 65504 < 2^16)
//   59           inf or NaN
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// Adds the counts of t's elements (float32, float16, bfloat16 or float64, any
// layout) into `counts`, an int64 tensor of Log2Histogram::kBins elements on
// t's device. With kStatsSize elements (kBins + 1), the last one also keeps
// the largest finite |x| seen (as the bits of a double: for non-negative
// doubles their order is the integers' order, so a max of integers is the max
// of the values). On CUDA it only queues kernels.
void accumulate_log2_histogram(const Tensor& t, const Tensor& counts);

// A histogram on the host.
struct Log2Histogram {
  static constexpr int kLowExp = -40, kHighExp = 16;  // the binades' range: 2^-40 to 2^16
  static constexpr int kBins = 60;
  static constexpr int kStatsSize = kBins + 1;  // the counts, then max |x|
  std::array<int64_t, kBins> counts{};
  double max_abs = 0.0;  // the largest finite |x| (0 when read from counts without it)

  // An int64 [kBins] (with_max: [kStatsSize]) tensor of zeros to accumulate into.
  static Tensor zeros(Device device, bool with_max = false);
  // The counts of such a tensor (one device-to-host copy).
  static Log2Histogram read(const Tensor& counts);
  // From a host pointer to kBins (with_max: kStatsSize) values.
  static Log2Histogram from(const int64_t* values, bool with_max);

  int64_t total() const;
  int64_t zeros_count() const { return counts[0]; }
  int64_t non_finite() const { return counts[kBins - 1]; }
  double share_zero() const;
  double share_non_finite() const;
  // The count in binade k (2^k <= |x| < 2^(k+1)), for k in [kLowExp, kHighExp).
  int64_t binade(int k) const;
  // Non-zero finite elements with |x| < threshold, counted exactly when the
  // threshold is a power of two in [2^kLowExp, 2^kHighExp] (float16's smallest
  // subnormal 2^-24 and smallest normal 2^-14 are), else an Error.
  int64_t below(double threshold) const;
  // below(threshold) / total() (0 for an empty histogram).
  double share_below(double threshold) const;
  // One line per non-empty bin: "2^-24  12345  0.52%", for printing.
  std::string str() const;
};

// A parameter whose .grad holds inf or NaN.
struct NonFiniteGrad {
  std::string name;    // as given (a module's named_parameters(): "features.3.conv.weight")
  std::string tensor;  // the gradient's describe(): dtype, shape, device
  int64_t inf = 0, nan = 0;
};
// Every parameter of `named` whose gradient holds an inf or a NaN, in the
// order given: after a skipped step, which ones overflowed. Reads two counts
// per gradient (a device sync each on CUDA): a diagnosis, not for every step.
std::vector<NonFiniteGrad> non_finite_grads(const std::vector<std::pair<std::string, Tensor>>& named);
// "grad of fc2.weight (float32[256, 256] cpu) holds 3 inf, 0 NaN; ..." or
// "no gradient holds inf or NaN".
std::string describe(const std::vector<NonFiniteGrad>& found);

}  // namespace halfgrad::amp
