#include <halfgrad/core/allocator.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>
#include <halfgrad/core/host_cache.h>

namespace halfgrad {

namespace {
void* allocate_bytes(size_t nbytes, Device device) {
  // cuda::allocate checks the device even for 0 bytes: an empty CUDA tensor
  // where CUDA cannot be used is an Error at creation, as in PyTorch.
  if (device.is_cuda()) return cuda::allocate(nbytes, device.index());
  if (nbytes == 0) return nullptr;
  return host_memory::allocate(nbytes);  // 64-byte aligned, from the cache when it can
}
}  // namespace

Storage::Storage(size_t n, Device d) : data(allocate_bytes(n, d)), nbytes(n), device(d) {}

Storage::Storage(void* p, size_t n, Device d, std::function<void(void*)> deleter)
    : data(p), nbytes(n), device(d), borrowed_(true), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (borrowed_) {
    if (deleter_) deleter_(data);
    return;
  }
  if (!data) return;
  if (device.is_cuda()) {
    if (streams_.empty()) cuda::release(data, device.index());
    else cuda::release_after(data, device.index(), streams_.data(), streams_.size());
  } else {
    host_memory::release(data, nbytes);
  }
}

void Storage::record_stream(void* stream) {
  HG_CHECK(device.is_cuda(), "record_stream: the storage is on {}, not a CUDA device; streams order CUDA work only",
           device.str());
  std::lock_guard<std::mutex> lock(streams_mutex_);
  if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end()) streams_.push_back(stream);
}

std::shared_ptr<Storage> allocate_storage(size_t nbytes, Device device) {
  // element offsets times itemsize must stay inside int64 (shape_nbytes checks the callers' sizes)
  HG_CHECK(nbytes <= static_cast<size_t>(std::numeric_limits<int64_t>::max()),
           "allocate: {} bytes is more than any storage can hold", nbytes);
  return std::make_shared<Storage>(nbytes, device);
}

}  // namespace halfgrad
