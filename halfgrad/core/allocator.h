#pragma once
// The one allocator. CPU memory is 64-byte aligned (vector loads, oneDNN);
// CUDA memory comes from the stream-ordered pool (cudaMallocAsync), so a
// training step never calls cudaMalloc.
#include <cstddef>
#include <memory>

#include <halfgrad/core/device.h>

namespace halfgrad {

// A block of memory on one device. Shared by every view of it; `version`
// counts in-place writes so autograd can tell when a saved tensor changed.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  uint64_t version = 0;

  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

std::shared_ptr<Storage> allocate_storage(size_t nbytes, Device device);

}  // namespace halfgrad
