#pragma once
// The CPU side of the one allocator (core/allocator.h): a caching allocator
// for tensor memory, as PyTorch's CUDA caching allocator is for the GPU. A
// training step allocates the same sizes every step (activations, gradients,
// temporaries); handing a freed block to the next request of its size class
// means no malloc, no page faults and no heap trimming in steady state (glibc
// returns the top of its heap to the system after a large free and faults
// the pages in again on the next step: tens of thousands of minor faults per
// step at width 4096).
//
// Why our own and not mimalloc or jemalloc (Debian has both): they tune for
// general programs and give memory back to the system on their own schedules
// (jemalloc's decay, mimalloc's page reset), which is the page-fault cost we
// want gone, and they would replace malloc for the whole process. This one
// only holds tensor memory, keeps it until told, and counts it.
//
// Sizes are rounded up to classes of four per power of two (64 B, 80 B, 96 B,
// 112 B, 128 B, 160 B, ...: at most 25% more address space, and none more
// resident memory, since the tail of a large block is never touched). Freed
// blocks wait in their class's list; the cache holds at most limit() bytes
// (default: a quarter of the machine's or its cgroup's memory, >= 1 GiB),
// beyond which a freed block goes back to the system.
//
//   auto s = hg::host_memory::stats();   // in use, cached, peak, allocations, hits
//   hg::host_memory::empty_cache();      // give every cached block back (free())
//
// Thread-safe (the data loader's thread allocates too). Off by default in
// builds with AddressSanitizer, which must see each free to find a use after
// it (set_caching(true) turns it on there), and when the environment has
// HALFGRAD_NO_HOST_CACHING=1 (as PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING).
#include <cstddef>
#include <cstdint>

namespace halfgrad::host_memory {

struct Stats {
  uint64_t in_use_bytes = 0;       // held by live storages (as requested, not rounded)
  uint64_t peak_in_use_bytes = 0;  // the most in_use_bytes since the start or reset_peak()
  uint64_t cached_bytes = 0;       // freed blocks kept for reuse (rounded sizes)
  uint64_t allocations = 0;        // requests served, from the cache or the system
  uint64_t cache_hits = 0;         // ... of which the cache served
  uint64_t system_allocations = 0; // aligned_alloc calls
  uint64_t system_frees = 0;       // free calls (cache full, empty_cache, caching off)
};

Stats stats();
void reset_peak();
// Gives every cached block back to the system.
void empty_cache();
// Off: every free goes straight back to the system (and the cache is emptied).
void set_caching(bool on);
bool caching();
// The most bytes the cache keeps (default: a quarter of the machine's or the
// cgroup's memory, at least 1 GiB); lowering it frees what is over.
void set_limit(uint64_t bytes);
uint64_t limit();

// The allocator's entry points (core/allocator.cpp): 64-byte aligned blocks of
// at least nbytes. release needs the size allocate was given.
void* allocate(size_t nbytes);
void release(void* p, size_t nbytes);

}  // namespace halfgrad::host_memory
