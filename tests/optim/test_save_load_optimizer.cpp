// hg::save / hg::load of an optimizer (LibTorch's torch::save(optimizer, path)
// / torch::load(optimizer, path)): Adam after a few steps, saved with its
// model, loaded into fresh ones, trains on exactly as the original does; a
// file of another kind or another optimizer's state is an Error that changes
// nothing.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"
#include "tutorial_mlp.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;
using hgtest::TempDir;

namespace {

// One step of the tutorial MLP on a batch drawn from the global generator.
void train_step(hgtest::MLP& model, hg::optim::Optimizer& opt, hg::amp::GradScaler& scaler) {
  const hg::Tensor x = hg::randn({16, 10}), y = hg::randint(0, 10, {16});
  hg::Tensor loss;
  {
    hg::amp::autocast region(hg::DeviceType::CPU, hg::bfloat16);
    loss = hg::cross_entropy(model.forward(x), y);
  }
  opt.zero_grad();
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
}

void check_same_state(const hg::optim::Optimizer& a, const hg::optim::Optimizer& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.state.size() == sb.state.size());
  for (const auto& [index, buffers] : sa.state) {
    REQUIRE(sb.state.count(index) == 1);
    REQUIRE(sb.state.at(index).size() == buffers.size());
    for (const auto& [name, t] : buffers) {
      INFO(index << "." << name);
      CHECK(hgtest::same_bits(sb.state.at(index).at(name), t));
    }
  }
  REQUIRE(sa.param_groups.size() == sb.param_groups.size());
  for (size_t g = 0; g < sa.param_groups.size(); ++g) CHECK(sa.param_groups[g].options == sb.param_groups[g].options);
}

}  // namespace

TEST_CASE("hg::save / hg::load: Adam after a few steps resumes training bit for bit", "[optim][save]") {
  TempDir dir;
  hg::manual_seed(0);
  hgtest::MLP model;
  hg::optim::Adam opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.01, .amsgrad = true});
  hg::amp::GradScaler scaler({.init_scale = 1024.0});
  for (int i = 0; i < 3; ++i) train_step(model, opt, scaler);
  hg::save(model, dir / "model.safetensors");
  hg::save(opt, dir / "adam.safetensors");
  const auto rng = hg::get_rng_state();

  hg::manual_seed(99);  // other initial weights
  hgtest::MLP fresh;
  hg::optim::Adam fresh_opt(fresh.parameters(), {.lr = 0.5});  // other options: replaced by the file's
  hg::load(fresh, dir / "model.safetensors");
  hg::load(fresh_opt, dir / "adam.safetensors");
  check_same_state(opt, fresh_opt);
  CHECK(fresh_opt.lr(0) == 1e-2);

  // the same 4 batches for both (the scaler's own state travels by its state_dict)
  hg::amp::GradScaler fresh_scaler;
  fresh_scaler.load_state_dict(scaler.state_dict());
  const hg::Tensor saved_weight = model.linear1.weight.clone();
  hg::set_rng_state(rng);
  for (int i = 0; i < 4; ++i) train_step(model, opt, scaler);
  REQUIRE_FALSE(hgtest::same_bits(model.linear1.weight, saved_weight));  // it trained on
  hg::set_rng_state(rng);
  for (int i = 0; i < 4; ++i) train_step(fresh, fresh_opt, fresh_scaler);
  for (const auto& [name, t] : model.state_dict()) {
    INFO(name);
    CHECK(hgtest::same_bits(fresh.state_dict().at(name), t));
  }
  check_same_state(opt, fresh_opt);
  CHECK(opt.state(model.linear1.weight)->step_count() == 7);
  CHECK(fresh_opt.state(fresh.linear1.weight)->step_count() == 7);
}

TEST_CASE("hg::load(optimizer): another kind of file or another optimizer's state is an Error that changes nothing",
          "[optim][save][hostile]") {
  TempDir dir;
  hg::manual_seed(1);
  hgtest::MLP model;
  hg::optim::Adam adam(model.parameters(), {.lr = 1e-3});
  hg::amp::GradScaler scaler;
  train_step(model, adam, scaler);
  const std::string adam_file = dir / "adam.safetensors", model_file = dir / "model.safetensors",
                    tensor_file = dir / "t.safetensors";
  hg::save(adam, adam_file);
  hg::save(model, model_file);
  hg::save(hg::ones({2}), tensor_file);

  hg::optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  train_step(model, sgd, scaler);
  const auto sgd_before = sgd.state_dict();
  REQUIRE_THROWS_WITH(hg::load(sgd, adam_file),
                      Contains(adam_file) && Contains("the state of an Adam optimizer, which does not load into an SGD"));
  REQUIRE_THROWS_WITH(hg::load(sgd, model_file),
                      Contains(model_file) && Contains("holds a module's state_dict") &&
                          Contains("not the state of an SGD optimizer") && Contains("hg::load(module, path)"));
  REQUIRE_THROWS_WITH(hg::load(sgd, tensor_file), Contains("holds a tensor") && Contains("hg::load<hg::Tensor>(path)"));
  REQUIRE_THROWS_WITH(hg::load(model, adam_file), Contains("holds an optimizer's state (Adam)") &&
                                                      Contains("not a state_dict for") &&
                                                      Contains("hg::load(optimizer, path)"));
  REQUIRE_THROWS_WITH(hg::load<hg::Tensor>(adam_file), Contains("holds an optimizer's state (Adam), not a tensor"));
  CHECK(hgtest::same_bits(sgd.state_dict().state.at(0).at("momentum_buffer"),
                          sgd_before.state.at(0).at("momentum_buffer")));

  // an Adam on parameters of other shapes: load_state_dict's Error, with the file's name
  hg::nn::Linear other(3, 4);
  hg::optim::Adam other_adam(other.parameters());
  REQUIRE_THROWS_WITH(hg::load(other_adam, adam_file), Contains("hg::load('" + adam_file + "')"));
  CHECK(other_adam.state_dict().state.empty());

  // truncated
  const std::string bytes = hgtest::read_bytes(adam_file);
  hgtest::write_bytes(dir / "cut.safetensors", bytes.substr(0, bytes.size() - 3));
  hg::optim::Adam again(model.parameters());
  REQUIRE_THROWS_WITH(hg::load(again, dir / "cut.safetensors"),
                      Contains("cut.safetensors") && Contains("asked for the state of an Adam optimizer"));
  CHECK(again.state_dict().state.empty());
}
