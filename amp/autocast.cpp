#include <halfgrad/amp/autocast.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include <halfgrad/amp/op_policy.h>
#include <halfgrad/core/device.h>
#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/layers.h>

namespace halfgrad::amp {

namespace {

struct DeviceState {
  bool enabled = false;
  DType dtype;
};

// One cached cast: the float32 leaf it came from, the storage version at the
// time (an in-place change of the weight invalidates the entry), the result.
struct CacheEntry {
  std::shared_ptr<TensorImpl> source;
  uint64_t version;
  Tensor cast;
};

struct State {
  DeviceState cpu{false, DType::BFloat16};
  DeviceState cuda{false, DType::Float16};
  bool cache_enabled = true;
  std::vector<autocast*> guards;  // open autocast regions (enabled or not), outermost first
  int inner_ops = 0;  // >0 while autocast casts the inputs (the casts are not traced)
  std::map<std::pair<const TensorImpl*, DType>, CacheEntry> cache;
};
thread_local State g;

DeviceState& device_state(DeviceType t) { return t == DeviceType::CPU ? g.cpu : g.cuda; }

bool env_trace() {
  static const bool on = [] {
    const char* v = std::getenv("HALFGRAD_AMP_TRACE");
    return v != nullptr && std::string_view(v) != "0" && std::string_view(v) != "";
  }();
  return on;
}
thread_local bool g_trace = false;
std::function<void(const std::string&)>& trace_sink() {
  static std::function<void(const std::string&)> sink;
  return sink;
}
std::function<void(const OpTrace&)>& op_trace_sink() {
  static std::function<void(const OpTrace&)> sink;
  return sink;
}
void emit(const std::string& line) {
  if (trace_sink()) trace_sink()(line);
  else fmt::print("{}\n", line);
}

// PyTorch's is_eligible: floating, not float64, on the region's device type.
bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::Float64 && t.device().type() == device;
}

enum class CacheUse { None, Hit, Miss };

// Cast `t` to `target`; float32 leaf weights come from (and go into) the cache.
Tensor cast(const Tensor& t, DType target, CacheUse& use) {
  use = CacheUse::None;
  if (t.dtype() == target) return t;
  const bool cacheable = g.cache_enabled && is_low_precision(target) && t.dtype() == DType::Float32 &&
                         t.is_leaf() && t.requires_grad();
  if (!cacheable) return t.to(target);
  const auto key = std::make_pair(t.unsafe_impl(), target);
  auto it = g.cache.find(key);
  if (it != g.cache.end() && it->second.version == t.version()) {
    use = CacheUse::Hit;
    return it->second.cast;
  }
  use = CacheUse::Miss;
  Tensor c = t.to(target);
  g.cache[key] = CacheEntry{t.impl_ptr(), t.version(), c};
  return c;
}

std::string dtype_list(const std::vector<Tensor>& ts) {
  std::string s;
  for (const auto& t : ts) {
    if (!s.empty()) s += ", ";
    s += t.defined() ? std::string(dtype_name(t.dtype())) : "-";
  }
  return s;
}

}  // namespace

namespace {
autocast::Settings current() {
  return {g.cpu.enabled, g.cuda.enabled, g.cache_enabled, g.cpu.dtype, g.cuda.dtype};
}
void set_current(const autocast::Settings& s) {
  g.cpu = {s.cpu_enabled, s.cpu_dtype};
  g.cuda = {s.cuda_enabled, s.cuda_dtype};
  g.cache_enabled = s.cache_enabled;
}
}  // namespace

autocast::Settings autocast::applied_to(Settings s) const {
  (device_ == DeviceType::CPU ? s.cpu_enabled : s.cuda_enabled) = enabled_;
  (device_ == DeviceType::CPU ? s.cpu_dtype : s.cuda_dtype) = dtype_;
  s.cache_enabled = cache_enabled_;
  return s;
}

bool autocast_disabled_by_region(DeviceType type) {
  for (auto it = g.guards.rbegin(); it != g.guards.rend(); ++it)
    if ((*it)->device_type() == type) return !(*it)->enabled();
  return false;
}

namespace {
// PyTorch's torch.autocast("cuda") on a machine without CUDA warns (Python
// shows it once per call site) and turns the region off instead of failing.
// Here once per process on stderr, as halfgrad's other warnings (ops/loss.cpp).
bool cuda_region_possible(DeviceType device_type, bool enabled) {
  if (device_type != DeviceType::CUDA || !enabled || cuda::is_available()) return enabled;
  static std::once_flag warned;
  std::call_once(warned, [] {
#ifdef HALFGRAD_WITH_CUDA
    const char* why = "no usable CUDA device was found";
#else
    const char* why = "this halfgrad was built without its CUDA backend";
#endif
    std::fputs(fmt::format("halfgrad warning: autocast: User provided device_type of 'cuda', but CUDA is not "
                           "available. Disabling ({}): the region runs without autocast. For CPU tensors open "
                           "autocast(DeviceType::CPU), or autocast(x.device().type()) to follow the tensors.\n",
                           why)
                   .c_str(),
               stderr);
  });
  return false;
}

// The dtype of an enabled region, as torch.autocast checks it (a disabled
// region takes any dtype: it casts nothing). CPU: float16 or bfloat16, else
// PyTorch's warning (once per process) and the region is disabled. CUDA:
// float32 too (PyTorch accepts it: the lower-precision list then runs in
// float32); any other dtype is an Error (PyTorch does not check, and casting
// the listed ops' inputs to float64 or an integer type makes no sense).
bool dtype_allows(DeviceType device_type, DType dtype, bool enabled) {
  if (!enabled || is_low_precision(dtype)) return enabled;
  if (device_type == DeviceType::CUDA) {
    HG_CHECK(dtype == DType::Float32,
             "autocast(cuda, {}): an enabled CUDA region runs in float16, bfloat16 or float32, not {}; pass one "
             "of those, or enabled=false",
             dtype_name(dtype), dtype_name(dtype));
    return true;
  }
  static std::once_flag warned;
  std::call_once(warned, [dtype] {
    std::fputs(fmt::format("halfgrad warning: autocast: In CPU autocast, but the target dtype is not supported. "
                           "Disabling autocast.\nCPU Autocast only supports dtype of bfloat16, float16 currently "
                           "(got {}): the region runs without autocast. Pass enabled=false to say so, or "
                           "dtype bfloat16 for mixed precision.\n",
                           dtype_name(dtype))
                   .c_str(),
               stderr);
  });
  return false;
}
}  // namespace

autocast::autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled, bool cache_enabled)
    : device_(device_type),
      enabled_(cuda_region_possible(device_type, enabled)),
      dtype_(dtype.value_or(device_type == DeviceType::CUDA ? DType::Float16 : DType::BFloat16)),
      cache_enabled_(cache_enabled),
      prev_(current()) {
  enabled_ = dtype_allows(device_type, dtype_, enabled_);
  set_current(applied_to(prev_));
  g.guards.push_back(this);
}

autocast::~autocast() {
  auto& guards = g.guards;
  const auto it = std::find(guards.begin(), guards.end(), this);
  if (it == guards.end()) return;  // made on another thread: that thread's state is not ours to touch
  if (it + 1 == guards.end()) {
    set_current(prev_);
  } else {
    // Out of order: an inner guard is still open. Rebuild the state as if this
    // one had never been opened: each inner guard now replaces what this one
    // replaced, and the state is theirs on top of it. (Destructors must not
    // throw, and std::optional guards are ordinary C++.)
    Settings s = prev_;
    for (auto j = it + 1; j != guards.end(); ++j) {
      (*j)->prev_ = s;
      s = (*j)->applied_to(s);
    }
    set_current(s);
  }
  guards.erase(it);
  if (guards.empty()) g.cache.clear();  // the cache lives as long as the outermost region
}

bool is_autocast_enabled(DeviceType type) {
  return device_state(type).enabled && !dispatch::excluded(dispatch::Layer::Autocast);
}
DType autocast_dtype(DeviceType type) { return device_state(type).dtype; }
bool is_autocast_cache_enabled() { return g.cache_enabled; }
size_t cast_cache_size() { return g.cache.size(); }

namespace {
// The dispatcher's autocast layer (dispatch/layers.h): cast `inputs` in place
// by the op's policy row (one lock-free lookup by OpId). Runs only while a
// region is enabled on this thread and the layer is not excluded.
void autocast_inputs(OpId op, std::vector<Tensor>& inputs, std::string& /*note*/) {
  const bool tracing = (g_trace || env_trace()) && g.inner_ops == 0;
  if (!g.cpu.enabled && !g.cuda.enabled && !tracing) return;  // the common case: one branch

  const Tensor* first = nullptr;
  for (const auto& t : inputs)
    if (t.defined()) {
      first = &t;
      break;
    }
  const DeviceType device = first ? first->device().type() : DeviceType::CPU;
  const DeviceState& s = device_state(device);
  const std::optional<CastPolicy> policy = s.enabled ? lookup_policy(device, op) : std::nullopt;
  const std::string before = tracing ? dtype_list(inputs) : std::string();

  std::optional<DType> target;
  if (policy) {
    switch (*policy) {
      case CastPolicy::LowerPrecision: target = s.dtype; break;
      case CastPolicy::Fp32: target = DType::Float32; break;
      case CastPolicy::Promote: {
        // float32 if any eligible input is float32; low-precision inputs of one
        // dtype stay; float16 with bfloat16 is an error (no dtype holds both).
        bool f32 = false, f16 = false, bf16 = false;
        for (const auto& t : inputs) {
          if (!eligible(t, device)) continue;
          f32 |= t.dtype() == DType::Float32;
          f16 |= t.dtype() == DType::Float16;
          bf16 |= t.dtype() == DType::BFloat16;
        }
        HG_CHECK(f32 || !(f16 && bf16),
                 "{}: autocast cannot promote float16 with bfloat16 inputs ({}); cast them to one dtype first",
                 op_name(op),
                 dtype_list(inputs));
        if (f32) target = DType::Float32;
        else if (f16) target = DType::Float16;
        else if (bf16) target = DType::BFloat16;
        break;
      }
      case CastPolicy::Banned: fail("{}", banned_message(device, op_name(op)));
    }
  }

  std::string cache_note;
  if (target) {
    ++g.inner_ops;  // the casts themselves are not traced
    try {
      for (auto& t : inputs) {
        if (!eligible(t, device) || t.dtype() == *target) continue;
        CacheUse use;
        t = cast(t, *target, use);
        if (use != CacheUse::None) cache_note += use == CacheUse::Hit ? "  [weight cast: cached]" : "  [weight cast: new]";
      }
    } catch (...) {
      --g.inner_ops;
      throw;
    }
    --g.inner_ops;
  }

  if (tracing && s.enabled) {  // ops outside any region are not autocast decisions
    const std::string ran = dtype_list(inputs);
    OpTrace t{std::string(op_name(op)), before, policy ? std::string(policy_name(*policy)) : "none (input dtypes)",
              ran.empty() ? "-" : ran,
              cache_note};
    if (op_trace_sink()) op_trace_sink()(t);
    else
      emit(fmt::format("[autocast] {:<14} in: {:<30} policy: {:<20} ran in: {}{}", t.op, t.inputs, t.policy, t.ran_in,
                       t.cache));
  }
}

[[maybe_unused]] const bool registered = [] {
  dispatch::register_layer(dispatch::Layer::Autocast,
                           {.active = [] { return g.cpu.enabled || g.cuda.enabled; }, .before = &autocast_inputs});
  return true;
}();
}  // namespace

AutocastOff::AutocastOff() : prev_(dispatch::exclude(dispatch::bit(dispatch::Layer::Autocast))) {}
AutocastOff::~AutocastOff() { dispatch::restore_excluded(prev_); }
AutocastAllowed::AutocastAllowed() : prev_(dispatch::include(dispatch::bit(dispatch::Layer::Autocast))) {}
AutocastAllowed::~AutocastAllowed() { dispatch::restore_excluded(prev_); }

trace::trace() : prev_(g_trace) { g_trace = true; }
trace::~trace() { g_trace = prev_; }
bool is_tracing() { return g_trace || env_trace(); }
void trace_line(const std::string& line) { emit(line); }
void set_trace_sink(std::function<void(const std::string&)> sink) { trace_sink() = std::move(sink); }
void set_op_trace_sink(std::function<void(const OpTrace&)> sink) { op_trace_sink() = std::move(sink); }

}  // namespace halfgrad::amp
