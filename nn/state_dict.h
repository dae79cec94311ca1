#pragma once
// StateDict: name -> tensor in insertion order (PyTorch's OrderedDict), so a
// model's keys come out in registration order, "linear1.weight" first.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::nn {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  // Adds `key`, or replaces its tensor when it is already there (keeps its place).
  void insert(const std::string& key, const Tensor& value);
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  // nullptr when absent.
  const Tensor* find(const std::string& key) const;
  // The tensor under `key`, or an Error listing the keys there are.
  const Tensor& at(const std::string& key) const;
  bool erase(const std::string& key);

  std::vector<std::string> keys() const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in items_
};

}  // namespace halfgrad::nn
