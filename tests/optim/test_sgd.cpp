// SGD against PyTorch's formulas, run in float64 by hand loops.
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

// torch.optim.SGD's update, one step over all elements.
void sgd_reference(std::vector<double>& p, std::vector<double>& buf, int step, const hg::optim::SGDOptions& o) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = kGrad[i] + o.weight_decay * p[i];
    if (o.momentum != 0) {
      buf[i] = step == 1 ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

void check_sgd(const hg::optim::SGDOptions& o, hg::DType dtype, double tol) {
  hg::Tensor p = hg::tensor(kP0, {}, dtype).requires_grad_();
  hg::optim::SGD opt({p}, o);
  std::vector<double> ref = kP0, buf(kP0.size());
  for (int step = 1; step <= 5; ++step) {
    p.set_grad(hg::tensor(kGrad, {}, dtype));
    opt.step();
    sgd_reference(ref, buf, step, o);
    const auto got = values(p);
    for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(tol).margin(tol));
  }
  if (o.momentum != 0) {
    REQUIRE(opt.state(p) != nullptr);
    CHECK(opt.state(p)->momentum_buffer.dtype() == dtype);  // state in the param's dtype
    const auto b = values(opt.state(p)->momentum_buffer);
    for (size_t i = 0; i < buf.size(); ++i) CHECK(b[i] == Approx(buf[i]).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("SGD matches PyTorch's update rule", "[optim]") {
  using O = hg::optim::SGDOptions;
  const hg::DType dtype = GENERATE(hg::float64, hg::float32);
  const double tol = dtype == hg::float64 ? 1e-12 : 1e-6;
  SECTION("plain") { check_sgd({.lr = 0.1}, dtype, tol); }
  SECTION("momentum") { check_sgd({.lr = 0.1, .momentum = 0.9}, dtype, tol); }
  SECTION("momentum with dampening") { check_sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.3}, dtype, tol); }
  SECTION("nesterov") { check_sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}, dtype, tol); }
  SECTION("weight decay") { check_sgd({.lr = 0.1, .weight_decay = 0.01}, dtype, tol); }
  SECTION("everything") {
    check_sgd(O{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true}, dtype, tol);
    check_sgd(O{.lr = 0.05, .momentum = 0.8, .dampening = 0.5, .weight_decay = 0.1}, dtype, tol);
  }
}

TEST_CASE("SGD's first momentum buffer is a copy of the gradient", "[optim]") {
  hg::Tensor p = hg::tensor(kP0).requires_grad_();
  hg::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(hg::tensor(kGrad));
  opt.step();
  opt.zero_grad(/*set_to_none=*/false);  // zeroing the grad must not zero the buffer
  CHECK(values(opt.state(p)->momentum_buffer)[0] == Approx(0.1));
}

TEST_CASE("SGD rejects invalid options", "[optim]") {
  hg::Tensor p = hg::zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(hg::optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Contains("Nesterov"));
  CHECK_THROWS_WITH(hg::optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Contains("zero dampening"));
  CHECK_THROWS_WITH(hg::optim::SGD({p}, {.lr = -1}), Contains("learning rate"));
  CHECK_THROWS_WITH(hg::optim::SGD({p}, {.lr = 0.1, .momentum = -0.5}), Contains("momentum"));
  CHECK_THROWS_WITH(hg::optim::SGD({}, {.lr = 0.1}), Contains("empty parameter list"));
}
