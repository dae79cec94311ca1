// Layers: Linear's init and forward, Sequential, Flatten, activations, losses, init.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {

// Any tensor's values as float64 in logical order (tests/test_util.h).
std::vector<double> values(const hg::Tensor& t) { return hgtest::values(t.detach().cpu()); }

double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("Linear draws weight and bias from U(-1/sqrt(in), 1/sqrt(in))", "[nn]") {
  hg::manual_seed(0);
  hg::nn::Linear fc(16, 200);
  const double bound = 1.0 / std::sqrt(16.0);
  for (const auto* t : {&fc.weight, &fc.bias}) {
    const auto v = values(*t);
    double lo = 1, hi = -1, mean = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      mean += x / static_cast<double>(v.size());
    }
    CHECK(lo >= -bound);
    CHECK(hi <= bound);
    CHECK(lo < -0.9 * bound);  // the whole range is used
    CHECK(hi > 0.9 * bound);
    CHECK(std::abs(mean) < 0.1 * bound);
  }
  // The uniform variance bound^2 / 3 over the 3200 weights.
  double var = 0;
  for (double x : values(fc.weight)) var += x * x / 3200.0;
  CHECK(var == Approx(bound * bound / 3).epsilon(0.1));
}

TEST_CASE("manual_seed makes Linear's init reproducible", "[nn]") {
  hg::manual_seed(42);
  hg::nn::Linear a(10, 100);
  hg::manual_seed(42);
  hg::nn::Linear b(10, 100);
  hg::nn::Linear c(10, 100);  // the stream has moved on
  CHECK(values(a.weight) == values(b.weight));
  CHECK(values(a.bias) == values(b.bias));
  CHECK(values(a.weight) != values(c.weight));
}

TEST_CASE("Linear forward matches a float64 reference", "[nn]") {
  hg::manual_seed(3);
  hg::nn::Linear fc(7, 5);
  const hg::Tensor x = hg::randn({4, 7});
  const auto y = values(fc(x));
  const auto xv = values(x), w = values(fc.weight), b = values(fc.bias);
  std::vector<double> ref(4 * 5);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 5; ++o) {
      double acc = b[o];
      for (int k = 0; k < 7; ++k) acc += xv[i * 7 + k] * w[o * 7 + k];
      ref[i * 5 + o] = acc;
    }
  CHECK(fc(x).shape() == hg::Shape{4, 5});
  CHECK(rel_err(y, ref) < 1e-6);

  // Without bias, and with extra leading dims.
  hg::nn::Linear nb(7, 5, /*bias=*/false);
  CHECK_FALSE(nb.bias.defined());
  CHECK(nb.parameters().size() == 1);
  const hg::Tensor x3 = hg::randn({2, 3, 7});
  CHECK(nb(x3).shape() == hg::Shape{2, 3, 5});
}

TEST_CASE("Linear gives a gradient to its parameters", "[nn]") {
  hg::nn::Linear fc(3, 2);
  const hg::Tensor x = hg::randn({5, 3});
  fc(x).sum().backward();
  // d(sum y)/dW[o, k] = sum_i x[i, k]; d/db = batch size
  const auto g = values(fc.weight.grad()), xv = values(x);
  for (int o = 0; o < 2; ++o)
    for (int k = 0; k < 3; ++k) {
      double s = 0;
      for (int i = 0; i < 5; ++i) s += xv[i * 3 + k];
      CHECK(g[o * 3 + k] == Approx(s).margin(1e-5));
    }
  CHECK(values(fc.bias.grad()) == std::vector<double>{5.0, 5.0});
}

TEST_CASE("Sequential names its children 0, 1, ... and runs them in order", "[nn]") {
  hg::manual_seed(0);
  hg::nn::Sequential seq(std::make_shared<hg::nn::Linear>(10, 100), std::make_shared<hg::nn::ReLU>(),
                         std::make_shared<hg::nn::Linear>(100, 10));
  CHECK(seq.size() == 3);
  CHECK(seq.state_dict().keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(seq.at<hg::nn::Linear>(2).out_features == 10);
  CHECK_THROWS_WITH(seq.at<hg::nn::Linear>(1), Contains("ReLU"));
  CHECK_THROWS_WITH(seq[3], Contains("out of range"));

  const hg::Tensor x = hg::randn({4, 10});
  auto& l0 = seq.at<hg::nn::Linear>(0);
  auto& l2 = seq.at<hg::nn::Linear>(2);
  const hg::Tensor ref = l2(hg::relu(l0(x)));
  CHECK(values(seq(x)) == values(ref));

  // Built up one by one, including a member module held by reference.
  hg::nn::Linear head(3, 2);
  hg::nn::Sequential seq2;
  seq2.emplace_back<hg::nn::Flatten>();
  seq2.emplace_back<hg::nn::Tanh>();
  seq2.push_back(head);
  CHECK(seq2(hg::randn({5, 1, 3})).shape() == hg::Shape{5, 2});
  CHECK(seq2.named_parameters()[0].first == "2.weight");
  CHECK(seq2.repr() ==
        "Sequential(\n"
        "  (0): Flatten(start_dim=1, end_dim=-1)\n"
        "  (1): Tanh()\n"
        "  (2): Linear(in_features=3, out_features=2, bias=True)\n"
        ")");
}

TEST_CASE("Flatten merges the requested dims", "[nn]") {
  const hg::Tensor x = hg::randn({2, 3, 4, 5});
  CHECK(hg::nn::Flatten()(x).shape() == hg::Shape{2, 60});
  CHECK(hg::nn::Flatten(0, 1)(x).shape() == hg::Shape{6, 4, 5});
  CHECK(hg::nn::Flatten(2)(x).shape() == hg::Shape{2, 3, 20});
}

TEST_CASE("Activation modules match their functions", "[nn]") {
  const hg::Tensor x = hg::randn({3, 4});
  CHECK(values(hg::nn::ReLU()(x)) == values(hg::relu(x)));
  CHECK(values(hg::nn::GELU()(x)) == values(hg::gelu(x)));
  CHECK(values(hg::nn::GELU("tanh")(x)) == values(hg::gelu(x, "tanh")));
  CHECK(values(hg::nn::GELU("tanh")(x)) != values(hg::gelu(x)));
  CHECK(hg::nn::GELU().repr() == "GELU(approximate='none')");  // PyTorch's repr
  CHECK(hg::nn::GELU("tanh").repr() == "GELU(approximate='tanh')");
  CHECK_THROWS_WITH(hg::nn::GELU("erf"), Contains("GELU") && Contains("\"erf\"") && Contains("\"tanh\""));
  CHECK(values(hg::nn::Sigmoid()(x)) == values(hg::sigmoid(x)));
  CHECK(values(hg::nn::Tanh()(x)) == values(hg::tanh(x)));
  CHECK_THROWS_WITH(hg::nn::Dropout(1.5), Contains("[0, 1]"));
}

TEST_CASE("Loss modules pass their reduction and ignore_index on", "[nn]") {
  const hg::Tensor logits = hg::randn({4, 3});
  const hg::Tensor target = hg::tensor(std::vector<int64_t>{0, 2, 1, 2});
  CHECK(hg::nn::CrossEntropyLoss()(logits, target).item<float>() ==
        hg::cross_entropy(logits, target).item<float>());
  CHECK(hg::nn::CrossEntropyLoss(hg::Reduction::Sum)(logits, target).item<float>() ==
        Approx(4 * hg::cross_entropy(logits, target).item<float>()));
  CHECK(hg::nn::CrossEntropyLoss(hg::Reduction::None)(logits, target).shape() == hg::Shape{4});
  const hg::Tensor ignored = hg::tensor(std::vector<int64_t>{0, -1, -1, -1});
  CHECK(hg::nn::CrossEntropyLoss(hg::Reduction::Mean, -1)(logits, ignored).item<float>() ==
        Approx(hg::cross_entropy(logits.narrow(0, 0, 1), target.narrow(0, 0, 1)).item<float>()));

  const hg::Tensor logp = hg::log_softmax(logits, 1);
  CHECK(hg::nn::NLLLoss()(logp, target).item<float>() == Approx(hg::cross_entropy(logits, target).item<float>()));

  const hg::Tensor a = hg::tensor(std::vector<float>{1, 2, 3}), b = hg::tensor(std::vector<float>{1, 0, 5});
  CHECK(hg::nn::MSELoss()(a, b).item<float>() == Approx(8.0 / 3.0));
  CHECK(hg::nn::MSELoss(hg::Reduction::Sum)(a, b).item<float>() == Approx(8.0));
}

TEST_CASE("init functions fill with the documented bounds and constants", "[nn]") {
  hg::Tensor w = hg::empty({64, 32});
  CHECK(hg::nn::init::calculate_fan_in_and_fan_out(w) == std::pair<int64_t, int64_t>{32, 64});
  CHECK(hg::nn::init::calculate_gain("relu") == Approx(std::sqrt(2.0)));
  CHECK_THROWS_WITH(hg::nn::init::calculate_gain("swish"), Contains("swish"));

  hg::nn::init::xavier_uniform_(w);
  const double bound = std::sqrt(6.0 / 96.0);
  for (double v : values(w)) REQUIRE(std::abs(v) <= bound);
  hg::nn::init::constant_(w, 0.25);
  for (double v : values(w)) REQUIRE(v == 0.25);
  hg::nn::init::kaiming_normal_(w, 0.0, hg::nn::init::FanMode::FanIn, "relu");
  double var = 0;
  for (double v : values(w)) var += v * v / static_cast<double>(w.numel());
  CHECK(var == Approx(2.0 / 32).epsilon(0.1));
}

TEST_CASE("Linear with zero in or out features, and an empty batch, as PyTorch", "[nn][empty]") {
  hg::nn::Linear none_in(0, 3);  // PyTorch: a zero bias (its init bound is 0 for fan_in 0)
  CHECK(none_in.weight.shape() == hg::Shape{3, 0});
  CHECK(hgtest::values(none_in(hg::zeros({5, 0}))) == std::vector<double>(15, 0.0));
  hg::nn::Linear none_out(3, 0);
  CHECK(none_out(hg::zeros({5, 3})).shape() == hg::Shape{5, 0});
  hg::nn::Linear l(3, 2);
  hg::Tensor x = hg::zeros({0, 3}).requires_grad_(true);
  hg::sum(l(x)).backward();
  CHECK(hgtest::values(l.weight.grad()) == std::vector<double>(6, 0.0));
  CHECK(x.grad().shape() == hg::Shape{0, 3});
}

TEST_CASE("std::cout << model prints the module repr", "[nn][print]") {
  hg::nn::Sequential seq;
  seq.emplace_back<hg::nn::Linear>(3, 4);
  seq.emplace_back<hg::nn::ReLU>();
  std::ostringstream os;
  os << seq;
  CHECK(os.str() == seq.repr());
  // a module held by shared_ptr prints the module, not the pointer (LibTorch's `std::cout << *model`)
  auto lin = std::make_shared<hg::nn::Linear>(2, 5, false);
  std::ostringstream os2;
  os2 << lin << "|" << *lin;
  CHECK(os2.str() == lin->repr() + "|" + lin->repr());
  CHECK(lin->repr() == "Linear(in_features=2, out_features=5, bias=False)");
}
