// The CPU loops of the low-precision path (optim/low_precision_impl.h): the
// element updates of optim/low_precision_math.h over one parameter, in
// chunks, with the Philox words drawn once per 8 elements.
#include <halfgrad/core/half.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/optim/low_precision_impl.h>

namespace halfgrad::optim::fused {

namespace {
constexpr int64_t kChunk = 16384;  // elements per OpenMP task (a multiple of 8: a chunk starts a Philox group)

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Calls f(P{}, S{}) with the parameter's storage type and the state's.
template <typename F>
void dispatch(const char* op, const Tensor& p, DType state_dtype, F&& f) {
  auto with_state = [&](auto param_tag) {
    using P = decltype(param_tag);
    if (state_dtype == DType::Float32) return f(P{}, float{});
    HG_CHECK(state_dtype == p.dtype(), "{}: state dtype {} for parameter {}", op, dtype_name(state_dtype),
             p.describe());
    return f(P{}, P{});
  };
  if (p.dtype() == DType::BFloat16) return with_state(BFloat16{});
  HG_CHECK(p.dtype() == DType::Float16, "{}: parameter {} is not bfloat16 or float16", op, p.describe());
  return with_state(Half{});
}

// Element i's random bits, the Philox words refreshed at each group of 8.
struct Bits {
  const sr::Key& key;
  bool on;
  philox::Words w{};
  HG_INLINE uint16_t at(int64_t i, int64_t begin) {
    if (!on) return 0;
    if (i == begin || (i & 7) == 0) w = sr::words(key, static_cast<uint64_t>(i) >> 3);
    return sr::pick(w, static_cast<uint64_t>(i));
  }
};

void check(const char* op, const Tensor& p, const Tensor& g, const Tensor& master) {
  HG_CHECK(p.device().is_cpu() && p.is_contiguous() && g.dtype() == p.dtype() && g.is_contiguous() &&
               g.device().is_cpu() && g.numel() == p.numel(),
           "{}: parameter {} and gradient {} must be contiguous CPU tensors of one dtype", op, p.describe(),
           g.describe());
  HG_CHECK(!master.defined() || (master.dtype() == DType::Float32 && master.is_contiguous() &&
                                 master.numel() == p.numel() && master.device().is_cpu()),
           "{}: master copy {} must be a contiguous float32 CPU tensor like parameter {}", op, master.describe(),
           p.describe());
}
}  // namespace

void sgd_low_precision(const Tensor& p, const Tensor& g, const Tensor& master, const Tensor& buf, float inv,
                       const math::SGDHyper& h, math::Rounding r, const sr::Key& key) {
  constexpr const char* op = "SGD.step (low precision, CPU)";
  check(op, p, g, master);
  const DType sd = buf.defined() ? buf.dtype() : DType::Float32;
  dispatch(op, p, sd, [&](auto ptag, auto stag) {
    using P = decltype(ptag);
    using S = decltype(stag);
    P *pp = ptr<P>(p), *gp = ptr<P>(g);
    float* mp = ptr<float>(master);
    S* bp = ptr<S>(buf);
    const bool write_grad = inv != 1.0f;
    kernels::cpu::for_chunks(p.numel(), kChunk, p.numel() > 4 * kChunk, [&](int64_t begin, int64_t count) {
      Bits bits{key, r == math::Rounding::Stochastic};
      for (int64_t i = begin; i < begin + count; ++i)
        math::sgd_lp_element(pp, gp, mp, bp, i, inv, write_grad, h, r, bits.at(i, begin));
    });
  });
  for (const Tensor* t : {&p, &g, &master, &buf})
    if (t->defined()) t->bump_version();
}

void adam_low_precision(const Tensor& p, const Tensor& g, const Tensor& master, const Tensor& m, const Tensor& v,
                        const Tensor& vmax, float inv, const math::AdamHyper& h, math::Rounding r,
                        const sr::Key& key) {
  const char* op = h.decoupled ? "AdamW.step (low precision, CPU)" : "Adam.step (low precision, CPU)";
  check(op, p, g, master);
  dispatch(op, p, m.dtype(), [&](auto ptag, auto stag) {
    using P = decltype(ptag);
    using S = decltype(stag);
    P *pp = ptr<P>(p), *gp = ptr<P>(g);
    float* mp = ptr<float>(master);
    S *ep = ptr<S>(m), *vp = ptr<S>(v), *xp = ptr<S>(vmax);
    const bool write_grad = inv != 1.0f;
    kernels::cpu::for_chunks(p.numel(), kChunk, p.numel() > 4 * kChunk, [&](int64_t begin, int64_t count) {
      Bits bits{key, r == math::Rounding::Stochastic};
      for (int64_t i = begin; i < begin + count; ++i)
        math::adam_lp_element(pp, gp, mp, ep, vp, xp, i, inv, write_grad, h, r, bits.at(i, begin));
    });
  });
  for (const Tensor* t : {&p, &g, &master, &m, &v, &vmax})
    if (t->defined()) t->bump_version();
}

}  // namespace halfgrad::optim::fused
