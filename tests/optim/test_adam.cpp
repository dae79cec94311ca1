// Adam and AdamW against PyTorch's formulas, run in float64 by hand loops.
#include <catch2/catch.hpp>

#include <cmath>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {

// Any tensor's values as float64 in logical order (tests/test_util.h).
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

const std::vector<double> kP0 = {0.5, -1.25, 2.0, 0.75};
const std::vector<double> kGrad = {0.1, -0.3, 0.25, -0.05};

struct Ref {
  double lr, beta1, beta2, eps, wd;
  bool amsgrad, decoupled;
};

// torch.optim.Adam / AdamW (single-tensor path), one step over all elements.
void adam_reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, std::vector<double>& vmax,
                    int step, const Ref& r) {
  for (size_t i = 0; i < p.size(); ++i) {
    double g = kGrad[i];
    if (r.decoupled) p[i] *= 1 - r.lr * r.wd;
    else g += r.wd * p[i];
    m[i] = r.beta1 * m[i] + (1 - r.beta1) * g;
    v[i] = r.beta2 * v[i] + (1 - r.beta2) * g * g;
    vmax[i] = std::max(vmax[i], v[i]);
    const double bc1 = 1 - std::pow(r.beta1, step), bc2 = 1 - std::pow(r.beta2, step);
    const double denom = std::sqrt(r.amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + r.eps;
    p[i] -= r.lr / bc1 * m[i] / denom;
  }
}

template <typename Opt>
void check_adam(Opt& opt, hg::Tensor& p, const Ref& r, double tol, int steps = 6) {
  std::vector<double> ref = kP0, m(4), v(4), vmax(4);
  const hg::DType dtype = p.dtype();
  for (int step = 1; step <= steps; ++step) {
    // a gradient that changes sign, so amsgrad's max matters
    p.set_grad(hg::tensor(kGrad, {}, dtype));
    opt.step();
    adam_reference(ref, m, v, vmax, step, r);
    const auto got = values(p);
    for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(tol).margin(tol));
  }
  const auto* s = opt.state(p);
  REQUIRE(s != nullptr);
  CHECK(s->step == steps);
  CHECK(s->exp_avg.dtype() == dtype);
  const auto gm = values(s->exp_avg), gv = values(s->exp_avg_sq);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(gm[i] == Approx(m[i]).epsilon(tol).margin(tol));
    CHECK(gv[i] == Approx(v[i]).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("Adam matches PyTorch's update rule", "[optim]") {
  const hg::DType dtype = GENERATE(hg::float64, hg::float32);
  const double tol = dtype == hg::float64 ? 1e-12 : 1e-6;
  hg::Tensor p = hg::tensor(kP0, {}, dtype).requires_grad_();
  SECTION("defaults") {
    hg::optim::Adam opt({p});
    check_adam(opt, p, {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false}, tol);
  }
  SECTION("weight decay as an L2 penalty, other betas, large eps") {
    hg::optim::Adam opt({p}, {.lr = 0.05, .betas = {0.8, 0.99}, .eps = 1e-3, .weight_decay = 0.1});
    check_adam(opt, p, {0.05, 0.8, 0.99, 1e-3, 0.1, false, false}, tol);
  }
  SECTION("amsgrad") {
    hg::optim::Adam opt({p}, {.lr = 0.05, .weight_decay = 0.5, .amsgrad = true});
    check_adam(opt, p, {0.05, 0.9, 0.999, 1e-8, 0.5, true, false}, tol);
  }
}

TEST_CASE("AdamW matches PyTorch's update rule with decoupled decay", "[optim]") {
  const hg::DType dtype = GENERATE(hg::float64, hg::float32);
  const double tol = dtype == hg::float64 ? 1e-12 : 1e-6;
  hg::Tensor p = hg::tensor(kP0, {}, dtype).requires_grad_();
  SECTION("defaults (weight_decay 1e-2)") {
    hg::optim::AdamW opt({p});
    CHECK(opt.defaults().weight_decay == 1e-2);
    check_adam(opt, p, {1e-3, 0.9, 0.999, 1e-8, 1e-2, false, true}, tol);
  }
  SECTION("strong decay") {
    hg::optim::AdamW opt({p}, {.lr = 0.1, .betas = {0.5, 0.9}, .weight_decay = 0.3});
    check_adam(opt, p, {0.1, 0.5, 0.9, 1e-8, 0.3, false, true}, tol);
  }
  SECTION("amsgrad") {
    hg::optim::AdamW opt({p}, {.lr = 0.1, .amsgrad = true});
    check_adam(opt, p, {0.1, 0.9, 0.999, 1e-8, 1e-2, true, true}, tol);
  }
}

TEST_CASE("Adam rejects invalid options", "[optim]") {
  hg::Tensor p = hg::zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(hg::optim::Adam({p}, {.betas = {1.0, 0.999}}), Contains("beta1"));
  CHECK_THROWS_WITH(hg::optim::Adam({p}, {.betas = {0.9, -0.1}}), Contains("beta2"));
  CHECK_THROWS_WITH(hg::optim::Adam({p}, {.eps = -1}), Contains("eps"));
  CHECK_THROWS_WITH(hg::optim::AdamW({p}, {.lr = -1}), Contains("AdamW") && Contains("learning rate"));
}
