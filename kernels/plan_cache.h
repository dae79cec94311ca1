#pragma once
// PlanCache<Key, Plan>: what a library call was planned into, made once per
// key and shared (internal). One class for the three libraries that plan:
// cuBLASLt (a matmul descriptor, layouts and the heuristic's algorithm,
// kernels/cuda/gemm.cu), cuDNN (an execution plan, kernels/cuda/cudnn_conv.cpp) and
// oneDNN (a primitive with its reorders, kernels/cpu/).
//
//  - A hit takes a shared lock only: threads that run known shapes never wait
//    for one that is planning a new one.
//  - A miss plans under a second lock, after looking again: one plan per key
//    even when threads race (planning is slow, and cuDNN's counters in the
//    tests count builds), and planning never holds the map's lock.
//  - make(key) may return nullptr ("the library has nothing for this"): that
//    answer is kept too, so the query is not repeated.
//  - Past max_entries (0: no bound) the map starts over, so inference over
//    ever-changing shapes cannot grow it without bound; a caller still holding
//    a plan keeps it alive (shared_ptr).
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>

namespace halfgrad::kernels {

template <typename Key, typename Plan>
class PlanCache {
 public:
  explicit PlanCache(size_t max_entries = 0) : max_entries_(max_entries) {}
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The plan for `key`; make(key) -> std::shared_ptr<const Plan> runs on the
  // first request only. `made`, if given, says whether this call made it.
  template <typename Make>
  std::shared_ptr<const Plan> get(const Key& key, Make&& make, bool* made = nullptr) {
    if (made) *made = false;
    if (auto found = find(key)) return *found;
    std::lock_guard planning(planning_);
    if (auto found = find(key)) return *found;  // planned by another thread while we waited
    std::shared_ptr<const Plan> plan = make(key);
    if (made) *made = true;
    std::unique_lock lock(mutex_);
    if (max_entries_ != 0 && plans_.size() >= max_entries_) plans_.clear();
    return plans_.try_emplace(key, std::move(plan)).first->second;
  }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return plans_.size();
  }

 private:
  // A copy of the cached entry (which may itself be nullptr), or nothing on a miss.
  std::optional<std::shared_ptr<const Plan>> find(const Key& key) const {
    std::shared_lock lock(mutex_);
    const auto it = plans_.find(key);
    if (it == plans_.end()) return std::nullopt;
    return it->second;
  }

  const size_t max_entries_;
  mutable std::shared_mutex mutex_;  // guards plans_
  std::mutex planning_;              // one make() at a time
  std::map<Key, std::shared_ptr<const Plan>> plans_;
};

}  // namespace halfgrad::kernels
