// empty_pinned (core/pinned.h): cudaHostAlloc when a device is there, the
// ordinary aligned allocation otherwise. The storage is a borrowed block with
// its own deleter (Storage's from_blob form), so nothing else in core needs to
// know about pinned memory.
#include <halfgrad/core/pinned.h>

#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include <halfgrad/core/cuda/runtime.h>

namespace halfgrad {

namespace {
// The blocks handed out by cudaHostAlloc and not yet freed (for is_pinned).
std::mutex g_mutex;
std::unordered_set<const void*>& pinned_blocks() {
  static std::unordered_set<const void*> s;
  return s;
}
}  // namespace

Tensor empty_pinned(const Shape& shape, DType dtype) {
  const auto nbytes = static_cast<size_t>(shape_nbytes(shape, dtype, "empty_pinned"));
  void* p = nullptr;
  std::function<void(void*)> deleter;
  if (nbytes > 0 && cuda::is_available()) {
    p = cuda::host_alloc_pinned(nbytes);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      pinned_blocks().insert(p);
    }
    deleter = [](void* q) {
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        pinned_blocks().erase(q);
      }
      cuda::host_free_pinned(q);
    };
  } else if (nbytes > 0) {
    p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    HG_CHECK(p != nullptr, "empty_pinned: out of host memory asking for {} bytes", nbytes);
    deleter = [](void* q) { std::free(q); };
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = Device::cpu();
  impl->storage = std::make_shared<Storage>(p, nbytes, Device::cpu(), std::move(deleter));
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.storage() || t.storage()->data == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  return pinned_blocks().count(t.storage()->data) > 0;
}

}  // namespace halfgrad
