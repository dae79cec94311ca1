#pragma once
// Autocast: the C++ form of `with torch.autocast(device_type):`.
//
//   {
//     hg::amp::autocast region(hg::DeviceType::CUDA);  // float16 by default
//     auto out = model.forward(x);                     // linear runs in float16
//     auto loss = criterion(out, y);                   // cross_entropy runs in float32
//   }
//
// The state is per thread. autocast.cpp registers the dispatcher's autocast
// layer (dispatch/layers.h): the one place where inputs are cast, driven by the policy table
// (amp/policy.h). Casts are ordinary autograd-visible `to` ops, so the
// backward of a float16 cast of a float32 weight delivers a float32 gradient.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <halfgrad/amp/policy.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// RAII region. dtype defaults to float16 on CUDA, bfloat16 on the CPU.
// `enabled=false` inside an enabled region turns autocast off there; leaving
// a region restores the previous state exactly. The cast cache lives as long
// as the outermost region. A guard destroyed while an inner one is still
// alive (guards in std::optional) leaves the state the inner ones set, as if
// it had never been opened; when the last goes, the state before the first
// is back. A CUDA region where CUDA is not available (a build without it, a
// machine without a device) is PyTorch's: a warning on stderr, once per
// process, and the region is opened with enabled=false (enabled() says so).
class autocast {
 public:
  explicit autocast(DeviceType device_type, std::optional<DType> dtype = std::nullopt, bool enabled = true,
                    bool cache_enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  DeviceType device_type() const { return device_; }
  bool enabled() const { return enabled_; }

  // The thread's whole autocast state (both device types and the cache flag).
  struct Settings {
    bool cpu_enabled, cuda_enabled, cache_enabled;
    DType cpu_dtype, cuda_dtype;
  };

 private:
  Settings applied_to(Settings s) const;  // s with this guard's settings on top
  DeviceType device_;
  bool enabled_;
  DType dtype_;
  bool cache_enabled_;
  Settings prev_;  // what this guard replaced
};

// The decorator form: run `fn` under autocast whether or not the caller opened
// a region, e.g. `Tensor forward(x) { return amp::autocast_fn(DeviceType::CUDA, [&] { ... }); }`.
template <typename Fn>
auto autocast_fn(DeviceType device_type, Fn&& fn, std::optional<DType> dtype = std::nullopt, bool enabled = true) {
  autocast region(device_type, dtype, enabled);
  return std::forward<Fn>(fn)();
}
// Wrap a callable once, like applying `@autocast()` to a function.
template <typename Fn>
auto autocast_wrap(DeviceType device_type, Fn fn, std::optional<DType> dtype = std::nullopt) {
  return [device_type, fn = std::move(fn), dtype](auto&&... args) {
    autocast region(device_type, dtype);
    return fn(std::forward<decltype(args)>(args)...);
  };
}

// Queries of the current thread's state.
bool is_autocast_enabled(DeviceType type);
DType autocast_dtype(DeviceType type);
bool is_autocast_cache_enabled();
// Entries in the cast cache (for tests and teaching: a weight used twice is cast once).
size_t cast_cache_size();

// The forward wrapper of a model (what halfgrad's MobileNetV3-small uses): the
// body runs under autocast for `device_type` when the caller has not opened a
// region, in the caller's region (its dtype, its cast cache) when it has, and
// WITHOUT autocast when the innermost region the caller opened for that device
// type says enabled=false. So a model can ship with mixed precision on by
// default and still be run in float32 by `amp::autocast(dev, {}, false)`.
// PyTorch's bare `@autocast()` decorator would re-enable autocast inside such
// a region; halfgrad's model wrapper lets the caller's explicit "off" win
// (docs/amp.md). autocast_fn above is the PyTorch-exact decorator.
bool autocast_disabled_by_region(DeviceType type);  // innermost open region for `type` has enabled=false
template <typename Fn>
auto autocast_forward(DeviceType device_type, Fn&& fn) {
  const bool open = !is_autocast_enabled(device_type) && !autocast_disabled_by_region(device_type);
  std::optional<autocast> region;
  if (open) region.emplace(device_type);
  return std::forward<Fn>(fn)();
}


// Turns autocast off on this thread for its lifetime (the dispatcher's
// autocast layer excluded, as inside an op's forward and the backward pass;
// is_autocast_enabled says false meanwhile). For code of amp's own whose ops
// are not the user's (the monitor's statistics).
class AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  unsigned char prev_;  // the excluded layers before (dispatch/layers.h)
};

// The opposite: lets autocast run on this thread for its lifetime where the
// backward pass excludes it (amp::custom_bwd runs a custom Function's
// backward under the autocast state its forward saw).
class AutocastAllowed {
 public:
  AutocastAllowed();
  ~AutocastAllowed();
  AutocastAllowed(const AutocastAllowed&) = delete;
  AutocastAllowed& operator=(const AutocastAllowed&) = delete;

 private:
  unsigned char prev_;
};

// Trace mode (teaching): inside a trace guard, or with HALFGRAD_AMP_TRACE=1 in
// the environment, every op called from user code prints one line: op, input
// dtypes, policy, the dtype it ran in, and which casts came from the cache.
class trace {
 public:
  trace();
  ~trace();
  trace(const trace&) = delete;
  trace& operator=(const trace&) = delete;

 private:
  bool prev_;
};
bool is_tracing();
// Print one trace line (used by the GradScaler to show its decisions too).
void trace_line(const std::string& line);
// Where trace lines go (default: stdout). Pass nullptr to restore the default.
void set_trace_sink(std::function<void(const std::string&)> sink);
// One op's autocast decision, as a trace line shows it.
struct OpTrace {
  std::string op;      // "linear"
  std::string inputs;  // the input dtypes before autocast: "float32, float32, float32"
  std::string policy;  // "lower_precision", "fp32", "promote", "none (input dtypes)"
  std::string ran_in;  // the dtypes the op ran in: "bfloat16, bfloat16, bfloat16"
  std::string cache;   // "  [weight cast: cached]" per cast weight, or ""
};
// While tracing, hand each op's decision to `sink` instead of printing its
// line (the report's per-op dtype table). nullptr restores the lines.
void set_op_trace_sink(std::function<void(const OpTrace&)> sink);

}  // namespace halfgrad::amp
