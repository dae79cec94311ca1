// Optimizer::state_dict / load_state_dict: PyTorch's layout, resuming
// bit for bit, and hostile input.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {

std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

struct Net : hg::nn::Module {
  hg::nn::Linear a{4, 8}, b{8, 3};
  hg::Tensor unused = hg::ones({2});  // in the optimizer, never gets a gradient
  Net() {
    register_module("a", a);
    register_module("b", b);
    register_parameter("unused", unused);
  }
  hg::Tensor forward(const hg::Tensor& x) { return b(hg::relu(a(x))); }
};

// Two groups: a's parameters with the defaults, b's and `unused` with their own lr.
using Make = std::function<std::unique_ptr<hg::optim::Optimizer>(Net&)>;

template <typename Opt>
Make maker(typename Opt::Options o, double lr2) {
  return [o, lr2](Net& net) {
    auto opt = std::make_unique<Opt>(net.a.parameters(), o);
    auto o2 = o;
    o2.lr = lr2;
    std::vector<hg::Tensor> second = net.b.parameters();
    second.push_back(net.unused);
    opt->add_param_group(second, o2);
    return std::unique_ptr<hg::optim::Optimizer>(std::move(opt));
  };
}

struct Batch {
  hg::Tensor x, y;
};
std::vector<Batch> batches(int n, hg::Device device = hg::Device::cpu()) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i)
    out.push_back({hgtest::uniform({5, 4}, hg::DType::Float32).to(device),
                   hgtest::uniform({5, 3}, hg::DType::Float32).to(device)});
  return out;
}

// One step; with a scaler, step `overflow_at` gets an inf loss (a skipped step).
void train_step(Net& net, hg::optim::Optimizer& opt, const Batch& b, hg::amp::GradScaler* scaler, bool overflow) {
  opt.zero_grad();
  hg::Tensor loss = hg::mse_loss(net.forward(b.x), b.y);
  if (overflow) loss = loss * std::numeric_limits<double>::infinity();
  if (scaler != nullptr) {
    scaler->scale(loss).backward();
    scaler->step(opt);
    scaler->update();
  } else {
    loss.backward();
    opt.step();
  }
}

hg::nn::StateDict snapshot(const Net& net) {
  hg::nn::StateDict out;
  for (const auto& [k, t] : net.state_dict()) out.insert(k, t.clone());
  return out;
}

void check_same_state(const hg::optim::OptimizerStateDict& a, const hg::optim::OptimizerStateDict& b) {
  REQUIRE(a.param_groups.size() == b.param_groups.size());
  for (size_t g = 0; g < a.param_groups.size(); ++g) {
    CHECK(a.param_groups[g].options == b.param_groups[g].options);
    CHECK(a.param_groups[g].params == b.param_groups[g].params);
  }
  REQUIRE(a.state.size() == b.state.size());
  for (const auto& [i, bufs] : a.state) {
    REQUIRE(b.state.count(i) == 1);
    const auto& other = b.state.at(i);
    REQUIRE(bufs.size() == other.size());
    for (const auto& [k, t] : bufs) {
      INFO("state[" << i << "][" << k << "]");
      REQUIRE(other.count(k) == 1);
      CHECK(t.dtype() == other.at(k).dtype());
      CHECK(t.shape() == other.at(k).shape());
      for (double v : values(t)) REQUIRE(std::isfinite(v));
      HG_CHECK_EXACT(t, values(other.at(k)));
    }
  }
}

// Train K steps, save, train N more -> A; a fresh model and optimizer (other
// init, other lr) load what was saved and train the same N steps -> B; A == B.
void check_resume(const Make& make, bool with_scaler, bool with_scheduler, hg::Device device = hg::Device::cpu()) {
  constexpr int K = 3, N = 4;
  const auto data = batches(K + N, device);
  const int overflow_at = with_scaler ? K + 1 : -1;
  hg::amp::GradScalerOptions so;
  so.init_scale = 1024.0;
  so.growth_interval = 2;

  hg::manual_seed(1);
  Net net1;
  net1.to(device);
  auto opt1 = make(net1);
  hg::amp::GradScaler scaler1(so);
  std::unique_ptr<hg::optim::StepLR> sched1;
  if (with_scheduler) sched1 = std::make_unique<hg::optim::StepLR>(*opt1, 2, 0.5);
  for (int i = 0; i < K; ++i) {
    train_step(net1, *opt1, data[i], with_scaler ? &scaler1 : nullptr, i == overflow_at);
    if (sched1) sched1->step();
  }
  const hg::nn::StateDict model_saved = snapshot(net1);
  const hg::optim::OptimizerStateDict opt_saved = opt1->state_dict();
  const auto scaler_saved = scaler1.state_dict();
  hg::optim::LRSchedulerState sched_saved;
  if (sched1) sched_saved = sched1->state_dict();
  REQUIRE(!opt_saved.state.empty());
  for (int i = K; i < K + N; ++i) {
    train_step(net1, *opt1, data[i], with_scaler ? &scaler1 : nullptr, i == overflow_at);
    if (sched1) sched1->step();
  }

  hg::manual_seed(2);
  Net net2;
  net2.to(device);
  auto opt2 = make(net2);
  opt2->set_lr(0, 123.0);  // overwritten by the load
  hg::amp::GradScaler scaler2(so);
  std::unique_ptr<hg::optim::StepLR> sched2;
  if (with_scheduler) sched2 = std::make_unique<hg::optim::StepLR>(*opt2, 2, 0.5);
  net2.load_state_dict(model_saved);
  opt2->load_state_dict(opt_saved);
  check_same_state(opt2->state_dict(), opt_saved);  // a round trip
  for (const auto& [i, bufs] : opt_saved.state)
    for (const auto& [k, t] : bufs) CHECK(t.device() == (k == "step" ? hg::Device::cpu() : device));
  if (with_scaler) scaler2.load_state_dict(scaler_saved);
  if (sched2) sched2->load_state_dict(sched_saved);
  for (int i = K; i < K + N; ++i) {
    train_step(net2, *opt2, data[i], with_scaler ? &scaler2 : nullptr, i == overflow_at);
    if (sched2) sched2->step();
  }

  const auto p1 = net1.named_parameters(), p2 = net2.named_parameters();
  REQUIRE(p1.size() == p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    INFO(p1[i].first);
    HG_CHECK_EXACT(p2[i].second, values(p1[i].second));
  }
  check_same_state(opt2->state_dict(), opt1->state_dict());
  if (with_scaler) CHECK(scaler2.state_dict() == scaler1.state_dict());
  for (size_t g = 0; g < 2; ++g) CHECK(opt2->lr(g) == opt1->lr(g));
}

}  // namespace

TEST_CASE("Optimizer state_dict has PyTorch's layout", "[optim]") {
  hg::manual_seed(3);
  Net net;
  auto opt = maker<hg::optim::Adam>({.lr = 0.01, .betas = {0.8, 0.9}, .amsgrad = true}, 0.02)(net);
  const auto data = batches(2);
  train_step(net, *opt, data[0], nullptr, false);
  train_step(net, *opt, data[1], nullptr, false);
  const auto sd = opt->state_dict();
  REQUIRE(sd.param_groups.size() == 2);
  CHECK(sd.param_groups[0].params == std::vector<int64_t>{0, 1});
  CHECK(sd.param_groups[1].params == std::vector<int64_t>{2, 3, 4});
  const std::map<std::string, double> g1{{"lr", 0.02},          {"beta1", 0.8},   {"beta2", 0.9},  {"eps", 1e-8},
                                         {"weight_decay", 0.0}, {"amsgrad", 1.0}, {"maximize", 0.0}};
  CHECK(sd.param_groups[1].options == g1);
  // parameter 4 (`unused`) never had a gradient: no state
  REQUIRE(sd.state.size() == 4);
  CHECK(sd.state.count(4) == 0);
  const auto& s0 = sd.state.at(0);
  CHECK(s0.size() == 4);
  const hg::Tensor& step = s0.at("step");
  CHECK(step.dtype() == hg::DType::Float32);
  CHECK(step.dim() == 0);
  CHECK(step.item() == 2.0);
  CHECK(s0.at("exp_avg").shape() == net.a.weight.shape());
  HG_CHECK_EXACT(s0.at("exp_avg"), values(opt->state_dict().state.at(0).at("exp_avg")));
  // a snapshot: training on does not change it
  const std::vector<double> before = values(s0.at("exp_avg_sq"));
  train_step(net, *opt, data[0], nullptr, false);
  HG_CHECK_EXACT(s0.at("exp_avg_sq"), before);

  hg::optim::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  train_step(net, sgd, data[0], nullptr, false);
  const auto ss = sgd.state_dict();
  const std::map<std::string, double> sg{{"lr", 0.1},           {"momentum", 0.9},  {"dampening", 0.0},
                                         {"weight_decay", 0.0}, {"nesterov", 1.0}, {"maximize", 0.0}};
  CHECK(ss.param_groups[0].options == sg);
  // net.parameters() lists `unused` (no gradient, no state) first
  CHECK(ss.state.count(0) == 0);
  CHECK(ss.state.at(1).size() == 1);
  CHECK(ss.state.at(1).count("momentum_buffer") == 1);
  // SGD without momentum has no state at all
  hg::optim::SGD plain(net.parameters(), {.lr = 0.1});
  train_step(net, plain, data[0], nullptr, false);
  CHECK(plain.state_dict().state.empty());
}

TEST_CASE("Optimizer load_state_dict resumes training bit for bit", "[optim]") {
  SECTION("SGD momentum") { check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3}, 0.02), false, false); }
  SECTION("SGD nesterov") { check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9, .nesterov = true}, 0.02), false, false); }
  SECTION("SGD + StepLR") { check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.5}, 0.02), false, true); }
  SECTION("Adam") { check_resume(maker<hg::optim::Adam>({.lr = 0.01, .weight_decay = 1e-2}, 0.003), false, false); }
  SECTION("Adam amsgrad") { check_resume(maker<hg::optim::Adam>({.lr = 0.01, .amsgrad = true}, 0.003), false, false); }
  SECTION("AdamW") { check_resume(maker<hg::optim::AdamW>({.lr = 0.01}, 0.003), false, false); }
  SECTION("AdamW amsgrad + StepLR") { check_resume(maker<hg::optim::AdamW>({.lr = 0.01, .amsgrad = true}, 0.003), false, true); }
  SECTION("SGD + GradScaler") { check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9}, 0.02), true, false); }
  SECTION("Adam + GradScaler") { check_resume(maker<hg::optim::Adam>({.lr = 0.01}, 0.003), true, false); }
  SECTION("AdamW amsgrad + GradScaler") { check_resume(maker<hg::optim::AdamW>({.lr = 0.01, .amsgrad = true}, 0.003), true, false); }
}

TEST_CASE("Optimizer load_state_dict restores the lr a scheduler set", "[optim]") {
  Net net;
  auto opt = maker<hg::optim::SGD>({.lr = 0.5}, 0.1)(net);
  hg::optim::StepLR sched(*opt, 1, 0.5);
  sched.step();
  const auto sd = opt->state_dict();
  CHECK(sd.param_groups[0].options.at("lr") == 0.25);
  CHECK(sd.param_groups[0].options.at("initial_lr") == 0.5);
  Net net2;
  auto opt2 = maker<hg::optim::SGD>({.lr = 0.5}, 0.1)(net2);
  opt2->load_state_dict(sd);
  CHECK(opt2->lr(0) == 0.25);
  CHECK(opt2->lr(1) == 0.05);
  CHECK(opt2->initial_lr(0) == 0.5);
  CHECK(opt2->initial_lr(1) == 0.1);
}

TEST_CASE("Optimizer load_state_dict rejects hostile state dicts", "[optim]") {
  hg::manual_seed(4);
  Net net;
  auto make = maker<hg::optim::Adam>({.lr = 0.01, .amsgrad = true}, 0.003);
  auto opt = make(net);
  train_step(net, *opt, batches(1)[0], nullptr, false);
  const hg::optim::OptimizerStateDict good = opt->state_dict();
  using SD = hg::optim::OptimizerStateDict;
  auto edited = [&](const std::function<void(SD&)>& edit) {
    return [=] {
      hg::manual_seed(4);
      Net n;
      auto o = make(n);
      SD sd = good;
      edit(sd);
      o->load_state_dict(sd);
    };
  };
  hgtest::expect_errors({
      {"one group too few", edited([](SD& s) { s.param_groups.pop_back(); }), {"1 parameter groups", "has 2"}},
      {"a parameter too many", edited([](SD& s) { s.param_groups[1].params.push_back(9); }), {"param_groups[1]", "4 parameters", "has 3"}},
      {"an index twice", edited([](SD& s) { s.param_groups[1].params[0] = 0; }), {"index 0 appears twice"}},
      {"state of an unlisted index", edited([](SD& s) { s.state[7] = s.state[0]; }), {"parameter 7", "no param group"}},
      {"wrong buffer shape", edited([](SD& s) { s.state[1]["exp_avg"] = hg::ones({5}); }), {"state[1][\"exp_avg\"]", "[5]", "[8]", "same parameters"}},
      {"wrong buffer dtype", edited([](SD& s) { s.state[0]["exp_avg_sq"] = s.state[0]["exp_avg_sq"].to(hg::DType::Float64); }), {"state[0][\"exp_avg_sq\"]", "float64", "shape and dtype"}},
      {"unknown buffer", edited([](SD& s) { s.state[0]["momentum_buffer"] = hg::ones({8, 4}); }), {"unknown", "momentum_buffer"}},
      {"missing buffer", edited([](SD& s) { s.state[0].erase("exp_avg"); }), {"state[0] has no \"exp_avg\""}},
      {"missing amsgrad buffer", edited([](SD& s) { s.state[2].erase("max_exp_avg_sq"); }), {"max_exp_avg_sq", "amsgrad"}},
      {"negative step", edited([](SD& s) { s.state[0]["step"] = hg::full({}, -1.0); }), {"whole number"}},
      {"fractional step", edited([](SD& s) { s.state[0]["step"] = hg::full({}, 1.5); }), {"whole number"}},
      {"NaN step", edited([](SD& s) { s.state[0]["step"] = hg::full({}, std::nan("")); }), {"whole number"}},
      {"step with 2 elements", edited([](SD& s) { s.state[0]["step"] = hg::ones({2}); }), {"one-element"}},
      {"undefined buffer", edited([](SD& s) { s.state[0]["exp_avg"] = hg::Tensor(); }), {"undefined"}},
      {"unknown option", edited([](SD& s) { s.param_groups[0].options["momentum"] = 0.9; }), {"unknown option", "momentum"}},
      {"missing option", edited([](SD& s) { s.param_groups[0].options.erase("eps"); }), {"no option \"eps\""}},
      {"bad option value", edited([](SD& s) { s.param_groups[0].options["lr"] = -1.0; }), {"learning rate"}},
      {"NaN option", edited([](SD& s) { s.param_groups[0].options["beta1"] = std::nan(""); }), {"NaN"}},
      {"non-boolean flag", edited([](SD& s) { s.param_groups[0].options["amsgrad"] = 0.5; }), {"0 or 1"}},
      {"maximize", edited([](SD& s) { s.param_groups[0].options["maximize"] = 1.0; }), {"maximize", "negate the loss"}},
  });
  // an Error changes nothing
  SD bad = good;
  bad.state[1]["exp_avg"] = hg::ones({5});
  bad.param_groups[0].options["lr"] = 0.5;
  const auto before = opt->state_dict();
  CHECK_THROWS_AS(opt->load_state_dict(bad), hg::Error);
  check_same_state(opt->state_dict(), before);
  // SGD's options are not Adam's
  hg::optim::SGD sgd(net.parameters(), {.lr = 0.1});
  auto two = good;
  two.param_groups = {good.param_groups[0]};
  two.param_groups[0].params = {0, 1, 2, 3, 4};
  CHECK_THROWS_WITH(sgd.load_state_dict(two), Contains("no option \"momentum\""));
}

TEST_CASE("Optimizer load_state_dict resumes fused CUDA training bit for bit", "[optim][cuda]") {
  const hg::Device cuda = hg::Device::cuda();
  check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9, .nesterov = true}, 0.02), false, true, cuda);
  check_resume(maker<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9}, 0.02), true, false, cuda);
  check_resume(maker<hg::optim::Adam>({.lr = 0.01, .weight_decay = 1e-2}, 0.003), true, false, cuda);
  check_resume(maker<hg::optim::AdamW>({.lr = 0.01, .amsgrad = true}, 0.003), true, true, cuda);

  // a CPU state dict loads into a CUDA optimizer: the buffers go to the parameters' device
  hg::manual_seed(5);
  Net cpu_net;
  auto cpu_opt = maker<hg::optim::Adam>({.lr = 0.01}, 0.003)(cpu_net);
  const auto data = batches(2);
  train_step(cpu_net, *cpu_opt, data[0], nullptr, false);
  hg::manual_seed(5);
  Net gpu_net;
  gpu_net.to(cuda);
  auto gpu_opt = maker<hg::optim::Adam>({.lr = 0.01}, 0.003)(gpu_net);
  gpu_opt->load_state_dict(cpu_opt->state_dict());
  const auto sd = gpu_opt->state_dict();
  CHECK(sd.state.at(0).at("exp_avg").device() == cuda);
  CHECK(sd.state.at(0).at("step").item() == 1.0);
  train_step(gpu_net, *gpu_opt, {data[1].x.to(cuda), data[1].y.to(cuda)}, nullptr, false);
  CHECK(gpu_opt->state_dict().state.at(0).at("step").item() == 2.0);
}
