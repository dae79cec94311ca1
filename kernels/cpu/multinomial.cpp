// CPU torch.multinomial (kernels/kernel_list.h): the arithmetic of
// kernels/multinomial_math.h, which the CUDA backend runs too. Rows are
// independent: the loops run in parallel over rows.
#include <algorithm>
#include <numeric>
#include <vector>

#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/loops.h>
#include <halfgrad/kernels/multinomial_math.h>

namespace halfgrad::kernels::cpu {

namespace {
namespace mm = multinomial_math;

// Row r of the contiguous [rows, n] weights, in double.
template <typename T>
void row_in_double(const Tensor& weights, int64_t r, std::vector<double>& w) {
  const int64_t n = weights.shape()[1];
  const T* p = static_cast<const T*>(weights.data_ptr()) + r * n;
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<double>(static_cast<acc_t<T>>(p[i]));
}

// Lane-local prefix sums and the lanes' starts, in the order the CUDA block
// adds them (kernels/multinomial_math.h).
void lane_sums(const std::vector<double>& w, std::vector<double>& prefix, std::vector<double>& start) {
  const int64_t n = static_cast<int64_t>(w.size()), size = mm::lane_size(n);
  start[0] = 0.0;
  for (int64_t t = 0; t < mm::kLanes; ++t) {
    double acc = 0.0;
    for (int64_t i = t * size; i < std::min(n, (t + 1) * size); ++i) {
      acc += w[i];
      prefix[i] = acc;
    }
    start[t + 1] = start[t] + acc;
  }
}

template <typename T>
void multinomial_rows(const Tensor& weights, bool replacement, const Tensor& out, Generator* generator) {
  const int64_t rows = weights.shape()[0], n = weights.shape()[1], k = out.shape()[1];
  auto* o = static_cast<int64_t*>(out.data_ptr());
  const uint64_t per_row = static_cast<uint64_t>(replacement ? k : n);
  const rng::PhiloxState s = reserve(static_cast<uint64_t>(rows) * per_row, generator);
#pragma omp parallel if (rows * n >= 2 * kParallelGrain)
  {
    std::vector<double> w(n), prefix(n), start(mm::kLanes + 1);
    std::vector<int64_t> order(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      row_in_double<T>(weights, r, w);
      const uint64_t base = static_cast<uint64_t>(r) * per_row;
      if (replacement) {
        lane_sums(w, prefix, start);
        for (int64_t j = 0; j < k; ++j) {
          const philox::Words words = philox::draw(s.seed, s.offset, base + static_cast<uint64_t>(j));
          o[r * k + j] = mm::sample_row(prefix.data(), start.data(), n, philox::unit53(words.x[0], words.x[1]));
        }
      } else {
        for (int64_t i = 0; i < n; ++i)
          w[i] = mm::race_key(w[i], philox::draw(s.seed, s.offset, base + static_cast<uint64_t>(i)));
        std::iota(order.begin(), order.end(), int64_t{0});
        // the k largest keys, ties to the lower index (the CUDA backend's stable descending sort)
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int64_t a, int64_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
        std::copy(order.begin(), order.begin() + k, o + r * k);
      }
    }
  }
}
}  // namespace

void multinomial(const Tensor& weights, bool replacement, const Tensor& out, Generator* generator) {
  HG_DISPATCH_FLOATING(weights.dtype(), "multinomial",
                       [&] { multinomial_rows<scalar_t>(weights, replacement, out, generator); });
}

}  // namespace halfgrad::kernels::cpu
