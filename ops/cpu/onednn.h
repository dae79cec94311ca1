#pragma once
// What every oneDNN user in ops/cpu/ shares (internal; only where
// HALFGRAD_WITH_ONEDNN): the one CPU engine, a stream per thread, and a cache of
// primitives per problem key, created once (a failure to create is cached too).
#if HALFGRAD_WITH_ONEDNN
#include <dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace halfgrad::cpu::onednn {

inline const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A CPU stream is cheap, but oneDNN does not promise one may be used from two
// threads at once, so each thread gets its own (created once).
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Key -> shared_ptr<const Value>, at most kMaxEntries (then cleared: shapes
// that keep changing must not grow it without bound). create(key) returns the
// value, or nullptr when oneDNN has no implementation; that answer is kept too.
template <typename Key, typename Value>
class PrimitiveCache {
 public:
  template <typename Create>
  std::shared_ptr<const Value> get(const Key& key, Create&& create) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    std::shared_ptr<const Value> created = create(key);  // outside the lock: creation is slow
    std::lock_guard lock(mutex_);
    if (cache_.size() >= kMaxEntries) cache_.clear();
    return cache_.try_emplace(key, std::move(created)).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 1024;
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Value>> cache_;
};

}  // namespace halfgrad::cpu::onednn
#endif  // HALFGRAD_WITH_ONEDNN
