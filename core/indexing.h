#pragma once
// LibTorch's tensor indexing (torch::indexing): x.index({Slice(1, None, 2), None, Ellipsis, 0})
// is Python's x[1::2, None, ..., 0]; x.index_put_({...}, v) is x[...] = v. Integers, slices,
// None and Ellipsis give views; a tensor index (a bool mask or an int64 index tensor, one per
// index) reads into a new tensor, as Python's x[mask] and x[idx].
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <variant>

namespace halfgrad {
class Tensor;
struct TensorImpl;
}  // namespace halfgrad

namespace halfgrad::indexing {

// Python's None: inside index() a new dimension of size 1; inside Slice an
// omitted bound (Slice(None, 3) is `:3`). As in LibTorch, it is std::nullopt.
inline constexpr std::nullopt_t None = std::nullopt;

struct EllipsisIndexType {};
// Python's `...`: as many full slices as the other indices leave dimensions.
inline constexpr EllipsisIndexType Ellipsis{};

// Python's start:stop:step. Omitted bounds cover the dimension; negative bounds
// count from the end and out-of-range bounds clamp, as in Python. step must be
// positive (PyTorch has no negative steps).
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step.value_or(1)) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};

// One entry of index({...}): an integer (selects, removing the dimension),
// a Slice, None or Ellipsis ("..." also works, as in LibTorch), or a tensor:
// a bool mask over the next mask.dim() dimensions (selects the true elements
// into one dimension) or an int64 index tensor for the next dimension (its
// shape replaces that dimension; negative indices count from the end).
class TensorIndex {
 public:
  TensorIndex(int64_t i) : v_(i) {}                      // NOLINT(implicit)
  TensorIndex(int i) : v_(static_cast<int64_t>(i)) {}    // NOLINT(implicit)
  TensorIndex(Slice s) : v_(s) {}                        // NOLINT(implicit)
  TensorIndex(std::nullopt_t) : v_(std::nullopt) {}      // NOLINT(implicit)
  TensorIndex(EllipsisIndexType) : v_(Ellipsis) {}       // NOLINT(implicit)
  TensorIndex(const char* s);                            // NOLINT(implicit) "..." only
  TensorIndex(const Tensor& t);                          // NOLINT(implicit) bool mask or int64 indices
  TensorIndex(bool) = delete;  // PyTorch's x[True] is not supported

  bool is_integer() const { return std::holds_alternative<int64_t>(v_); }
  bool is_slice() const { return std::holds_alternative<Slice>(v_); }
  bool is_none() const { return std::holds_alternative<std::nullopt_t>(v_); }
  bool is_ellipsis() const { return std::holds_alternative<EllipsisIndexType>(v_); }
  bool is_tensor() const { return std::holds_alternative<std::shared_ptr<TensorImpl>>(v_); }
  int64_t integer() const { return std::get<int64_t>(v_); }
  const Slice& slice() const { return std::get<Slice>(v_); }
  Tensor tensor() const;

 private:
  std::variant<int64_t, Slice, std::nullopt_t, EllipsisIndexType, std::shared_ptr<TensorImpl>> v_;
};

}  // namespace halfgrad::indexing
