// The fused CPU optimizer loops round every operation as optim/update_math.h
// writes it, whatever the host CPU: the vectorised body (AVX-512 or AVX2,
// picked at load time) and the scalar tail give the same bits as the formula
// evaluated one element at a time, so CPU and CUDA updates agree. (A compiler
// that contracts a * b + c into one fused multiply-add would break this on
// machines with FMA; the library is built with -ffp-contract=off.)
#include <catch2/catch.hpp>

#include <cstring>

#include <halfgrad.h>
#include <halfgrad/optim/fused_cpu.h>

namespace hg = halfgrad;
namespace math = halfgrad::optim::math;

namespace {
// 1000 body elements and a ragged tail; every element starts the same.
constexpr int64_t kN = 1013;

hg::Tensor filled(float v) { return hg::full({kN}, v, hg::float32); }

// Every element of `t` has exactly the bits of `want`.
void check_all_equal(const hg::Tensor& t, float want, const char* what) {
  const float* d = t.data<float>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < kN; ++i) {
    if (std::memcmp(&d[i], &want, sizeof(float)) != 0 && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << kN << " elements differ from the scalar formula, first at " << first
            << " (" << (first >= 0 ? d[first] : 0.f) << " vs " << want << ")");
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("fused CPU SGD: vector body and tail round as the scalar formula", "[optim][fused]") {
  const bool nesterov = GENERATE(false, true);
  const float inv = GENERATE(1.0f, 1.0f / 1024);
  float p = 0.7310586f, g = 0.1234567f * (1 / inv), buf = 0.0f;
  hg::Tensor tp = filled(p), tg = filled(g), tb = filled(buf);
  for (int step = 0; step < 4; ++step) {
    const math::SGDHyper h{0.0137f, 0.9f, 0.7f, 0.0103f, nesterov, step == 0};
    tg.fill_(g);
    float gs = g;
    math::sgd_element(p, gs, &buf, inv, h);
    hg::optim::fused::sgd(tp, tg, tb, inv, h);
    check_all_equal(tp, p, "param");
    check_all_equal(tb, buf, "momentum buffer");
    check_all_equal(tg, gs, "unscaled gradient");
  }
}

TEST_CASE("fused CPU Adam: vector body and tail round as the scalar formula", "[optim][fused]") {
  const bool decoupled = GENERATE(false, true);
  const bool amsgrad = GENERATE(false, true);
  float p = -0.4142135f, g = 0.0321987f, m = 0.f, v = 0.f, vmax = 0.f;
  hg::Tensor tp = filled(p), tg = filled(g), tm = filled(m), tv = filled(v), tx = filled(vmax);
  const double lr = 3e-3, b1 = 0.9, b2 = 0.999, wd = 0.0107;
  for (int t = 1; t <= 4; ++t) {
    math::AdamHyper h{static_cast<float>(b1), static_cast<float>(1 - b1), static_cast<float>(b2),
                      static_cast<float>(1 - b2), 1e-8f, static_cast<float>(wd), static_cast<float>(1 - lr * wd),
                      0.f, 0.f, amsgrad, decoupled};
    math::adam_bias_corrections(h, lr, b1, b2, t);
    g = -g * 1.3f;  // a gradient that changes sign and size
    tg.fill_(g);
    float gs = g;
    math::adam_element(p, gs, m, v, amsgrad ? &vmax : nullptr, 1.f, h);
    hg::optim::fused::adam(tp, tg, tm, tv, amsgrad ? tx : hg::Tensor(), 1.f, h);
    check_all_equal(tp, p, "param");
    check_all_equal(tm, m, "exp_avg");
    check_all_equal(tv, v, "exp_avg_sq");
    if (amsgrad) check_all_equal(tx, vmax, "max_exp_avg_sq");
  }
}
