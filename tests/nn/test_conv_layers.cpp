// nn::Conv1d..Conv3d and nn::ConvTranspose1d..3d: parameter shapes and names,
// PyTorch's init bounds, repr, forward equal to the functional op, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "test_util.h"

namespace hg = halfgrad;
namespace F = halfgrad::nn::functional;
using hg::Shape;
using hg::Tensor;

namespace {
std::vector<double> values(const Tensor& t) { return hgtest::values(t.detach()); }

// Every value inside [-bound, bound], and spread over most of it (not all at 0).
void check_bound(const Tensor& t, double bound) {
  const auto v = values(t);
  REQUIRE(!v.empty());
  double lo = 1e9, hi = -1e9;
  for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x);
  INFO(t.describe() << " in [" << lo << ", " << hi << "], bound " << bound);
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi - lo > bound);  // hundreds of draws cover more than half of the range
}
}  // namespace

TEST_CASE("Conv layers: parameter shapes, names, PyTorch's init bounds", "[nn][conv]") {
  hg::manual_seed(0);
  hg::nn::Conv2d c(6, 32, {3, 2}, 1, 0, 1, /*groups=*/2);
  CHECK(c.weight.shape() == Shape{32, 3, 3, 2});
  CHECK(c.bias.shape() == Shape{32});
  const auto named = c.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(c.weight.requires_grad());
  CHECK(c.weight.dtype() == hg::DType::Float32);
  // fan_in = weight.size(1) * prod(kernel_size) = 3 * 6; kaiming_uniform_(a = sqrt(5))
  // gives bound sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(fan_in), the bias the same
  check_bound(c.weight, 1.0 / std::sqrt(18.0));
  check_bound(c.bias, 1.0 / std::sqrt(18.0));

  hg::nn::Conv1d c1(4, 8, 5, 1, 0, 1, 1, /*bias=*/false);
  CHECK(c1.weight.shape() == Shape{8, 4, 5});
  CHECK_FALSE(c1.bias.defined());
  CHECK(c1.named_parameters().size() == 1);
  hg::nn::Conv3d c3(2, 4, {1, 2, 3});
  CHECK(c3.weight.shape() == Shape{4, 2, 1, 2, 3});

  // transposed: weight [in, out / groups, *k], fan_in = weight.size(1) * prod(k)
  hg::nn::ConvTranspose2d t(8, 12, 3, 2, 1, 1, /*groups=*/4);
  CHECK(t.weight.shape() == Shape{8, 3, 3, 3});
  CHECK(t.bias.shape() == Shape{12});
  check_bound(t.weight, 1.0 / std::sqrt(27.0));
  check_bound(t.bias, 1.0 / std::sqrt(27.0));
  hg::nn::ConvTranspose1d t1(3, 5, 4);
  CHECK(t1.weight.shape() == Shape{3, 5, 4});
  hg::nn::ConvTranspose3d t3(2, 2, 2, 1, 0, 0, 1, false);
  CHECK(t3.weight.shape() == Shape{2, 2, 2, 2, 2});

  // reset_parameters draws again
  const auto before = values(c.weight);
  c.reset_parameters();
  CHECK(values(c.weight) != before);
}

TEST_CASE("Conv layers print as PyTorch", "[nn][conv]") {
  CHECK(hg::nn::Conv2d(3, 16, 3, 2, 1, 1, 1, false).repr() ==
        "Conv2d(3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)");
  CHECK(hg::nn::Conv2d(16, 16, 5, 1, 2, 1, 16).repr() ==
        "Conv2d(16, 16, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2), groups=16)");
  CHECK(hg::nn::Conv1d(4, 8, 3).repr() == "Conv1d(4, 8, kernel_size=(3,), stride=(1,))");
  CHECK(hg::nn::Conv1d(4, 8, 3, 1, "same", 2).repr() ==
        "Conv1d(4, 8, kernel_size=(3,), stride=(1,), padding=same, dilation=(2,))");
  CHECK(hg::nn::Conv3d(2, 4, {1, 2, 3}, {1, 1, 2}).repr() ==
        "Conv3d(2, 4, kernel_size=(1, 2, 3), stride=(1, 1, 2))");
  CHECK(hg::nn::ConvTranspose2d(8, 4, 3, 2, 1, 1).repr() ==
        "ConvTranspose2d(8, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1))");
  CHECK(hg::nn::ConvTranspose1d(4, 4, 2, 1, 0, 0, 2, false, 2).repr() ==
        "ConvTranspose1d(4, 4, kernel_size=(2,), stride=(1,), dilation=(2,), groups=2, bias=False)");
}

TEST_CASE("Conv layers' forward is the functional op", "[nn][conv]") {
  hg::manual_seed(1);
  const Tensor x2 = hgtest::uniform({2, 4, 9, 8}, hg::DType::Float32);
  hg::nn::Conv2d c(4, 6, {3, 2}, {2, 1}, {1, 0}, {1, 2}, 2);
  HG_CHECK_EXACT(c(x2), values(F::conv2d(x2, c.weight, c.bias, {2, 1}, {1, 0}, {1, 2}, 2)));
  hg::nn::Conv2d same(4, 4, 4, 1, "same", 1, 4, false);
  const Tensor ys = same(x2);
  CHECK(ys.shape() == x2.shape());
  HG_CHECK_EXACT(ys, values(hg::conv2d(x2, same.weight, {}, 1, "same", 1, 4)));
  const Tensor x1 = hgtest::uniform({2, 3, 10}, hg::DType::Float32);
  hg::nn::Conv1d c1(3, 5, 3, 2, 1);
  HG_CHECK_EXACT(c1(x1), values(hg::conv1d(x1, c1.weight, c1.bias, 2, 1)));
  const Tensor x3 = hgtest::uniform({1, 2, 4, 5, 6}, hg::DType::Float32);
  hg::nn::Conv3d c3(2, 3, 2, 1, "valid");
  HG_CHECK_EXACT(c3(x3), values(hg::conv3d(x3, c3.weight, c3.bias)));
  hg::nn::ConvTranspose2d t(4, 6, 3, 2, 1, 1, 2);
  const Tensor yt = t(x2);
  CHECK(yt.shape() == Shape{2, 6, 18, 16});
  HG_CHECK_EXACT(yt, values(F::conv_transpose2d(x2, t.weight, t.bias, 2, 1, 1, 2)));
  hg::nn::ConvTranspose1d t1(3, 2, 2, 1, 0, 1, 1, true, 2);
  HG_CHECK_EXACT(t1(x1), values(hg::conv_transpose1d(x1, t1.weight, t1.bias, 1, 0, 1, 1, 2)));
  hg::nn::ConvTranspose3d t3(2, 2, 2, 2);
  HG_CHECK_EXACT(t3(x3), values(hg::conv_transpose3d(x3, t3.weight, t3.bias, 2)));

  // the parameters get gradients
  hg::sum(c(x2)).backward();
  REQUIRE(c.weight.grad().defined());
  REQUIRE(c.bias.grad().defined());
  CHECK(c.weight.grad().shape() == c.weight.shape());
}

TEST_CASE("Conv layer errors", "[nn][conv][errors]") {
  hgtest::expect_errors({
      {"in_channels and groups", [] { hg::nn::Conv2d(3, 6, 3, 1, 0, 1, 2); },
       {"Conv2d", "in_channels (3) must be divisible by groups (2)"}},
      {"out_channels and groups", [] { hg::nn::Conv1d(4, 3, 3, 1, 0, 1, 2); },
       {"Conv1d", "out_channels (3) must be divisible by groups (2)"}},
      {"groups 0", [] { hg::nn::Conv2d(4, 4, 3, 1, 0, 1, 0); }, {"Conv2d", "groups must be a positive integer"}},
      {"padding_mode", [] { hg::nn::Conv2d(4, 4, 3, 1, 1, 1, 1, true, "reflect"); },
       {"Conv2d", "padding_mode 'reflect' is not supported yet"}},
      {"same with stride", [] { hg::nn::Conv2d(4, 4, 3, 2, "same"); },
       {"Conv2d", "padding='same' is not supported for strided convolutions"}},
      {"kernel_size count", [] { hg::nn::Conv3d(4, 4, {3, 3}); }, {"Conv3d", "kernel_size must be one number or 3"}},
      {"kernel_size 0", [] { hg::nn::Conv2d(4, 4, 0); }, {"Conv2d", "kernel_size must be positive"}},
      {"output_padding", [] { hg::nn::ConvTranspose2d(4, 4, 3, 2, 0, 2); },
       {"ConvTranspose2d", "output padding must be smaller than either stride or dilation"}},
      {"wrong input channels", [] { hg::nn::Conv2d(4, 4, 3)(hg::ones({1, 3, 5, 5})); }, {"conv2d", "channels"}},
  });
}
