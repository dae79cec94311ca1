// The loss options on a CUDA device against the CPU on the same values:
// cross_entropy with class weights, label smoothing and probability targets,
// weighted nll_loss, l1_loss, smooth_l1_loss, broadcast mse_loss and the
// weights of binary_cross_entropy(_with_logits); forward and backward in every
// float dtype and reduction; a weight on the wrong device. These losses are
// composites of ops that have CUDA kernels, so no new kernel is involved.
// Run only where a GPU is usable ("[cuda]").
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_compare.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DType;
using hg::Reduction;
using hg::Shape;
using hg::Tensor;
using hgtest::values;
using hgtest::cuda::dev;
using hgtest::cuda::kCpu;
using hgtest::cuda::kCuda;
using hgtest::cuda::leaf_on;

namespace {
// The composite losses round more than one op: twice the dtype's tolerance.
void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  hgtest::cuda::expect_same(gpu, cpu, what, false, 2 * hgtest::tol(cpu.dtype()));
}
const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }
}  // namespace

TEST_CASE("CUDA cross_entropy and nll_loss options: weights, label smoothing, probability targets",
          "[cuda][ops][loss][options]") {
  const int64_t n = 37, c = 11;
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      const Tensor x = hgtest::uniform({n, c}, dt, -3, 3);
      const Tensor w = hgtest::uniform({c}, dt, 0.25, 2.0);
      Tensor t = hgtest::uniform({n}, DType::Int64, 0, static_cast<double>(c - 1));
      static_cast<int64_t*>(t.data_ptr())[3] = 2;  // ignore_index 2 is used below
      const Tensor u = hgtest::uniform({n, c}, dt, 0.1, 1.0);
      const Tensor p = hg::div(u, hg::sum(u, {1}, true));
      const Tensor g = hgtest::uniform({r == Reduction::None ? n : 1}, dt, 0.5, 1.5);  // a nonuniform upstream gradient
      using Loss = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;  // (x, target, weight)
      const std::vector<std::tuple<std::string, Loss, Tensor>> cases = {
          {"cross_entropy weight ignore smoothing",
           [&](const Tensor& a, const Tensor& b, const Tensor& ww) { return hg::cross_entropy(a, b, {ww, 2, r, 0.1}); }, t},
          {"cross_entropy smoothing",
           [&](const Tensor& a, const Tensor& b, const Tensor&) {
             return hg::cross_entropy(a, b, {.reduction = r, .label_smoothing = 0.3});
           },
           t},
          {"cross_entropy probabilities weight smoothing",
           [&](const Tensor& a, const Tensor& b, const Tensor& ww) {
             return hg::cross_entropy(a, b, {.weight = ww, .reduction = r, .label_smoothing = 0.1});
           },
           p},
          {"nll_loss weight ignore",
           [&](const Tensor& a, const Tensor& b, const Tensor& ww) {
             return hg::nll_loss(hg::log_softmax(a, 1), b, {ww, 2, r});
           },
           t},
      };
      for (const auto& [name, loss, target] : cases) {
        const std::string what = name + " " + hgtest::dname(dt) + " " + rname(r);
        const Tensor xc = leaf_on(x, kCpu), xg = leaf_on(x, kCuda);
        const Tensor lc = loss(xc, target, w), lg = loss(xg, dev(target), dev(w));
        expect_close(lg, lc, what);
        hg::mul(lc.reshape({-1}), g).sum().backward();
        hg::mul(lg.reshape({-1}), dev(g)).sum().backward();
        expect_close(xg.grad(), xc.grad(), what + " backward");
      }
    }
  // a weight on another device than the input: an Error naming both
  const Tensor x = hgtest::uniform({4, 3}, DType::Float32);
  const Tensor t = hg::tensor(std::vector<int64_t>{0, 1, 2, 1});
  hgtest::expect_errors({
      {"cross_entropy weight on the CPU", [&] { hg::cross_entropy(dev(x), dev(t), {.weight = hg::ones({3})}); },
       {"cross_entropy", "weight", "device"}},
      {"nll_loss weight on the CPU", [&] { hg::nll_loss(dev(x), dev(t), {.weight = hg::ones({3})}); },
       {"nll_loss", "weight", "device"}},
      {"bce_with_logits pos_weight on the CPU",
       [&] { hg::binary_cross_entropy_with_logits(dev(x), dev(x), {.pos_weight = hg::ones({3})}); },
       {"pos_weight", "device"}},
  });
}

TEST_CASE("CUDA l1_loss, smooth_l1_loss, broadcast mse_loss, weighted binary cross-entropy",
          "[cuda][ops][loss][options]") {
  for (DType dt : hgtest::kFloatDTypes)
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      const Tensor a = hgtest::uniform({19, 13}, dt), b = hgtest::uniform({13, 19}, dt).t();  // b strided
      const Tensor row = hgtest::uniform({13}, dt);
      const Tensor p = hgtest::uniform({19, 13}, dt, 0.05, 0.95), q = hgtest::uniform({19, 13}, dt, 0, 1);
      const Tensor w = hgtest::uniform({13}, dt, 0.5, 1.5), pw = hgtest::uniform({13}, dt, 0.5, 3);
      const Tensor g = hgtest::uniform(r == Reduction::None ? Shape{19, 13} : Shape{}, dt, 0.5, 1.5);
      using Loss = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;
      const std::vector<std::tuple<std::string, Loss, Tensor, Tensor>> cases = {
          {"l1_loss", [&](const Tensor& x, const Tensor& y, const Tensor&, const Tensor&) { return hg::l1_loss(x, y, {r}); },
           a, b},
          {"smooth_l1_loss beta 0.5",
           [&](const Tensor& x, const Tensor& y, const Tensor&, const Tensor&) {
             return hg::smooth_l1_loss(x, y, {r, 0.5});
           },
           a, b},
          {"mse_loss broadcast target",
           [&](const Tensor& x, const Tensor& y, const Tensor&, const Tensor&) { return hg::mse_loss(x, y, {r}); }, a,
           row},
          {"binary_cross_entropy weight",
           [&](const Tensor& x, const Tensor& y, const Tensor& ww, const Tensor&) {
             return hg::binary_cross_entropy(x, y, {ww, r});
           },
           p, q},
          {"binary_cross_entropy_with_logits weight pos_weight",
           [&](const Tensor& x, const Tensor& y, const Tensor& ww, const Tensor& pp) {
             return hg::binary_cross_entropy_with_logits(x, y, {ww, r, pp});
           },
           a, q},
      };
      for (const auto& [name, loss, in, target] : cases) {
        const std::string what = name + " " + hgtest::dname(dt) + " " + rname(r);
        const Tensor xc = leaf_on(in, kCpu), xg = leaf_on(in, kCuda);
        const Tensor tc = leaf_on(target, kCpu), tg = leaf_on(target, kCuda);
        const Tensor lc = loss(xc, tc, w, pw), lg = loss(xg, tg, dev(w), dev(pw));
        expect_close(lg, lc, what);
        hg::mul(lc, g).sum().backward();
        hg::mul(lg, dev(g)).sum().backward();
        expect_close(xg.grad(), xc.grad(), what + " input backward");
        expect_close(tg.grad(), tc.grad(), what + " target backward");
      }
    }
}

TEST_CASE("CUDA loss modules move their weight buffers with to(device)", "[cuda][nn][loss][options]") {
  const Tensor w = hgtest::uniform({3}, DType::Float32, 0.5, 1.5);
  hg::nn::CrossEntropyLoss criterion({.weight = w, .label_smoothing = 0.1});
  criterion.to(kCuda);
  CHECK(criterion.options.weight.device().is_cuda());
  CHECK(w.device().is_cpu());  // the caller's tensor stays where it was
  const Tensor x = hgtest::uniform({4, 3}, DType::Float32);
  const Tensor t = hg::tensor(std::vector<int64_t>{0, 1, 2, 1});
  expect_close(criterion(dev(x), dev(t)), hg::cross_entropy(x, t, {.weight = w, .label_smoothing = 0.1}), "module");
}
