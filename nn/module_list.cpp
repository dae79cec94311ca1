#include <halfgrad/nn/module_list.h>

namespace halfgrad::nn {

Module& ModuleList::operator[](int64_t i) const {
  const int64_t n = static_cast<int64_t>(modules_.size());
  HG_CHECK(i >= -n && i < n, "ModuleList: index {} is out of range for {} modules (valid: {} to {})", i, n, -n,
           n - 1);
  return *modules_[static_cast<size_t>(i < 0 ? i + n : i)];
}

ModuleList& ModuleList::extend(const ModuleList& other) {
  HG_CHECK(&other != this, "ModuleList::extend: a list cannot extend itself; copy its modules into another list");
  // owned modules are shared with `other`; ones it holds by reference are held by reference here too
  for (size_t i = 0; i < other.modules_.size(); ++i) {
    if (other.owned_[i]) push_back(other.owned_[i]);
    else push_back(*other.modules_[i]);
  }
  return *this;
}

}  // namespace halfgrad::nn
