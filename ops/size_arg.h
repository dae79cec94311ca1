#pragma once
// Size arguments of convolutions and pooling, as PyTorch takes them: one
// number for every spatial dim (`kernel_size=3`) or one per dim
// (`kernel_size=(3, 1)`; LibTorch's ExpandingArray). PaddingArg also takes
// PyTorch's strings "same" and "valid" (convolutions only).
//
//   hg::conv2d(x, w, b, /*stride=*/2, /*padding=*/1);
//   hg::conv2d(x, w, b, {2, 1}, {1, 0});
//   hg::conv2d(x, w, b, 1, "same");
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/core/error.h>

namespace halfgrad {

class SizeArg {
 public:
  // Integral template: `1` binds here exactly, never to a pointer or string overload.
  template <std::integral I>
  SizeArg(I v) : values_{static_cast<int64_t>(v)} {}  // NOLINT: implicit, like PyTorch's ints
  SizeArg(std::initializer_list<int64_t> v) : values_(v) {}
  SizeArg(std::vector<int64_t> v) : values_(std::move(v)) {}

  // The values for `nd` spatial dims: one value repeated, or exactly nd of them;
  // else an Error naming `op` and `what` (e.g. "conv2d", "stride").
  std::vector<int64_t> expand(int nd, std::string_view op, std::string_view what) const {
    if (values_.size() == 1) return std::vector<int64_t>(static_cast<size_t>(nd), values_[0]);
    HG_CHECK(values_.size() == static_cast<size_t>(nd),
             "{}: {} must be one number or {} numbers (one per spatial dim), got {}", op, what, nd, str());
    return values_;
  }
  const std::vector<int64_t>& values() const { return values_; }
  std::string str() const { return fmt::format("({})", fmt::join(values_, ", ")); }
  bool operator==(const SizeArg&) const = default;

 private:
  std::vector<int64_t> values_;
};

class PaddingArg {
 public:
  template <std::integral I>
  PaddingArg(I v) : sizes_(v) {}  // NOLINT
  PaddingArg(std::initializer_list<int64_t> v) : sizes_(v) {}
  PaddingArg(std::vector<int64_t> v) : sizes_(std::move(v)) {}
  PaddingArg(SizeArg v) : sizes_(std::move(v)) {}
  // "same" or "valid" (checked by the op, which names itself in the Error).
  PaddingArg(const char* mode) : sizes_(0), mode_(mode) {}
  PaddingArg(std::string_view mode) : sizes_(0), mode_(mode) {}
  PaddingArg(const std::string& mode) : sizes_(0), mode_(mode) {}

  bool is_mode() const { return !mode_.empty(); }
  const std::string& mode() const { return mode_; }  // "" when numeric
  const SizeArg& sizes() const { return sizes_; }
  std::string str() const { return is_mode() ? "'" + mode_ + "'" : sizes_.str(); }

 private:
  SizeArg sizes_;
  std::string mode_;
};

}  // namespace halfgrad
