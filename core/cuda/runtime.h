#pragma once
// The low-level CUDA runtime layer: device discovery, the current stream,
// stream-ordered allocation, copies and fills. A plain C++ header on purpose
// (no CUDA includes): host code built by g++ calls it, and only runtime.cu
// talks to the CUDA runtime. Streams travel as opaque `void*` (a cudaStream_t).
//
// Every function that takes `device` makes that device current for the call
// and restores the caller's device afterwards. All work is queued on
// current_stream(); the caller must keep that stream on the same device.
#include <cstddef>
#include <cstdint>

#include <halfgrad/core/device.h>  // declares is_available() and device_count()
#include <halfgrad/core/dtype.h>

namespace halfgrad::cuda {

// Cached after the first call; any CUDA failure (no driver, driver too old,
// no device) counts as "not available" and is never an exception.
bool is_available();
int device_count();  // 0 on any failure

// The stream halfgrad queues work on. Thread-local; nullptr (the legacy
// default stream) until set_current_stream is called on this thread.
void* current_stream();
void set_current_stream(void* stream);

// Stream-ordered pool allocation (cudaMallocAsync on current_stream()). The
// device's pool keeps freed memory instead of returning it to the driver, so
// steady-state training never reaches the driver. nbytes == 0 gives nullptr.
// Out of memory is a halfgrad::Error that says how much was asked and is used.
// Before giving up it waits for the device, trims the pool and retries once;
// not during a CUDA graph capture (the wait would invalidate it): an Error at once.
void* allocate(size_t nbytes, int device);
// cudaFreeAsync on current_stream(): the memory is reusable by later work on
// that stream at once. Never throws; errors go to stderr. nullptr is a no-op.
void release(void* ptr, int device) noexcept;
// The same, after the work queued so far on each of `streams` (n of them): each
// gets an event that current_stream() waits for before the free, so the pool
// cannot hand the memory to later work on this stream while another stream still
// uses it (what Storage::record_stream asks for). A stream equal to
// current_stream() needs no event. Every stream must still exist.
void release_after(void* ptr, int device, void* const* streams, size_t n) noexcept;

// Copies nbytes; each side is CUDA memory on `device` or host memory (pageable
// or pinned). Queued on current_stream(); a copy with a host side waits for that
// stream before returning, so the host can read `dst`, and reuse or free the
// host source of a host-to-device copy, on return. (A host copy during a CUDA
// graph capture is an Error: it cannot wait.) Device to device is asynchronous.
void copy_bytes(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes,
                int device);

// Writes `value` converted to `dtype` into n elements at dst (queued, async).
// Half/BFloat16 round through float as core/half.h does; bool is value != 0.
void fill(void* dst, DType dtype, size_t n, double value, int device);

// Wait for everything queued on current_stream().
void synchronize();

// The device's default memory pool (the one allocate() uses): bytes handed out
// to tensors now, and the most handed out at once since the process started or
// the last reset_pool_used_high (cudaMemPoolAttrUsedMem{Current,High}). What the
// pool has freed but keeps cached is not counted. Neither waits for the device:
// allocations are accounted when queued.
uint64_t pool_used_current(int device);
uint64_t pool_used_high(int device);
// Resets the high-water mark to the pool's current use.
void reset_pool_used_high(int device);

// --- Asynchronous host-to-device traffic (data/loader.cpp's prefetching) ---
// Page-locked host memory (cudaHostAlloc): the copy engine reads it by DMA, so
// a copy from it runs asynchronously and overlaps kernels. Free it with
// host_free_pinned, and only once no queued copy still reads it (cudaFreeHost
// also waits for the device: free rarely, reuse buffers). core/pinned.h is the
// public face, with the fallback to ordinary memory when CUDA is absent.
void* host_alloc_pinned(size_t nbytes);
void host_free_pinned(void* ptr) noexcept;
// A non-blocking stream on `device` (it never orders itself against the legacy
// default stream), and events without timing to order streams against each other.
void* stream_create(int device);
void stream_destroy(void* stream, int device) noexcept;  // after the work queued on it
void* event_create(int device);
void event_destroy(void* event, int device) noexcept;
void event_record(void* event, void* stream, int device);
void stream_wait_event(void* stream, void* event, int device);  // queued: the host does not wait
void event_synchronize(void* event);  // the host waits for the recorded work
// copy_bytes on `stream` that never waits: the caller keeps a host side alive
// and unchanged until the copy is done (record an event after it), and a host
// source should be pinned (from pageable memory the runtime may stage it
// synchronously). copy_bytes keeps its waiting contract for everyone else.
void copy_bytes_async(void* dst, bool dst_cuda, const void* src, bool src_cuda, size_t nbytes, int device,
                      void* stream);

}  // namespace halfgrad::cuda
