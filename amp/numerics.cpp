// The log2 histogram (amp/numerics.h): the CPU loop here, CUDA tensors to
// amp/cuda/numerics.cu; the bin of a value in amp/numerics_math.h.
#include <halfgrad/amp/numerics.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/amp/numerics_math.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/half.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/amp/cuda/numerics_cuda.h>
#endif

namespace halfgrad::amp {

static_assert(Log2Histogram::kBins == numerics::kBins && Log2Histogram::kLowExp == numerics::kLowExp &&
              Log2Histogram::kHighExp == numerics::kHighExp);

namespace {

constexpr int64_t kChunk = 1 << 16;  // elements per OpenMP task

// out: the counts, then (with_max) the bits of the largest finite |x| as a double.
template <typename T>
void histogram_cpu(const T* p, int64_t n, int64_t* out, bool with_max) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> partial(static_cast<size_t>(chunks * numerics::kBins), 0);
  std::vector<double> partial_max(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t* h = partial.data() + c * numerics::kBins;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    A m = 0;
    for (int64_t i = c * kChunk; i < end; ++i) {
      const A v = static_cast<A>(p[i]);
      const int b = numerics::log2_bin<A>(v);
      ++h[b];
      if (with_max && b != numerics::kBinNonFinite) m = std::max(m, std::abs(v));
    }
    partial_max[static_cast<size_t>(c)] = static_cast<double>(m);
  }
  for (int64_t c = 0; c < chunks; ++c)
    for (int b = 0; b < numerics::kBins; ++b) out[b] += partial[static_cast<size_t>(c * numerics::kBins + b)];
  if (with_max) {
    const double m = *std::max_element(partial_max.begin(), partial_max.end());
    out[numerics::kBins] = std::max(out[numerics::kBins], std::bit_cast<int64_t>(m));
  }
}

}  // namespace

void accumulate_log2_histogram(const Tensor& t, const Tensor& counts) {
  HG_CHECK(t.defined() && counts.defined(), "accumulate_log2_histogram: undefined tensor (tensor {}, counts {})",
           t.defined() ? t.describe() : "undefined", counts.defined() ? counts.describe() : "undefined");
  HG_CHECK(is_floating(t.dtype()),
           "accumulate_log2_histogram: {} is not floating; the histogram is of float32, float16, bfloat16 or "
           "float64 values",
           t.describe());
  HG_CHECK(counts.dtype() == DType::Int64 && counts.dim() == 1 &&
               (counts.numel() == Log2Histogram::kBins || counts.numel() == Log2Histogram::kStatsSize) &&
               counts.is_contiguous(),
           "accumulate_log2_histogram: counts {} must be a contiguous int64 tensor of {} elements ({} with the "
           "max |x|; Log2Histogram::zeros(device, with_max) makes one)",
           counts.describe(), Log2Histogram::kBins, Log2Histogram::kStatsSize);
  const bool with_max = counts.numel() == Log2Histogram::kStatsSize;
  HG_CHECK(t.device() == counts.device(),
           "accumulate_log2_histogram: tensor {} and counts {} are on different devices; make the counts with "
           "Log2Histogram::zeros({})",
           t.describe(), counts.describe(), t.device().str());
  if (t.numel() == 0) return;
  // any layout: the values, not their order, matter; dense tensors are read in place
  const Tensor d = ops::non_overlapping_and_dense(t) ? t : t.contiguous();
#if HALFGRAD_WITH_CUDA
  if (d.device().is_cuda()) return cuda_kernels::accumulate_log2_histogram(d, counts, with_max);
#endif
  int64_t* out = counts.data<int64_t>();
  // a dense tensor's elements are the numel() values from its lowest address
  HG_DISPATCH_FLOATING(d.dtype(), "accumulate_log2_histogram",
                       [&] { histogram_cpu<scalar_t>(static_cast<const scalar_t*>(d.data_ptr()), d.numel(), out, with_max); });
}

Tensor Log2Histogram::zeros(Device device, bool with_max) {
  return halfgrad::zeros({with_max ? kStatsSize : kBins}, TensorOptions(DType::Int64, device));
}

Log2Histogram Log2Histogram::read(const Tensor& counts) {
  HG_CHECK(counts.defined() && counts.dtype() == DType::Int64 && (counts.numel() == kBins || counts.numel() == kStatsSize),
           "Log2Histogram::read: expected an int64 tensor of {} counts (or {} with the max), got {}", kBins, kStatsSize,
           counts.defined() ? counts.describe() : "undefined");
  const Tensor host = counts.to(Device::cpu()).contiguous();
  return from(host.data<int64_t>(), counts.numel() == kStatsSize);
}

Log2Histogram Log2Histogram::from(const int64_t* values, bool with_max) {
  Log2Histogram h;
  for (int b = 0; b < kBins; ++b) h.counts[static_cast<size_t>(b)] = values[b];
  if (with_max) h.max_abs = std::bit_cast<double>(values[kBins]);
  return h;
}

double Log2Histogram::share_zero() const {
  const int64_t n = total();
  return n == 0 ? 0.0 : static_cast<double>(zeros_count()) / static_cast<double>(n);
}

double Log2Histogram::share_non_finite() const {
  const int64_t n = total();
  return n == 0 ? 0.0 : static_cast<double>(non_finite()) / static_cast<double>(n);
}

int64_t Log2Histogram::total() const {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

int64_t Log2Histogram::binade(int k) const {
  HG_CHECK(k >= kLowExp && k < kHighExp, "Log2Histogram::binade: k = {} is outside the histogram's binades [{}, {})",
           k, kLowExp, kHighExp);
  return counts[static_cast<size_t>(numerics::kBinFirstBinade + (k - kLowExp))];
}

int64_t Log2Histogram::below(double threshold) const {
  int e = 0;
  const double m = std::frexp(threshold, &e);
  const int k = e - 1;  // threshold = 2^k when m == 0.5
  HG_CHECK(m == 0.5 && k >= kLowExp && k <= kHighExp,
           "Log2Histogram::below: the threshold {} must be a power of two from 2^{} to 2^{} (the bins are binades); "
           "for float16 use 2^-24 (smallest subnormal) or 2^-14 (smallest normal)",
           threshold, kLowExp, kHighExp);
  int64_t n = counts[numerics::kBinBelow];
  for (int b = kLowExp; b < k; ++b) n += binade(b);
  return n;
}

double Log2Histogram::share_below(double threshold) const {
  const int64_t n = total();
  return n == 0 ? 0.0 : static_cast<double>(below(threshold)) / static_cast<double>(n);
}

std::string Log2Histogram::str() const {
  const double n = static_cast<double>(std::max<int64_t>(total(), 1));
  std::string s;
  auto line = [&](const std::string& label, int64_t c) {
    if (c > 0) s += fmt::format("{:>10} {:>12} {:>7.2f}%\n", label, c, 100.0 * static_cast<double>(c) / n);
  };
  line("0", counts[numerics::kBinZero]);
  line(fmt::format("<2^{}", kLowExp), counts[numerics::kBinBelow]);
  for (int k = kLowExp; k < kHighExp; ++k) line(fmt::format("2^{}", k), binade(k));
  line(fmt::format(">=2^{}", kHighExp), counts[numerics::kBinAbove]);
  line("inf/nan", counts[numerics::kBinNonFinite]);
  return s;
}

std::vector<NonFiniteGrad> non_finite_grads(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<NonFiniteGrad> found;
  for (const auto& [name, p] : named) {
    if (!p.defined() || !p.grad().defined() || !is_floating(p.grad().dtype())) continue;
    const Tensor g = p.grad().detach();
    const int64_t inf = sum(isinf(g)).item<int64_t>(), nan = sum(isnan(g)).item<int64_t>();
    if (inf + nan > 0) found.push_back({name, g.describe(), inf, nan});
  }
  return found;
}

std::string describe(const std::vector<NonFiniteGrad>& found) {
  if (found.empty()) return "no gradient holds inf or NaN";
  std::string s;
  for (const NonFiniteGrad& f : found) {
    if (!s.empty()) s += "; ";
    s += fmt::format("grad of {} ({}) holds {} inf, {} NaN", f.name, f.tensor, f.inf, f.nan);
  }
  return s;
}

}  // namespace halfgrad::amp
