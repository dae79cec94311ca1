// The caching host allocator (core/host_cache.h): size classes, a free list per
// class, one mutex, counters.
#include <halfgrad/core/host_cache.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include <halfgrad/core/error.h>

namespace halfgrad::host_memory {

namespace {

#if defined(__SANITIZE_ADDRESS__)
#define HG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's spelling
#define HG_ASAN 1
#endif
#endif
#if defined(HG_ASAN)
constexpr bool kCachingByDefault = false;  // ASan must see every free
#else
constexpr bool kCachingByDefault = true;
#endif

constexpr size_t kMinBlock = 64;  // also the alignment
constexpr int kClassesPerOctave = 4;
constexpr int kOctaves = 64;
// From here up a block is "large" (PyTorch's CUDA allocator draws its line
// between small and large blocks at 1 MiB too): few in number, so a cached
// one may serve a smaller request (see allocate).
constexpr size_t kLargeBlock = size_t{1} << 20;

// Class index of n: 0 for n <= 64, else 2^k * (1 + s/4) for the smallest such
// size >= n (s = 1..4), the class's bytes rounded up to whole 64-byte lines
// (aligned_alloc wants a multiple of the alignment).
size_t class_bytes(int index) {
  if (index == 0) return kMinBlock;
  const int k = (index - 1) / kClassesPerOctave + 6, s = (index - 1) % kClassesPerOctave + 1;
  const size_t base = size_t{1} << k;
  const size_t bytes = base + static_cast<size_t>(s) * (base / kClassesPerOctave);
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

struct SizeClass {
  int index;
  size_t bytes;
};
SizeClass size_class(size_t n) {
  if (n <= kMinBlock) return {0, kMinBlock};
  const int k = std::bit_width(n - 1) - 1;  // 2^k < n <= 2^(k+1), k >= 6
  const size_t base = size_t{1} << k, step = base / kClassesPerOctave;
  const int s = static_cast<int>((n - base + step - 1) / step);  // 1..4 steps above 2^k
  const int index = (k - 6) * kClassesPerOctave + s;
  return {index, class_bytes(index)};
}

// The memory this process may use: the machine's, or its control group's
// limit where that is lower (a container; cgroup v2, then v1).
uint64_t memory_available() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    uint64_t limit = 0;
    if (in >> limit && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;  // "max" does not parse: no limit
  }
  return bytes;
}

// A quarter of the memory this process may use, and at least 1 GiB: what a
// training step's activations may add up to (MobileNetV3-small in float32 at
// batch 64 of 224x224 images frees about 1.3 GB a step; under a 1 GiB cap the
// excess went back to the system and was faulted in again, 19k page faults a
// step).
uint64_t default_limit() { return std::max(memory_available() / 4, uint64_t{1} << 30); }

struct Cache {
  std::mutex mutex;
  // index 0 (<= 64 B), then four per octave from 2^6 < n <= 2^7 up to 2^63 < n
  std::array<std::vector<void*>, (kOctaves - 6) * kClassesPerOctave + 1> free_lists;
  // Large blocks handed out for a smaller request's class: the class they
  // go back to when freed.
  std::unordered_map<void*, int> lent_up;
  Stats stats;
  bool on = kCachingByDefault;
  uint64_t limit = default_limit();

  // Takes a cached block of class `index` (lock held), or nullptr.
  void* take(int index) {
    auto& list = free_lists[static_cast<size_t>(index)];
    if (list.empty()) return nullptr;
    void* p = list.back();
    list.pop_back();
    stats.cached_bytes -= class_bytes(index);
    return p;
  }

  // Frees cached blocks until at most `keep` bytes are cached (lock held).
  void trim(uint64_t keep) {
    for (size_t c = free_lists.size(); c-- > 0 && stats.cached_bytes > keep;) {
      auto& list = free_lists[c];
      if (list.empty()) continue;
      const size_t bytes = class_bytes(static_cast<int>(c));
      while (!list.empty() && stats.cached_bytes > keep) {
        std::free(list.back());
        list.pop_back();
        stats.cached_bytes -= bytes;
        ++stats.system_frees;
      }
    }
  }
};

Cache& cache() {
  static Cache* c = [] {
    auto* made = new Cache;  // never destroyed: storages freed during exit still find it
    // PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING=1, for host memory
    if (const char* e = std::getenv("HALFGRAD_NO_HOST_CACHING"); e && *e && *e != '0') made->on = false;
    return made;
  }();
  return *c;
}

}  // namespace

// A large request with its own class empty takes a cached block of up to
// twice its size. The case it is for: autocast's bfloat16 copy of a weight
// lives from the forward until its layer's backward, and the weight's float32
// gradient is made just after (half the copy's class, then the class itself).
// Served by the gradient's block of the step before (freed by zero_grad), the
// copy costs no memory of its own. And a large request that misses first
// gives back the cached blocks of between half its size and its size: the
// block it now makes can serve their requests, so keeping them would only
// hold memory (in the first step, the copies' blocks, freed just before their
// gradients' bigger blocks are made). In steady state nothing misses, so
// nothing is given back.
void* allocate(size_t nbytes) {
  const SizeClass sc = size_class(nbytes);
  const bool large = sc.bytes >= kLargeBlock;
  Cache& c = cache();
  std::vector<void*> smaller;  // given back after the lock
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.stats.allocations;
    c.stats.in_use_bytes += nbytes;
    if (c.stats.in_use_bytes > c.stats.peak_in_use_bytes) c.stats.peak_in_use_bytes = c.stats.in_use_bytes;
    if (void* p = c.take(sc.index)) {
      ++c.stats.cache_hits;
      return p;
    }
    if (large) {
      const int top = std::min(sc.index + kClassesPerOctave, static_cast<int>(c.free_lists.size()) - 1);
      for (int k = sc.index + 1; k <= top; ++k)
        if (void* p = c.take(k)) {
          c.lent_up.emplace(p, k);
          ++c.stats.cache_hits;
          return p;
        }
      for (int k = std::max(sc.index - kClassesPerOctave, 0); k < sc.index; ++k)
        while (void* p = c.take(k)) smaller.push_back(p);
      c.stats.system_frees += smaller.size();
    }
    ++c.stats.system_allocations;
  }
  for (void* p : smaller) std::free(p);
  void* p = std::aligned_alloc(kMinBlock, sc.bytes);  // outside the lock: the system may take a while
  if (p == nullptr) {
    {
      std::lock_guard<std::mutex> lock(c.mutex);  // give the cache back and try once more
      c.stats.in_use_bytes -= nbytes;
      c.trim(0);
    }
    p = std::aligned_alloc(kMinBlock, sc.bytes);
    HG_CHECK(p != nullptr, "allocate: out of host memory asking for {} bytes (the tensor cache was emptied first)",
             nbytes);
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use_bytes += nbytes;
    ++c.stats.system_allocations;  // the second attempt
    if (c.stats.in_use_bytes > c.stats.peak_in_use_bytes) c.stats.peak_in_use_bytes = c.stats.in_use_bytes;
  }
  return p;
}

void release(void* p, size_t nbytes) {
  if (p == nullptr) return;
  SizeClass sc = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use_bytes -= nbytes;
    if (sc.bytes >= kLargeBlock && !c.lent_up.empty())
      if (auto it = c.lent_up.find(p); it != c.lent_up.end()) {
        sc = {it->second, class_bytes(it->second)};  // back to its own class
        c.lent_up.erase(it);
      }
    if (c.on && c.stats.cached_bytes + sc.bytes <= c.limit) {
      c.free_lists[static_cast<size_t>(sc.index)].push_back(p);
      c.stats.cached_bytes += sc.bytes;
      return;
    }
    ++c.stats.system_frees;
  }
  std::free(p);
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_in_use_bytes = c.stats.in_use_bytes;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.trim(0);
}

void set_caching(bool on) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.on = on;
  if (!on) c.trim(0);
}

bool caching() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.on;
}

void set_limit(uint64_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.limit = bytes;
  c.trim(bytes);
}

uint64_t limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.limit;
}

}  // namespace halfgrad::host_memory
