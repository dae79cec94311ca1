#include <halfgrad/nn/state_dict.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace halfgrad::nn {

void StateDict::insert(const std::string& key, const Tensor& value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = value;
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, value);
}

const Tensor* StateDict::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(const std::string& key) const {
  const Tensor* t = find(key);
  HG_CHECK(t != nullptr, "StateDict: no key \"{}\"; the keys are [{}]", key, fmt::join(keys(), ", "));
  return *t;
}

bool StateDict::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
  index_.erase(it);
  for (auto& [k, i] : index_)
    if (i > pos) --i;
  return true;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

}  // namespace halfgrad::nn
