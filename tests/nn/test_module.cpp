// Module: registration and naming, traversal order, train/eval, to(), zero_grad, repr.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include "tutorial_mlp.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {

using hgtest::MLP;  // tests/tutorial_mlp.h

// Own parameter, a buffer, a member child and an owned child.
struct Net : hg::nn::Module {
  hg::Tensor scale = hg::ones({3});
  hg::Tensor count = hg::zeros({1}, hg::int64);
  hg::Tensor running = hg::zeros({3});
  hg::nn::Linear fc{3, 3};
  std::shared_ptr<hg::nn::Dropout> drop;
  Net() {
    register_parameter("scale", scale);
    register_buffer("running", running);
    register_buffer("count", count);
    register_module("fc", fc);
    drop = register_module("drop", std::make_shared<hg::nn::Dropout>(0.5));
  }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, hg::Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [k, v] : named) out.push_back(k);
  return out;
}

}  // namespace

TEST_CASE("Module names parameters by registration path, in a fixed order", "[nn]") {
  MLP model;
  const auto named = model.named_parameters();
  CHECK(names(named) == std::vector<std::string>{"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"});
  const auto params = model.parameters();
  REQUIRE(params.size() == 4);
  CHECK(params[0].is_same(model.linear1.weight));
  CHECK(params[3].is_same(model.linear2.bias));
  for (const auto& p : params) {
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    CHECK(p.dtype() == hg::float32);
  }
  CHECK(model.linear1.weight.shape() == hg::Shape{100, 10});
  CHECK(model.parameters(/*recurse=*/false).empty());
}

TEST_CASE("Module lists own entries before children's, and buffers apart", "[nn]") {
  Net net;
  CHECK(names(net.named_parameters()) == std::vector<std::string>{"scale", "fc.weight", "fc.bias"});
  CHECK(names(net.named_buffers()) == std::vector<std::string>{"running", "count"});
  std::vector<std::string> modules;
  for (const auto& [k, m] : net.named_modules()) modules.push_back(k);
  CHECK(modules == std::vector<std::string>{"", "fc", "drop"});
  CHECK(net.named_children().size() == 2);
  CHECK(net.state_dict().keys() == std::vector<std::string>{"scale", "running", "count", "fc.weight", "fc.bias"});
}

TEST_CASE("Module rejects duplicate, empty and dotted names", "[nn]") {
  Net net;
  hg::Tensor t = hg::zeros({2});
  CHECK_THROWS_WITH(net.register_parameter("scale", t), Contains("already has") && Contains("\"scale\""));
  CHECK_THROWS_WITH(net.register_buffer("fc", t), Contains("\"fc\""));
  CHECK_THROWS_WITH(net.register_parameter("a.b", t), Contains("must not contain '.'"));
  CHECK_THROWS_WITH(net.register_parameter("", t), Contains("must not be empty"));
}

TEST_CASE("A parameter shared by two modules is listed once", "[nn]") {
  struct Tied : hg::nn::Module {
    hg::nn::Linear a{4, 4};
    hg::Tensor head;
    Tied() {
      head = a.weight;  // tie: the same tensor, registered under two names
      register_module("a", a);
      register_parameter("head", head);
    }
  } tied;
  CHECK(names(tied.named_parameters()) == std::vector<std::string>{"head", "a.bias"});
  CHECK(tied.state_dict().size() == 3);  // state_dict keeps both keys, as PyTorch's does
}

TEST_CASE("train() and eval() reach every sub-module and switch Dropout", "[nn]") {
  Net net;
  CHECK(net.is_training());
  CHECK(net.drop->is_training());
  hg::manual_seed(1);
  const hg::Tensor x = hg::ones({1000});

  net.eval();
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.fc.is_training());
  CHECK_FALSE(net.drop->is_training());
  const hg::Tensor y_eval = (*net.drop)(x);
  CHECK(hg::eq(y_eval, x).to(hg::int64).sum().item<int64_t>() == 1000);

  net.train();
  CHECK(net.drop->is_training());
  const hg::Tensor y = (*net.drop)(x);
  const int64_t zeros = hg::eq(y, 0.0).to(hg::int64).sum().item<int64_t>();
  const int64_t twos = hg::eq(y, 2.0).to(hg::int64).sum().item<int64_t>();
  CHECK(zeros + twos == 1000);  // kept values scaled by 1 / (1 - p)
  CHECK(zeros > 400);
  CHECK(zeros < 600);
}

TEST_CASE("to(float64) converts floating tensors in place and keeps parameters leaves", "[nn]") {
  Net net;
  const hg::Tensor w_before = net.fc.weight;  // another handle to the same parameter
  const float w00 = net.fc.weight.select(0, 0).select(0, 0).item<float>();
  hg::optim::SGD optimizer(net.parameters(), {.lr = 0.1});
  net.to(hg::float64);

  for (const auto& p : net.parameters()) {
    CHECK(p.dtype() == hg::float64);
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
  CHECK(net.running.dtype() == hg::float64);
  CHECK(net.count.dtype() == hg::int64);  // integer buffers keep their dtype
  CHECK(w_before.dtype() == hg::float64);  // the handle keeps its identity
  CHECK(net.fc.weight.select(0, 0).select(0, 0).item<double>() == Approx(w00).epsilon(1e-7));

  // Gradients flow to the converted parameters, and the optimizer made before still updates them.
  const hg::Tensor x = hg::randn({2, 3}, hg::float64);
  net.fc(x).sum().backward();
  REQUIRE(net.fc.weight.grad().defined());
  CHECK(net.fc.weight.grad().dtype() == hg::float64);
  const double before = net.fc.bias.select(0, 0).item<double>();
  optimizer.step();
  CHECK(net.fc.bias.select(0, 0).item<double>() == Approx(before - 0.1 * 2.0));  // d(sum)/db = batch size

  CHECK_THROWS_WITH(net.to(hg::int64), Contains("only floating dtypes"));
}

TEST_CASE("to(dtype) converts existing gradients too", "[nn]") {
  hg::nn::Linear fc(3, 2);
  fc(hg::randn({4, 3})).sum().backward();
  fc.to(hg::float64);
  CHECK(fc.weight.grad().dtype() == hg::float64);
  CHECK(fc.bias.grad().dtype() == hg::float64);
}

TEST_CASE("Module::zero_grad drops or zeroes gradients", "[nn]") {
  MLP model;
  auto run = [&] { hg::cross_entropy(model.forward(hg::randn({4, 10})), hg::tensor(std::vector<int64_t>{1, 2, 3, 4})).backward(); };
  run();
  REQUIRE(model.linear1.weight.grad().defined());
  const hg::Tensor g = model.linear1.weight.grad();
  model.zero_grad(/*set_to_none=*/false);
  CHECK(model.linear1.weight.grad().is_same(g));  // the same tensor, zeroed in place
  CHECK(hg::abs(g).sum().item<float>() == 0.0f);
  model.zero_grad();
  CHECK_FALSE(model.linear1.weight.grad().defined());
  CHECK_FALSE(model.linear2.bias.grad().defined());
}

TEST_CASE("apply visits children before their parent", "[nn]") {
  Net net;
  std::vector<std::string> seen;
  net.apply([&](hg::nn::Module& m) { seen.push_back(m.type_name()); });
  CHECK(seen == std::vector<std::string>{"Linear", "Dropout", "Net"});
  // The usual use: a custom init of every Linear.
  net.apply([](hg::nn::Module& m) {
    if (auto* fc = dynamic_cast<hg::nn::Linear*>(&m)) hg::nn::init::zeros_(fc->bias);
  });
  CHECK(hg::abs(net.fc.bias).sum().item<float>() == 0.0f);
}

TEST_CASE("repr shows the module tree as PyTorch prints it", "[nn]") {
  MLP model;
  CHECK(model.type_name() == "MLP");
  CHECK(model.repr() ==
        "MLP(\n"
        "  (linear1): Linear(in_features=10, out_features=100, bias=True)\n"
        "  (linear2): Linear(in_features=100, out_features=10, bias=True)\n"
        ")");
  CHECK(hg::nn::Linear(2, 3, false).repr() == "Linear(in_features=2, out_features=3, bias=False)");
}

namespace {
// Registers a tensor that lives only in this function (a misuse that used to
// leave the module pointing at a dead stack slot).
struct LocalParam : hg::nn::Module {
  LocalParam() { add_local(); }
  void add_local() {
    hg::Tensor w = hg::full({64}, 2.0);
    register_parameter("w", w);
    hg::Tensor b = hg::full({8}, 1.0);
    register_buffer("b", b);
  }
};
void clobber_stack() {
  volatile char junk[4096];
  for (auto& c : junk) c = static_cast<char>(0x5a);
}
}  // namespace

TEST_CASE("Module owns the handles it registers, so a registered local stays valid", "[nn][lifetime]") {
  LocalParam m;
  clobber_stack();  // reuse the stack where the locals were
  const auto params = m.parameters();
  REQUIRE(params.size() == 1);
  CHECK(params[0].shape() == hg::Shape{64});
  CHECK(params[0].requires_grad());
  CHECK(hg::sum(params[0]).item<float>() == 128.0f);
  REQUIRE(m.buffers().size() == 1);
  CHECK(hg::sum(m.buffers()[0]).item<float>() == 8.0f);
  m.to(hg::float64);
  CHECK(m.parameters()[0].dtype() == hg::float64);
  CHECK(m.state_dict().size() == 2);
}

TEST_CASE("A member registered in the constructor and the module share one tensor", "[nn][lifetime]") {
  hg::nn::Linear fc{3, 2};
  CHECK(fc.parameters()[0].is_same(fc.weight));
  fc.to(hg::float64);  // converted in place: the member handle sees it
  CHECK(fc.weight.dtype() == hg::float64);
  CHECK(fc.parameters()[0].is_same(fc.weight));
}
