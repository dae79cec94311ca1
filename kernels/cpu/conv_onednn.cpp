// CPU convolutions through oneDNN 2.6's convolution primitives (plain NC* /
// OI* formats or oneDNN's blocked ones, cached per problem); what oneDNN
// declines runs the direct loops (conv_direct.cpp). Compiled in builds with
// oneDNN; conv_no_onednn.cpp stands in for it otherwise.
#include <halfgrad/kernels/cpu/onednn.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <halfgrad/core/error.h>
#include <halfgrad/core/macros.h>
#include <halfgrad/kernels/cpu/conv.h>
#include <halfgrad/kernels/cpu/conv_problem.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>

namespace halfgrad::kernels::cpu {

using conv_detail::check_layout;
using conv_detail::check_weight_grads;
using conv_detail::make_problem;
using conv_detail::Problem;

namespace {

enum class Kind : uint8_t { Forward, BackwardData, BackwardWeights };

using onednn::engine;
using onednn::stream;

// Memory formats: Plain runs oneDNN on our NC* / OI* tensors as they are
// (for most shapes its im2col + GEMM kernel); Any lets oneDNN pick its
// blocked formats (nChw16c, ...) and its direct JIT kernels, with reorders
// from and to our tensors around every call. HALFGRAD_CONV_FORMAT=plain|any
// overrides the choice (benchmarks, tests).
// ChannelsLast gives oneDNN our channels-last activations as they are (its
// nhwc kernels; no reorders of activations) and lets it choose the weights'
// format.
enum class Format : uint8_t { Plain, Any, ChannelsLast };

struct Key {
  Kind kind;
  DType dtype;  // Float32 or BFloat16
  Problem p;
  bool bias;
  Format format;
  bool f32_grads = false;  // BackwardWeights in bfloat16: diff weights and bias in float32
  auto operator<=>(const Key&) const = default;
};

// One argument of a primitive: our plain layout, the primitive's, and the
// reorder between them when they differ.
struct Arg {
  int id = 0;
  dnnl::memory::desc user, prim;
  dnnl::reorder reorder;  // user -> prim for inputs, prim -> user for outputs; empty when equal
  bool output = false;
};

struct Cached {
  dnnl::primitive prim;
  std::vector<Arg> args;  // in the order of execute()'s pointers: src, weights, bias, dst
  dnnl::memory::desc scratchpad;
};

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

dims spatial(const Problem& p, const std::array<int64_t, 3>& v) { return dims(v.end() - p.nd, v.end()); }

dnnl::memory::desc activation_md(const Problem& p, int64_t c, const std::array<int64_t, 3>& sp,
                                 dnnl::memory::data_type dt, bool any) {
  dims d{p.n, c};
  for (int64_t v : spatial(p, sp)) d.push_back(v);
  static constexpr tag kTags[] = {tag::ncw, tag::nchw, tag::ncdhw};
  static constexpr tag kLast[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  return dnnl::memory::desc(d, dt, any ? tag::any : p.channels_last ? kLast[p.nd - 1] : kTags[p.nd - 1]);
}

dnnl::memory::desc weight_md(const Problem& p, dnnl::memory::data_type dt, bool any) {
  dims d;
  if (p.groups > 1) d = {p.groups, p.co / p.groups, p.ci / p.groups};
  else d = {p.co, p.ci};
  for (int64_t v : spatial(p, p.k)) d.push_back(v);
  static constexpr tag kPlain[] = {tag::oiw, tag::oihw, tag::oidhw};
  static constexpr tag kGrouped[] = {tag::goiw, tag::goihw, tag::goidhw};
  return dnnl::memory::desc(d, dt, any ? tag::any : p.groups > 1 ? kGrouped[p.nd - 1] : kPlain[p.nd - 1]);
}

Arg make_arg(int id, const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool output) {
  Arg a;
  a.id = id;
  a.user = user;
  a.prim = prim;
  a.output = output;
  if (user != prim) {
    a.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim));
  }
  return a;
}

// Thrown by create() for a problem better left to the direct loop.
struct Declined {};

// oneDNN 2.6 runs a grouped convolution its depthwise JIT kernel cannot take
// (a 5x5 kernel on MobileNetV3's 1x1 and 2x2 maps) as one im2col + GEMM per
// group: 40 ms for a [256, 576, 1, 1] depthwise conv whose direct loop, which
// skips the taps that fall in the padding, takes well under a millisecond. At
// 224x224 the direct loop and oneDNN's GEMM route measured the same.
//
// With channels-last activations oneDNN 2.6 runs the backward weights of a 5x5
// depthwise conv on its generic JIT kernel with 16x16-blocked weights, as if
// each group were a dense 16-channel conv: 40-60 ms a call at 14x14 against a
// few for its depthwise kernel. A depthwise problem it would not run on a
// depthwise kernel ("dw" in the name) goes to the direct loop too.
void decline_grouped_gemm(const Problem& p, const char* impl) {
  const std::string_view name(impl);
  if (p.groups > 1 && name.find("gemm") != std::string_view::npos) throw Declined{};
  const bool depthwise = p.groups > 1 && p.groups == p.ci;
  if (depthwise && p.channels_last && name.find("dw") == std::string_view::npos) throw Declined{};
}

Cached create(const Key& key) {
  const Problem& p = key.p;
  const auto dt = key.dtype == DType::BFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  const bool any = key.format == Format::Any, any_weights = any || key.format == Format::ChannelsLast;
  // our layouts
  const auto src_u = activation_md(p, p.ci, p.in, dt, false), dst_u = activation_md(p, p.co, p.out, dt, false);
  const auto wei_u = weight_md(p, dt, false);
  const auto bias_md = key.bias ? dnnl::memory::desc({p.co}, dt, tag::a) : dnnl::memory::desc();
  // what the primitive is asked for
  const auto src = any ? activation_md(p, p.ci, p.in, dt, true) : src_u;
  const auto dst = any ? activation_md(p, p.co, p.out, dt, true) : dst_u;
  const auto wei = any_weights ? weight_md(p, dt, true) : wei_u;
  dims strides = spatial(p, p.s), dil = spatial(p, p.d), pl = spatial(p, p.pb), pr = spatial(p, p.pa);
  for (auto& v : dil) v -= 1;  // oneDNN counts the gaps: 0 is a dense kernel
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one scratchpad per thread (gemm.cpp)
  const auto alg = dnnl::algorithm::convolution_direct;
  const auto fwd_desc =
      key.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, bias_md, dst,
                                                 strides, dil, pl, pr)
               : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, dst, strides,
                                                 dil, pl, pr);
  const dnnl::convolution_forward::primitive_desc fwd_pd(
      fwd_desc, key.kind == Kind::Forward ? attr : dnnl::primitive_attr(), engine());
  Cached c;
  switch (key.kind) {
    case Kind::Forward:
      decline_grouped_gemm(p, fwd_pd.impl_info_str());
      c.prim = dnnl::convolution_forward(fwd_pd);
      c.scratchpad = fwd_pd.scratchpad_desc();
      c.args = {make_arg(DNNL_ARG_SRC, src_u, fwd_pd.src_desc(), false),
                make_arg(DNNL_ARG_WEIGHTS, wei_u, fwd_pd.weights_desc(), false),
                make_arg(DNNL_ARG_BIAS, bias_md, bias_md, false),
                make_arg(DNNL_ARG_DST, dst_u, fwd_pd.dst_desc(), true)};
      break;
    case Kind::BackwardData: {
      const dnnl::convolution_backward_data::desc desc(alg, src, wei, dst, strides, dil, pl, pr);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, attr, engine(), fwd_pd);
      decline_grouped_gemm(p, pd.impl_info_str());
      c.prim = dnnl::convolution_backward_data(pd);
      c.scratchpad = pd.scratchpad_desc();
      c.args = {make_arg(DNNL_ARG_DIFF_SRC, src_u, pd.diff_src_desc(), true),
                make_arg(DNNL_ARG_WEIGHTS, wei_u, pd.weights_desc(), false),
                make_arg(DNNL_ARG_BIAS, dnnl::memory::desc(), dnnl::memory::desc(), false),
                make_arg(DNNL_ARG_DIFF_DST, dst_u, pd.diff_dst_desc(), false)};
      break;
    }
    case Kind::BackwardWeights: {
      // float32 sums for a bfloat16 problem: oneDNN's bf16 kernels accumulate
      // in float32 and write diff weights (and bias) in either type
      const auto gdt = key.f32_grads ? dnnl::memory::data_type::f32 : dt;
      const auto dwei_u = weight_md(p, gdt, false), dwei = any_weights ? weight_md(p, gdt, true) : dwei_u;
      const auto dbias_md = key.bias ? dnnl::memory::desc({p.co}, gdt, tag::a) : dnnl::memory::desc();
      const auto desc = key.bias ? dnnl::convolution_backward_weights::desc(alg, src, dwei, dbias_md, dst,
                                                                            strides, dil, pl, pr)
                                 : dnnl::convolution_backward_weights::desc(alg, src, dwei, dst, strides, dil, pl,
                                                                            pr);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine(), fwd_pd);
      decline_grouped_gemm(p, pd.impl_info_str());
      c.prim = dnnl::convolution_backward_weights(pd);
      c.scratchpad = pd.scratchpad_desc();
      c.args = {make_arg(DNNL_ARG_SRC, src_u, pd.src_desc(), false),
                make_arg(DNNL_ARG_DIFF_WEIGHTS, dwei_u, pd.diff_weights_desc(), true),
                make_arg(DNNL_ARG_DIFF_BIAS, dbias_md, dbias_md, true),
                make_arg(DNNL_ARG_DIFF_DST, dst_u, pd.diff_dst_desc(), false)};
      break;
    }
  }
  return c;
}

// nullptr when oneDNN has no implementation for this problem (the caller then
// takes another route); a failure is remembered, so it is asked only once.
std::shared_ptr<const Cached> get(const Key& key) {
  static PlanCache<Key, Cached> cache(onednn::kMaxPrimitives);
  return cache.get(key, [](const Key& k) -> std::shared_ptr<const Cached> {
    try {
      return std::make_shared<const Cached>(create(k));
    } catch (const dnnl::error&) {
      return nullptr;
    } catch (const Declined&) {
      return nullptr;
    }
  });
}

struct Scratch {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> ptr;
  size_t size = 0;
  void* get(size_t bytes) {
    if (bytes > size) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      ptr.reset();
      ptr.reset(std::aligned_alloc(64, rounded));
      if (!ptr) {
        size = 0;
        throw std::bad_alloc();
      }
      size = rounded;
    }
    return ptr.get();
  }
};

// Runs the cached primitive on our tensors' pointers (src, weights, bias, dst
// in the forward's roles; nullptr: absent), reordering where its formats differ.
void execute(const Cached& c, const std::array<const void*, 4>& ptrs) {
  const dnnl::engine& eng = engine();
  dnnl::stream& s = stream();
  thread_local std::array<Scratch, 5> scratch;  // one per reordered argument, and the scratchpad
  std::array<dnnl::memory, 4> user, prim;
  std::vector<dnnl_exec_arg_t> args;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Arg& a = c.args[i];
    if (!ptrs[i] || a.user.is_zero()) continue;
    user[i] = dnnl::memory(a.user, eng, const_cast<void*>(ptrs[i]));
    if (a.reorder) {
      prim[i] = dnnl::memory(a.prim, eng, scratch[i].get(a.prim.get_size()));
      if (!a.output) a.reorder.execute(s, user[i], prim[i]);
    } else {
      prim[i] = user[i];
    }
    args.push_back({a.id, prim[i].get()});
  }
  dnnl::memory pad;
  if (const size_t bytes = c.scratchpad.get_size(); bytes > 0) {
    pad = dnnl::memory(c.scratchpad, eng, scratch[4].get(bytes));
    args.push_back({DNNL_ARG_SCRATCHPAD, pad.get()});
  }
  dnnl::error::wrap_c_api(dnnl_primitive_execute(c.prim.get(), s.get(), static_cast<int>(args.size()), args.data()),
                          "could not execute a convolution");
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (c.args[i].output && c.args[i].reorder && ptrs[i]) c.args[i].reorder.execute(s, prim[i], user[i]);
  }
  s.wait();
}

Format format_for(const Problem& p, DType dt) {
  static const int forced = [] {
    const char* env = std::getenv("HALFGRAD_CONV_FORMAT");
    if (!env) return -1;
    return std::string(env) == "any" ? 1 : std::string(env) == "plain" ? 0 : -1;
  }();
  if (forced >= 0) return forced ? Format::Any : p.channels_last ? Format::ChannelsLast : Format::Plain;
  if (p.channels_last) {
    static const bool dw_any = [] {
      const char* env = std::getenv("HALFGRAD_CONV_DW_FORMAT");
      return env && std::string(env) == "any";
    }();
    return dw_any && p.groups > 1 && p.groups == p.ci ? Format::Any : Format::ChannelsLast;
  }
  // Measured on MobileNetV3-small's layers (benchmarks/cpu_conv.cpp): with
  // plain formats oneDNN 2.6 runs every conv as im2col + GEMM, 3-6x slower
  // than its blocked direct kernels for depthwise and k x k convolutions even
  // with the reorders; a 1x1 stride-1 conv is a plain GEMM already, and the
  // reorders would only add to it. Except in bfloat16 on tiny maps: a plain
  // 1x1 conv is one small GEMM per image, and below 7x7 (MobileNetV3-small's
  // 32x32 inputs end at 4x4 .. 1x1) the blocked AMX kernels with their
  // reorders win (b256 32x32 step: 104 ms, all plain 113); at 224x224, where
  // every pointwise map is 7x7 or more, plain wins (716 against 779 ms blocked).
  constexpr int64_t kMinPlainBf16Plane = 7 * 7;
  bool pointwise = (dt == DType::Float32 || p.out_plane() >= kMinPlainBf16Plane) && p.groups == 1 && p.kvol() == 1;
  for (int i = 0; i < 3; ++i) pointwise = pointwise && p.s[i] == 1 && p.pb[i] == 0 && p.pa[i] == 0;
  return pointwise ? Format::Plain : Format::Any;
}

// Whether oneDNN runs bf16 convolutions on this CPU (oneDNN 2.6 needs AVX-512 for them).
bool has_bf16() {
  static const bool ok = [] {
    Problem p;
    p.n = 1, p.ci = 1, p.co = 1, p.in = {1, 1, 2}, p.out = {1, 1, 2};  // row-major
    return get({Kind::Forward, DType::BFloat16, p, false, Format::Plain}) != nullptr;
  }();
  return ok;
}

// Float32 copies (for float16, and bfloat16 without native support).
Tensor widen(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor f = make_tensor(t.shape(), TensorOptions(DType::Float32, Device::cpu()), t.suggest_memory_format());
  cpu::copy(f, t);
  return f;
}
// A float32 tensor to write t's values into: t itself when it is float32 already.
Tensor f32_like(const Tensor& t) {
  return t.defined() && t.dtype() != DType::Float32
             ? make_tensor(t.shape(), TensorOptions(DType::Float32, Device::cpu()), t.suggest_memory_format())
             : t;
}
// Writes a float32 result r back to t (nothing when r is t).
void write_back(const Tensor& t, const Tensor& r) {
  if (t.defined() && !t.is_same(r)) cpu::copy(t, r);
}

// The oneDNN route for `kind`, in float32 or native bfloat16; false when
// oneDNN declines (then the caller runs the direct loop).
bool onednn_native(Kind kind, const Problem& p, DType dt, const void* src, const void* wei, const void* bias,
                   const void* dst, bool f32_grads = false) {
  const auto c = get({kind, dt, p, bias != nullptr, format_for(p, dt), f32_grads});
  if (!c) return false;
  execute(*c, {src, wei, bias, dst});
  return true;
}

// Runs kind on tensors (src, wei, bias, dst in the forward's roles; which are
// written depends on kind). float16 (and bf16 where oneDNN has none) go
// through float32 copies and round once. False: oneDNN declined.
bool run_onednn(Kind kind, const Problem& p, const Tensor& src, const Tensor& wei, const Tensor& bias,
            const Tensor& dst) {
  if (p.n == 0 || p.ci == 0 || p.co == 0 || p.out_plane() == 0 || p.in_plane() == 0) return false;
  const DType dt = src.dtype();
  if (dt == DType::Float64) return false;
  const bool native = dt == DType::Float32 || (dt == DType::BFloat16 && has_bf16());
  const bool f32_grads = kind == Kind::BackwardWeights && dt != DType::Float32 && wei.dtype() == DType::Float32;
  if (native) {
    if (onednn_native(kind, p, dt, src.data_ptr(), wei.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr,
                      dst.data_ptr(), f32_grads))
      return true;
    if (dt == DType::Float32) return false;
    // declined in bfloat16: widen only if float32 would not decline too
    if (!get({kind, DType::Float32, p, bias.defined(), format_for(p, DType::Float32)})) return false;
  }
  // widen what is read, compute in float32, round what is written once
  const bool w_src = kind != Kind::BackwardData, w_wei = kind != Kind::BackwardWeights;
  const bool w_dst = kind != Kind::Forward;
  const Tensor s = w_src ? widen(src) : f32_like(src);
  const Tensor w = w_wei ? widen(wei) : f32_like(wei);
  const Tensor b = kind == Kind::Forward ? widen(bias) : f32_like(bias);
  const Tensor d = w_dst ? widen(dst) : f32_like(dst);
  if (!onednn_native(kind, p, DType::Float32, s.data_ptr(), w.data_ptr(), b.defined() ? b.data_ptr() : nullptr,
                     d.data_ptr()))
    return false;
  switch (kind) {
    case Kind::Forward: write_back(dst, d); break;
    case Kind::BackwardData: write_back(src, s); break;
    case Kind::BackwardWeights:
      write_back(wei, w);
      write_back(bias, b);
      break;
  }
  return true;
}

}  // namespace

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::ConvGeometry& g,
                  const Tensor& y) {
  const bool cl = check_layout("conv_forward", {&x, &y}, {&w, &bias});
  if (run_onednn(Kind::Forward, make_problem(x, w, y, g, cl), x, w, bias, y)) return;
  conv_forward_direct(x, w, bias, g, y);
}

void conv_backward_data(const Tensor& dy, const Tensor& w, const kernels::ConvGeometry& g, const Tensor& dx) {
  const bool cl = check_layout("conv_backward_data", {&dy, &dx}, {&w});
  if (run_onednn(Kind::BackwardData, make_problem(dx, w, dy, g, cl), dx, w, Tensor(), dy)) return;
  conv_backward_data_direct(dy, w, g, dx);
}

void conv_backward_weight(const Tensor& dy, const Tensor& x, const kernels::ConvGeometry& g, const Tensor& dw,
                          const Tensor& db) {
  check_weight_grads(dy, x, dw, db);
  const bool cl = check_layout("conv_backward_weight", {&dy, &x}, {&dw, &db});
  if (run_onednn(Kind::BackwardWeights, make_problem(x, dw, dy, g, cl), x, dw, db, dy)) return;
  conv_backward_weight_direct(dy, x, g, dw, db);
}

}  // namespace halfgrad::kernels::cpu
