// CPU sort, the scatter of sort/topk's backward, cumsum and randperm. Rows are
// independent, so the loops run in parallel over rows. The sort order is the
// one the CUDA backend's integer keys give (kernels/cuda/sort.cu): NaN above
// everything and all NaNs equal, -0.0 == +0.0, ties in their original order
// (std::stable_sort), so both backends return the same indices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include <halfgrad/core/philox.h>
#include <halfgrad/core/random.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/loops.h>

namespace halfgrad::kernels::cpu {

namespace {

// What a comparison runs in: float for the half types, the type itself otherwise.
template <typename T>
using key_t = acc_t<T>;

template <typename K>
bool is_nan(K x) {
  if constexpr (std::is_floating_point_v<K>) return std::isnan(x);
  else return false;
}

// a before b in ascending order (a strict weak order: NaNs form one class at the top).
template <typename K>
bool less_nan_last(K a, K b) {
  return !is_nan(a) && (is_nan(b) || a < b);
}

template <typename T>
void sort_rows(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  const int64_t n = in.dim() == 0 ? 1 : in.shape().back();
  if (n == 0 || in.numel() == 0) return;
  const int64_t rows = in.numel() / n;
  const auto* x = static_cast<const T*>(in.data_ptr());
  auto* v = static_cast<T*>(values.data_ptr());
  auto* idx = static_cast<int64_t*>(indices.data_ptr());
#pragma omp parallel if (in.numel() >= 2 * kParallelGrain && rows > 1)
  {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::vector<key_t<T>> keys(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      for (int64_t j = 0; j < n; ++j) keys[j] = static_cast<key_t<T>>(row[j]);
      std::iota(perm.begin(), perm.end(), int64_t{0});
      if (descending)
        std::stable_sort(perm.begin(), perm.end(),
                         [&](int64_t a, int64_t b) { return less_nan_last(keys[b], keys[a]); });
      else
        std::stable_sort(perm.begin(), perm.end(),
                         [&](int64_t a, int64_t b) { return less_nan_last(keys[a], keys[b]); });
      for (int64_t j = 0; j < n; ++j) {
        idx[r * n + j] = perm[j];
        v[r * n + j] = row[perm[j]];  // the element itself: NaN payloads and -0.0 kept
      }
    }
  }
}

// float32 accumulates in float64 on the CPU (as PyTorch's CPU cumsum); the
// half types in float32; float64 and int64 in themselves.
template <typename T>
using cum_acc_t = std::conditional_t<std::is_same_v<T, float>, double, acc_t<T>>;

template <typename T>
void cumsum_rows(const Tensor& in, const Tensor& out, bool reverse) {
  const int64_t n = in.dim() == 0 ? 1 : in.shape().back();
  if (n == 0 || in.numel() == 0) return;
  const int64_t rows = in.numel() / n;
  const auto* x = static_cast<const T*>(in.data_ptr());
  auto* o = static_cast<T*>(out.data_ptr());
#pragma omp parallel for schedule(static) if (in.numel() >= 2 * kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    cum_acc_t<T> acc = 0;
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = reverse ? n - 1 - jj : jj;
      acc += static_cast<cum_acc_t<T>>(static_cast<acc_t<T>>(x[r * n + j]));
      o[r * n + j] = static_cast<T>(static_cast<acc_t<T>>(acc));  // one rounding (float64 -> float32: one)
    }
  }
}

template <typename T>
void scatter_rows(const Tensor& g, const Tensor& indices, const Tensor& grad_in) {
  const int64_t k = g.dim() == 0 ? 1 : g.shape().back();
  const int64_t n = grad_in.dim() == 0 ? 1 : grad_in.shape().back();
  if (k == 0 || g.numel() == 0) return;
  const int64_t rows = g.numel() / k;
  const auto* gp = static_cast<const T*>(g.data_ptr());
  const auto* ip = static_cast<const int64_t*>(indices.data_ptr());
  auto* out = static_cast<T*>(grad_in.data_ptr());
#pragma omp parallel for schedule(static) if (g.numel() >= 2 * kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t t = ip[r * k + j];
      if (t >= 0 && t < n) out[r * n + t] = gp[r * k + j];  // distinct indices: plain stores
    }
}

}  // namespace

void sort(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  HG_DISPATCH_ALL(in.dtype(), "sort", [&] { sort_rows<scalar_t>(in, values, indices, descending); });
}

void take_along_dim_backward(const Tensor& g, const Tensor& indices, const Tensor& grad_in) {
  HG_DISPATCH_FLOATING(g.dtype(), "take_along_dim_backward", [&] { scatter_rows<scalar_t>(g, indices, grad_in); });
}

void cumsum(const Tensor& in, const Tensor& out, bool reverse) {
  HG_DISPATCH_NUMERIC(in.dtype(), "cumsum", [&] { cumsum_rows<scalar_t>(in, out, reverse); });
}

// Fisher-Yates (Durstenfeld) from the last element down: step i swaps element i
// with one drawn uniformly from [0, i], the draw coming from Philox counter
// offset + i of n counters reserved at once. The draws do not depend on the
// swaps, so they are made first, in parallel; the swaps are sequential. 64
// random bits modulo i + 1: a bias below 2^-32 for n < 2^32.
void randperm(const Tensor& out, Generator* generator) {
  const int64_t n = out.numel();
  auto* p = static_cast<int64_t*>(out.data_ptr());
  std::iota(p, p + n, int64_t{0});
  if (n < 2) return;
  const rng::PhiloxState s = reserve(static_cast<uint64_t>(n), generator);
  std::vector<int64_t> j(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n >= 2 * kParallelGrain)
  for (int64_t i = 1; i < n; ++i)
    j[i] = philox::randint(philox::draw(s.seed, s.offset, static_cast<uint64_t>(i)), 0, i + 1);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[j[i]]);
}

}  // namespace halfgrad::kernels::cpu
