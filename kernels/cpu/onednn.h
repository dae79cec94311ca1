#pragma once
// What every oneDNN user in kernels/cpu/ shares (internal; only where
// HALFGRAD_WITH_ONEDNN): the one CPU engine, a stream per thread, and the size
// of the primitive caches.
#if HALFGRAD_WITH_ONEDNN
#include <dnnl.hpp>

#include <cstddef>

#include <halfgrad/kernels/plan_cache.h>

namespace halfgrad::kernels::cpu::onednn {

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

// Primitives are cached per problem in a kernels::PlanCache (plan_cache.h)
// of at most this many entries (a failure to create, nullptr, is kept too).
inline constexpr size_t kMaxPrimitives = 1024;

}  // namespace halfgrad::kernels::cpu::onednn
#endif  // HALFGRAD_WITH_ONEDNN
