#pragma once
// Per-thread scratch memory for the CPU kernels: grow-only, 64-byte aligned
// buffers. Each thread keeps its own, so the hot path neither allocates, nor
// zeroes, nor shares. The price: a thread holds on to the largest buffer it
// ever needed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace halfgrad::kernels::cpu {

class Scratch {
 public:
  template <typename T = std::byte>
  T* get(int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    if (bytes > size_) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      ptr_.reset();  // free first: keeps the peak at one buffer
      ptr_.reset(static_cast<std::byte*>(std::aligned_alloc(64, rounded)));
      if (!ptr_) {
        size_ = 0;
        throw std::bad_alloc();
      }
      size_ = rounded;
    }
    return reinterpret_cast<T*>(ptr_.get());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> ptr_;
  size_t size_ = 0;
};

// `count` values of T, uninitialised, in this thread's buffer for `Owner` (a
// tag type per kernel file, so two kernels never share one buffer).
template <typename Owner, typename T>
T* thread_scratch(int64_t count) {
  thread_local Scratch s;
  return s.get<T>(count);
}

}  // namespace halfgrad::kernels::cpu
