// The loss modules with their options structs (designated initialisers), the
// modules added with them (L1Loss, SmoothL1Loss, BCELoss, BCEWithLogitsLoss),
// and the weight buffers.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
namespace F = hg::nn::functional;
using hgtest::values;

namespace {
std::vector<std::string> buffer_names(const hg::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_buffers()) out.push_back(name);
  return out;
}
}  // namespace

TEST_CASE("Loss modules take their options as designated initialisers", "[nn][loss]") {
  const hg::Tensor logits = hgtest::uniform({6, 4}, hg::float32, -3, 3);
  const hg::Tensor target = hg::tensor(std::vector<int64_t>{0, 3, 1, 2, 2, 1});
  const hg::Tensor w = hgtest::uniform({4}, hg::float32, 0.5, 1.5);
  auto item = [](const hg::Tensor& t) { return t.item<float>(); };

  hg::nn::CrossEntropyLoss smoothed({.label_smoothing = 0.1});
  CHECK(smoothed.options.label_smoothing == 0.1);
  CHECK(item(smoothed(logits, target)) == item(F::cross_entropy(logits, target, {.label_smoothing = 0.1})));
  CHECK(item(smoothed(logits, target)) != Approx(item(hg::cross_entropy(logits, target))));
  hg::nn::CrossEntropyLoss weighted({.weight = w, .ignore_index = 2, .reduction = hg::Reduction::Sum});
  CHECK(item(weighted(logits, target)) ==
        item(F::cross_entropy(logits, target, {.weight = w, .ignore_index = 2, .reduction = hg::Reduction::Sum})));
  CHECK(buffer_names(weighted) == std::vector<std::string>{"weight"});
  CHECK(weighted.state_dict().size() == 1);
  CHECK(buffer_names(smoothed).empty());  // an undefined weight is not a buffer
  // probability targets through the module
  const hg::Tensor probs = hg::softmax(hgtest::uniform({6, 4}, hg::float32), 1);
  CHECK(item(hg::nn::CrossEntropyLoss()(logits, probs)) == item(hg::cross_entropy(logits, probs)));
  // the positional constructors are still there
  CHECK(item(hg::nn::CrossEntropyLoss(hg::Reduction::Sum, 2)(logits, target)) ==
        item(hg::cross_entropy(logits, target, hg::Reduction::Sum, 2)));

  const hg::Tensor logp = hg::log_softmax(logits, 1);
  hg::nn::NLLLoss nll({.weight = w});
  CHECK(item(nll(logp, target)) == item(F::nll_loss(logp, target, {.weight = w})));
  CHECK(item(nll(logp, target)) == Approx(item(hg::cross_entropy(logits, target, {.weight = w}))).epsilon(1e-6));
  CHECK(item(hg::nn::NLLLoss(hg::Reduction::None)(logp, target).sum()) ==
        Approx(item(hg::nll_loss(logp, target, hg::Reduction::Sum))));

  const hg::Tensor a = hgtest::uniform({5, 3}, hg::float32), b = hgtest::uniform({5, 3}, hg::float32);
  CHECK(item(hg::nn::MSELoss({.reduction = hg::Reduction::Sum})(a, b)) == item(hg::mse_loss(a, b, hg::Reduction::Sum)));
  CHECK(item(hg::nn::L1Loss()(a, b)) == item(F::l1_loss(a, b)));
  CHECK(item(hg::nn::L1Loss({.reduction = hg::Reduction::Sum})(a, b)) ==
        item(F::l1_loss(a, b, {.reduction = hg::Reduction::Sum})));
  CHECK(item(hg::nn::SmoothL1Loss({.beta = 0.5})(a, b)) == item(F::smooth_l1_loss(a, b, {.beta = 0.5})));
  CHECK(item(hg::nn::SmoothL1Loss({.beta = 0.5})(a, b)) != Approx(item(F::smooth_l1_loss(a, b))));
  CHECK(item(hg::nn::SmoothL1Loss(hg::Reduction::Sum, 0.5)(a, b)) ==
        item(F::smooth_l1_loss(a, b, {.reduction = hg::Reduction::Sum, .beta = 0.5})));

  const hg::Tensor p = hgtest::uniform({5, 3}, hg::float32, 0.05, 0.95), t = hgtest::uniform({5, 3}, hg::float32, 0, 1);
  const hg::Tensor w3 = hgtest::uniform({3}, hg::float32, 0.5, 1.5), pw = hgtest::uniform({3}, hg::float32, 0.5, 3);
  hg::nn::BCELoss bce({.weight = w3});
  CHECK(item(bce(p, t)) == item(F::binary_cross_entropy(p, t, {.weight = w3})));
  hg::nn::BCEWithLogitsLoss bcel({.weight = w3, .pos_weight = pw});
  CHECK(item(bcel(a, t)) == item(F::binary_cross_entropy_with_logits(a, t, {.weight = w3, .pos_weight = pw})));
  CHECK(buffer_names(bcel) == std::vector<std::string>{"weight", "pos_weight"});
  CHECK(buffer_names(hg::nn::BCEWithLogitsLoss({.pos_weight = pw})) == std::vector<std::string>{"pos_weight"});
  CHECK(item(hg::nn::BCEWithLogitsLoss()(a, t)) == item(hg::binary_cross_entropy_with_logits(a, t)));

  // the buffers follow Module::to (dtype here; device in the CUDA module tests),
  // and the caller's tensor stays as it was (PyTorch gives the module a new
  // tensor: the w a user passed in is not cast or moved behind their back)
  const std::vector<double> w_before = hgtest::values(w);
  weighted.to(hg::float64);
  CHECK(weighted.options.weight.dtype() == hg::float64);
  CHECK(w.dtype() == hg::float32);
  CHECK(hgtest::values(w) == w_before);
  CHECK(weighted.state_dict().at("weight").dtype() == hg::float64);
  CHECK(item(weighted(logits.to(hg::float64), target)) ==
        Approx(item(F::cross_entropy(logits, target, {.weight = w, .ignore_index = 2, .reduction = hg::Reduction::Sum})))
            .epsilon(1e-6));
}
