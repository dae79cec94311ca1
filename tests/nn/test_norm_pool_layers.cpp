// BatchNorm1d/BatchNorm2d and the pooling layers: registration (names, order,
// initial values, dtypes), PyTorch's reprs, training and eval forwards against
// float64 references, the running statistics and num_batches_tracked over
// several steps (momentum and momentum=None), to(dtype), state dicts, errors.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
namespace nn = halfgrad::nn;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

// Per-channel batch mean and biased variance of x [N, C, *] (logical order).
void channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const auto v = values(x);
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  mean.assign(static_cast<size_t>(c), 0.0);
  var.assign(static_cast<size_t>(c), 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += v[static_cast<size_t>((i * c + ch) * s + j)];
    const double m = sum / static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const double d = v[static_cast<size_t>((i * c + ch) * s + j)] - m;
        sq += d * d;
      }
    mean[static_cast<size_t>(ch)] = m;
    var[static_cast<size_t>(ch)] = sq / static_cast<double>(n * s);
  }
}

std::vector<double> normalised(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                               double eps) {
  const auto v = values(x);
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = static_cast<size_t>((i * c + ch) * s + j), k = static_cast<size_t>(ch);
        out[e] = (v[e] - mean[k]) / std::sqrt(var[k] + eps);
      }
  return out;
}

}  // namespace

TEST_CASE("BatchNorm2d registers PyTorch's parameters and buffers", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(16);
  CHECK(names(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names(bn.named_buffers()) == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.state_dict().keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  HG_CHECK_EXACT(bn.weight, std::vector<double>(16, 1.0));
  HG_CHECK_EXACT(bn.bias, std::vector<double>(16, 0.0));
  HG_CHECK_EXACT(bn.running_mean, std::vector<double>(16, 0.0));
  HG_CHECK_EXACT(bn.running_var, std::vector<double>(16, 1.0));
  CHECK(bn.weight.requires_grad());
  CHECK(!bn.running_mean.requires_grad());
  CHECK(bn.weight.dtype() == DType::Float32);
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);

  nn::BatchNorm1d plain(8, 1e-3, std::nullopt, false, false);
  CHECK(plain.named_parameters().empty());
  CHECK(plain.named_buffers().empty());
  nn::BatchNorm1d no_stats(8, 1e-5, 0.1, true, false);
  CHECK(names(no_stats.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(no_stats.named_buffers().empty());
}

TEST_CASE("batch norm and pooling layers print as PyTorch's", "[nn][batch_norm][pool]") {
  // print(nn.BatchNorm2d(16)), print(nn.MaxPool2d(3, 2, 1)), ... in PyTorch 1.13
  CHECK(nn::BatchNorm2d(16).repr() == "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  CHECK(nn::BatchNorm1d(8, 1e-3, std::nullopt, false, false).repr() ==
        "BatchNorm1d(8, eps=0.001, momentum=None, affine=False, track_running_stats=False)");
  CHECK(nn::MaxPool2d(3, 2, 1).repr() == "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)");
  CHECK(nn::MaxPool2d({2, 3}).repr() ==
        "MaxPool2d(kernel_size=(2, 3), stride=(2, 3), padding=0, dilation=1, ceil_mode=False)");
  CHECK(nn::AvgPool2d(3).repr() == "AvgPool2d(kernel_size=3, stride=3, padding=0)");
  CHECK(nn::AvgPool2d(3, 2, 1, true, false, 4).repr() == "AvgPool2d(kernel_size=3, stride=2, padding=1)");
  CHECK(nn::AdaptiveAvgPool2d(1).repr() == "AdaptiveAvgPool2d(output_size=1)");
  CHECK(nn::AdaptiveAvgPool2d({2, 3}).repr() == "AdaptiveAvgPool2d(output_size=(2, 3))");
}

TEST_CASE("BatchNorm2d trains with batch statistics and evaluates with the running ones", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3, 1e-4, 0.25);
  {
    hg::NoGradGuard guard;
    bn.weight.copy_(hg::tensor({0.5, 1.5, 2.0}));
    bn.bias.copy_(hg::tensor({0.1, -0.2, 0.3}));
  }
  const std::vector<double> w = {0.5, 1.5, 2.0}, b = {0.1, -0.2, 0.3};
  std::vector<double> rm(3, 0.0), rv(3, 1.0);
  for (int step = 1; step <= 3; ++step) {
    INFO("step " << step);
    const Tensor x = hgtest::uniform({4, 3, 3, 2}, DType::Float32, -1.0 + step, 2.0 + 2 * step);
    std::vector<double> mean, var;
    channel_stats(x, mean, var);
    auto ref = normalised(x, mean, var, 1e-4);
    for (size_t e = 0; e < ref.size(); ++e) {
      const size_t k = (e / 6) % 3;
      ref[e] = ref[e] * w[k] + b[k];
    }
    const Tensor y = bn(x);
    HG_CHECK_CLOSE(y, ref);
    for (size_t k = 0; k < 3; ++k) {
      rm[k] = 0.75 * rm[k] + 0.25 * mean[k];
      rv[k] = 0.75 * rv[k] + 0.25 * var[k] * 24.0 / 23.0;
    }
    HG_CHECK_CLOSE(bn.running_mean, rm);
    HG_CHECK_CLOSE(bn.running_var, rv);
    CHECK(bn.num_batches_tracked.item<int64_t>() == step);
  }
  bn.eval();
  const Tensor x = hgtest::uniform({2, 3, 4, 4}, DType::Float32);
  auto ref = normalised(x, rm, rv, 1e-4);
  for (size_t e = 0; e < ref.size(); ++e) {
    const size_t k = (e / 16) % 3;
    ref[e] = ref[e] * w[k] + b[k];
  }
  HG_CHECK_CLOSE(bn(x), ref);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);  // eval does not count
  HG_CHECK_CLOSE(bn.running_mean, rm);

  // the gradient reaches the parameters
  bn.train();
  hg::sum(hg::mul(bn(x), bn(x))).backward();
  REQUIRE(bn.weight.grad().defined());
  REQUIRE(bn.bias.grad().defined());
  CHECK(!bn.running_mean.grad().defined());
}

TEST_CASE("BatchNorm1d takes [N, C] and [N, C, L]; momentum=None averages the batches", "[nn][batch_norm]") {
  nn::BatchNorm1d bn(4, 1e-5, std::nullopt);
  std::vector<double> sum_mean(4, 0.0), sum_var(4, 0.0);
  const std::vector<Tensor> batches = {hgtest::uniform({6, 4}, DType::Float32, -1, 3),
                                       hgtest::uniform({3, 4, 5}, DType::Float32, 0, 5),
                                       hgtest::uniform({5, 4}, DType::Float32, -4, 1)};
  for (const Tensor& x : batches) {
    std::vector<double> mean, var;
    channel_stats(x, mean, var);
    HG_CHECK_CLOSE(bn(x), normalised(x, mean, var, 1e-5));
    const double n = static_cast<double>(x.numel() / 4);
    for (size_t k = 0; k < 4; ++k) {
      sum_mean[k] += mean[k];
      sum_var[k] += var[k] * n / (n - 1);
    }
  }
  // cumulative: running = the average of the three batch statistics
  for (size_t k = 0; k < 4; ++k) {
    sum_mean[k] /= 3;
    sum_var[k] /= 3;
  }
  HG_CHECK_CLOSE(bn.running_mean, sum_mean);
  HG_CHECK_CLOSE(bn.running_var, sum_var);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
}

TEST_CASE("BatchNorm without running statistics normalises with the batch's in eval too", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(2, 1e-5, 0.1, false, false);
  bn.eval();
  const Tensor x = hgtest::uniform({3, 2, 2, 2}, DType::Float32, 1.0, 4.0);
  std::vector<double> mean, var;
  channel_stats(x, mean, var);
  HG_CHECK_CLOSE(bn(x), normalised(x, mean, var, 1e-5));
}

TEST_CASE("BatchNorm's to(dtype) keeps num_batches_tracked int64; its state dict round-trips", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3);
  bn(hgtest::uniform({2, 3, 2, 2}, DType::Float32));
  bn.to(DType::Float64);
  CHECK(bn.weight.dtype() == DType::Float64);
  CHECK(bn.running_var.dtype() == DType::Float64);
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  // still trains in float64
  bn(hgtest::uniform({2, 3, 2, 2}, DType::Float64));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  // a bfloat16 model: bfloat16 parameters and statistics for a bfloat16 input
  nn::BatchNorm2d half(3);
  half.to(DType::BFloat16);
  CHECK(half(hgtest::uniform({2, 3, 2, 2}, DType::BFloat16)).dtype() == DType::BFloat16);
  CHECK(half.running_mean.dtype() == DType::BFloat16);

  nn::BatchNorm2d copy(3);
  copy.to(DType::Float64);
  copy.load_state_dict(bn.state_dict());
  HG_CHECK_EXACT(copy.running_mean, values(bn.running_mean));
  HG_CHECK_EXACT(copy.running_var, values(bn.running_var));
  CHECK(copy.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("batch norm layers reject inputs of the wrong rank, naming the layer", "[nn][batch_norm][errors]") {
  hgtest::expect_errors({
      {"BatchNorm2d of a 3-d input", [] { nn::BatchNorm2d(3)(hg::ones({2, 3, 4})); },
       {"BatchNorm2d", "expected 4D input (got 3D input"}},
      {"BatchNorm1d of a 4-d input", [] { nn::BatchNorm1d(3)(hg::ones({2, 3, 4, 4})); },
       {"BatchNorm1d", "expected 2D or 3D input (got 4D input"}},
      {"BatchNorm1d of a 1-d input", [] { nn::BatchNorm1d(3)(hg::ones({3})); }, {"expected 2D or 3D input (got 1D"}},
      {"the wrong channel count", [] { nn::BatchNorm2d(3)(hg::ones({2, 4, 2, 2})); },
       {"batch_norm", "should contain 4 elements"}},
      {"a single value per channel", [] { nn::BatchNorm1d(3)(hg::ones({1, 3})); },
       {"Expected more than 1 value per channel when training"}},
      {"no features", [] { nn::BatchNorm2d bn(0); }, {"BatchNorm", "num_features"}},
  });
}

TEST_CASE("pooling layers run their functional forms", "[nn][pool]") {
  const Tensor x = hgtest::uniform({2, 3, 7, 6}, DType::Float32);
  nn::MaxPool2d mp(3, 2, 1, 1, true);
  HG_CHECK_EXACT(mp(x), values(hg::max_pool2d(x, 3, 2, 1, 1, true)));
  CHECK(mp(x).shape() == Shape{2, 3, 4, 4});
  nn::AvgPool2d ap(3, 2, 1, true, false, 5);
  HG_CHECK_EXACT(ap(x), values(hg::avg_pool2d(x, 3, 2, 1, true, false, 5)));
  nn::AvgPool2d ap_default({2, 3});
  CHECK(ap_default(x).shape() == Shape{2, 3, 3, 2});
  nn::AdaptiveAvgPool2d gap(1);
  const Tensor g = gap(x);
  CHECK(g.shape() == Shape{2, 3, 1, 1});
  HG_CHECK_CLOSE(g, values(hg::mean(x, {2, 3}, true)));
  CHECK(mp.named_parameters().empty());
}
