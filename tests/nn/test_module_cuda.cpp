// Module::to and load_state_dict across devices (run with --require-cuda;
// skipped where no GPU can be used). Only allocation and copies are needed,
// which the CUDA backend has.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;

namespace {

struct MLP : hg::nn::Module {
  hg::nn::Linear linear1{10, 100}, linear2{100, 10};
  hg::Tensor steps = hg::zeros({1}, hg::int64);
  MLP() {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
    register_buffer("steps", steps);
  }
};

// Any tensor's values as float64 in logical order (tests/test_util.h).
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

}  // namespace

TEST_CASE("Module::to moves parameters and buffers to CUDA and back", "[nn][cuda]") {
  hg::manual_seed(0);
  MLP model;
  const auto w = values(model.linear1.weight);
  hg::optim::SGD optimizer(model.parameters(), {.lr = 0.01});

  model.to(hg::Device::cuda());
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK(p.device().is_cuda());
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
  CHECK(model.steps.device().is_cuda());
  CHECK(optimizer.parameters()[0].device().is_cuda());  // the optimizer sees the move
  CHECK(values(model.linear1.weight) == w);

  model.to(hg::Device::cpu());
  CHECK(model.linear1.weight.device().is_cpu());
  CHECK(values(model.linear1.weight) == w);
}

TEST_CASE("Module::to(cuda, float64) casts on the host, then moves", "[nn][cuda]") {
  MLP model;
  const auto w = values(model.linear2.weight);
  model.to(hg::Device::cuda(), hg::float64);
  CHECK(model.linear2.weight.dtype() == hg::float64);
  CHECK(model.linear2.weight.device().is_cuda());
  CHECK(model.steps.dtype() == hg::int64);
  CHECK(values(model.linear2.weight) == w);
}

TEST_CASE("load_state_dict copies a CPU state dict into a CUDA model", "[nn][cuda]") {
  hg::manual_seed(1);
  MLP source;
  hg::manual_seed(2);
  MLP target;
  target.to(hg::Device::cuda());
  target.load_state_dict(source.state_dict());
  CHECK(target.linear1.bias.device().is_cuda());
  for (const auto& [key, t] : source.state_dict()) {
    INFO(key);
    CHECK(values(target.state_dict().at(key)) == values(t));
  }
}
