#pragma once
// The one allocator. CPU memory is 64-byte aligned (vector loads, oneDNN) and
// comes from a caching allocator (core/host_cache.h), so a training step in
// steady state neither mallocs nor page-faults its tensors; CUDA memory comes
// from the stream-ordered pool (cudaMallocAsync), so a training step never
// calls cudaMalloc.
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <halfgrad/core/device.h>

namespace halfgrad {

// A block of memory on one device. Shared by every view of it; `version`
// counts in-place writes so autograd can tell when a saved tensor changed.
//
// CUDA memory is freed (cudaFreeAsync) on the stream current when the last
// handle dies, so the pool may give it to later work on that stream at once.
// Work queued on any other stream that still reads or writes it is not waited
// for unless that stream was recorded with record_stream (PyTorch's
// Tensor.record_stream): then the free waits for the work queued on it so far.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  uint64_t version = 0;

  Storage(size_t nbytes, Device device);
  // Memory the caller owns (from_blob): never freed here; `deleter`, when
  // given, is called with `data` when the last handle dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // CUDA only (an Error for CPU memory): `stream` (a cudaStream_t) uses this memory;
  // the free waits for what is queued on it by then. The stream must outlive the
  // storage. Call it after queuing the work, as in PyTorch: t.storage()->record_stream(s).
  void record_stream(void* stream);

 private:
  std::mutex streams_mutex_;
  std::vector<void*> streams_;  // recorded streams, each once
  bool borrowed_ = false;       // from_blob memory: not ours to free
  std::function<void(void*)> deleter_;
};

std::shared_ptr<Storage> allocate_storage(size_t nbytes, Device device);

}  // namespace halfgrad
