#pragma once
// Sorting, top-k, cumulative sums and random permutations (PyTorch's
// torch.sort / argsort / topk / cumsum / randperm). Included by ops/ops.h.
//
// Order: ascending by value with NaN as the largest value (all NaNs equal,
// after +inf), -0.0 equal to +0.0. Ties always keep their original order:
// every sort is stable, also with stable=false (PyTorch allows any order
// there, so this is one of the allowed answers). The CPU and CUDA backends
// therefore return the same values and the same indices.
#include <cstdint>
#include <optional>
#include <tuple>

#include <halfgrad/core/generator.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad {

// Values and int64 indices along `dim`, as torch::sort: values[..., j, ...] ==
// x[..., indices[..., j, ...], ...]. Descending puts NaN first. Every dtype
// (bool sorts false before true). Backward (values): the gradient goes back to
// the source position of each value.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The indices of sort(x, dim, descending) (no gradient).
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (largest=false: smallest) values along `dim` and their int64
// indices, as torch::topk: an Error unless 0 <= k <= x.size(dim) (a 0-d tensor
// counts as size 1, and gives its element for k = 0 too, as PyTorch). Results are always sorted (sorted=false allows any order;
// we give the sorted one); ties: the lower index first.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
// Inclusive cumulative sum along `dim`, as torch::cumsum. With `dtype` the input
// is cast to it first; without, bool and int64 give int64 and floating dtypes
// keep theirs. float16/bfloat16 accumulate in float32 and round each output once.
// Backward: the reversed cumulative sum of the gradient.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// A random permutation of 0..n-1 (int64 unless a dtype is given; a floating
// dtype must hold n - 1 exactly) from the device's generator (core/random.h):
// the same seed and device give the same permutation. CPU: a Fisher-Yates
// shuffle on the Philox stream; CUDA: a stable sort of 64-bit random keys. The
// two devices give different permutations for the same seed.
Tensor randperm(int64_t n, TensorOptions options = {});
// The same from a Generator (torch.randperm(n, generator=g)); std::nullopt: the global one.
Tensor randperm(int64_t n, std::optional<Generator> generator, TensorOptions options = {});
// torch.multinomial: num_samples indices (int64) per row of the 1-d [n] or 2-d
// [rows, n] non-negative weights `input` (floating, not necessarily
// normalised), with or without replacement, from `generator` or the global
// generator. PyTorch's errors: a negative, infinite or NaN weight, a row
// summing to 0, num_samples < 1, num_samples > n without replacement; and
// (as PyTorch before 1.11) fewer positive weights in a row than num_samples
// without replacement. On CUDA the checks read the weights' summary on the
// host (a device sync, as in PyTorch). CPU and CUDA give the same indices for
// the same seed (kernels/kernel_list.h, multinomial).
Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement = false,
                   std::optional<Generator> generator = std::nullopt);

}  // namespace halfgrad
