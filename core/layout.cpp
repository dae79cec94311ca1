#include <halfgrad/core/layout.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace halfgrad {

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HG_CHECK(da == db || da == 1 || db == 1,
             "{}: shapes {} and {} cannot be broadcast together (dimension {}: {} vs {})", op, shape_str(a),
             shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_broadcasts_to(std::string_view op, std::string_view what, const Shape& from, const Shape& to,
                         std::string_view remedy) {
  const Shape both = broadcast_shapes(op, to, from);  // the out-of-place check first
  HG_CHECK(both == to, "{}: {} of shape {} cannot be broadcast to shape {} (together they broadcast to {}){}", op, what,
           shape_str(from), shape_str(to), shape_str(both), remedy);
}

bool non_overlapping_and_dense(const Tensor& t) {
  // sizes 0 and 1 constrain nothing; the rest, by stride, must each step over the ones before
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1) dims.emplace_back(t.strides()[d], t.shape()[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

bool has_internal_overlap(const Tensor& t) {
  if (t.is_contiguous() || non_overlapping_and_dense(t)) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) return true;
  return false;  // PyTorch's TooHard: not reported
}

Overlap overlap(const Tensor& a, const Tensor& b) {
  if (a.is_same(b)) return Overlap::Full;
  if (a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return Overlap::No;
  if (!non_overlapping_and_dense(a) || !non_overlapping_and_dense(b)) return Overlap::TooHard;
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  const char* a1 = a0 + a.numel() * static_cast<int64_t>(itemsize(a.dtype()));
  const char* b1 = b0 + b.numel() * static_cast<int64_t>(itemsize(b.dtype()));
  if (a0 == b0 && a1 == b1) return a.strides() == b.strides() ? Overlap::Full : Overlap::Partial;
  return a0 < b1 && b0 < a1 ? Overlap::Partial : Overlap::No;
}

}  // namespace halfgrad
