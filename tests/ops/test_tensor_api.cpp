// PyTorch habits on Tensor (issue 10): methods that forward to the free
// functions, the operators, x[i] and x.index({...}) with Slice/None/Ellipsis,
// LibTorch's dtype constants, item()/to_vector(), and printing with <<.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <sstream>

#include <halfgrad.h>

#include "test_util.h"

using namespace halfgrad;
using namespace halfgrad::indexing;
using Catch::Matchers::Contains;
using hgtest::values;

namespace {
using hgtest::iota;
using hgtest::same_storage;
template <typename F>
std::vector<double> map(const std::vector<double>& v, F f) {
  std::vector<double> out;
  for (double x : v) out.push_back(f(x));
  return out;
}
template <typename S>
std::string streamed(const S& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}
}  // namespace

TEST_CASE("math methods are the free functions, against float64 references", "[tensor_api]") {
  const Tensor x = hgtest::uniform({3, 4}, float64, 0.25, 2.0);
  const std::vector<double> xv = values(x);
  HG_CHECK_CLOSE(x.exp(), map(xv, [](double a) { return std::exp(a); }));
  HG_CHECK_CLOSE(x.log(), map(xv, [](double a) { return std::log(a); }));
  HG_CHECK_CLOSE(x.sqrt(), map(xv, [](double a) { return std::sqrt(a); }));
  HG_CHECK_CLOSE(x.neg().abs(), xv);
  HG_CHECK_CLOSE(x.neg().relu(), std::vector<double>(12, 0.0));
  HG_CHECK_CLOSE(x.sigmoid(), map(xv, [](double a) { return 1 / (1 + std::exp(-a)); }));
  HG_CHECK_CLOSE(x.tanh(), map(xv, [](double a) { return std::tanh(a); }));

  // reductions over a dim, keepdim
  std::vector<double> rsum(3, 0.0), rmax(3, -1e300), rarg(3, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      const double v = xv[static_cast<size_t>(i * 4 + j)];
      rsum[static_cast<size_t>(i)] += v;
      if (v > rmax[static_cast<size_t>(i)]) {
        rmax[static_cast<size_t>(i)] = v;
        rarg[static_cast<size_t>(i)] = j;
      }
    }
  HG_CHECK_CLOSE(x.sum(1), rsum);
  CHECK(x.sum(1, true).shape() == Shape{3, 1});
  CHECK(x.sum(-1).shape() == Shape{3});
  HG_CHECK_CLOSE(x.mean(1), map(rsum, [](double a) { return a / 4; }));
  CHECK(x.mean(0, true).shape() == Shape{1, 4});
  CHECK(values(std::get<0>(x.max(1))) == rmax);
  CHECK(values(std::get<1>(x.max(1))) == rarg);
  CHECK(std::get<0>(x.max(1, true)).shape() == Shape{3, 1});
  CHECK(values(x.argmax(1)) == rarg);
  CHECK(x.argmax(1).dtype() == int64);
  CHECK(x.max().item() == *std::max_element(xv.begin(), xv.end()));
  CHECK(x.argmax().item<int64_t>() ==
        std::distance(xv.begin(), std::max_element(xv.begin(), xv.end())));

  // softmax / log_softmax along dim 1
  std::vector<double> sm(12), lsm(12);
  for (int i = 0; i < 3; ++i) {
    double z = 0;
    for (int j = 0; j < 4; ++j) z += std::exp(xv[static_cast<size_t>(i * 4 + j)]);
    for (int j = 0; j < 4; ++j) {
      const auto k = static_cast<size_t>(i * 4 + j);
      sm[k] = std::exp(xv[k]) / z;
      lsm[k] = xv[k] - std::log(z);
    }
  }
  HG_CHECK_CLOSE(x.softmax(1), sm);
  HG_CHECK_CLOSE(x.log_softmax(-1), lsm);

  // matmul and t()
  const Tensor w = hgtest::uniform({4, 2}, float64);
  CHECK(values(x.matmul(w)) == values(matmul(x, w)));
  CHECK(x.t().shape() == Shape{4, 3});
  CHECK(values(x.t().contiguous()) == values(x.transpose(0, 1).contiguous()));
}

TEST_CASE("LibTorch dtype constants, half(), bfloat16(), to(device)", "[tensor_api]") {
  STATIC_REQUIRE(kFloat == DType::Float32);
  STATIC_REQUIRE(kDouble == DType::Float64);
  STATIC_REQUIRE(kHalf == DType::Float16);
  STATIC_REQUIRE(kBFloat16 == DType::BFloat16);
  STATIC_REQUIRE(kLong == DType::Int64);
  STATIC_REQUIRE(kBool == DType::Bool);
  const Tensor x = tensor(std::vector<float>{1.5f, -2.25f, 0.0f});
  CHECK(x.to(kDouble).dtype() == float64);
  CHECK(x.to(kHalf).dtype() == float16);
  CHECK(x.half().dtype() == float16);
  CHECK(x.bfloat16().dtype() == bfloat16);
  CHECK(x.to(kLong).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 0});
  CHECK(x.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK(values(x.half().to(kFloat)) == values(x));
  CHECK(x.to(kCPU).is_same(x));  // a DeviceType converts to Device, as in LibTorch
  CHECK(Device(kCUDA) == Device::cuda(0));
  CHECK(zeros({2}, kCPU).device() == Device::cpu());
  CHECK(ones({2}, TensorOptions(kCPU).dtype(kHalf)).dtype() == kHalf);
  // autograd flows through the casts
  Tensor l = hgtest::leaf({3});
  l.to(kFloat).to(kDouble).sum().backward();
  CHECK(values(l.grad()) == std::vector<double>{1, 1, 1});
}

TEST_CASE("item() is a double; to_vector<T>() gives logical order", "[tensor_api]") {
  CHECK(tensor(std::vector<float>{2.5f}).item() == 2.5);
  CHECK(tensor(std::vector<int64_t>{-7}).item() == -7.0);
  CHECK(tensor(std::vector<float>{2.5f}).item<float>() == 2.5f);  // item<T>() stays
  const Tensor x = iota({2, 3});
  const Tensor xt = x.t();  // non-contiguous
  CHECK(xt.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(xt.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(x.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(x.index({Slice(), Slice(None, None, 2)}).to_vector<float>() == std::vector<float>{0, 2, 3, 5});
  const auto h = x.to_vector<Half>();
  REQUIRE(h.size() == 6);
  CHECK(static_cast<float>(h[5]) == 5.0f);
  CHECK(zeros({0, 3}).to_vector<float>().empty());
  // a tensor that requires grad reads without complaint
  CHECK(hgtest::leaf_from({1, 2}, {2}).to_vector<double>() == std::vector<double>{1, 2});
}

TEST_CASE("operators against float64 references", "[tensor_api]") {
  const Tensor a = hgtest::uniform({2, 3}, float64, 0.5, 2.0);
  const Tensor b = hgtest::uniform({3}, float64, 0.5, 2.0);  // broadcasts
  const auto av = values(a), bv = values(b);
  auto ref = [&](auto f) {
    std::vector<double> r;
    for (size_t i = 0; i < 6; ++i) r.push_back(f(av[i], bv[i % 3]));
    return r;
  };
  HG_CHECK_CLOSE(a + b, ref([](double x, double y) { return x + y; }));
  HG_CHECK_CLOSE(a - b, ref([](double x, double y) { return x - y; }));
  HG_CHECK_CLOSE(a * b, ref([](double x, double y) { return x * y; }));
  HG_CHECK_CLOSE(a / b, ref([](double x, double y) { return x / y; }));
  HG_CHECK_CLOSE(a + 2.0, map(av, [](double x) { return x + 2; }));
  HG_CHECK_CLOSE(a - 2.0, map(av, [](double x) { return x - 2; }));
  HG_CHECK_CLOSE(a * 3, map(av, [](double x) { return x * 3; }));
  HG_CHECK_CLOSE(a / 4, map(av, [](double x) { return x / 4; }));
  HG_CHECK_CLOSE(2.0 + a, map(av, [](double x) { return 2 + x; }));
  HG_CHECK_CLOSE(2.0 - a, map(av, [](double x) { return 2 - x; }));
  HG_CHECK_CLOSE(3 * a, map(av, [](double x) { return 3 * x; }));
  HG_CHECK_CLOSE(1.0 / a, map(av, [](double x) { return 1 / x; }));
  HG_CHECK_CLOSE(-a, map(av, [](double x) { return -x; }));

  const Tensor c = tensor(std::vector<float>{1, 2, 3, 4});
  const Tensor d = tensor(std::vector<float>{4, 2, 1, 4});
  auto bools = [](const Tensor& t) {
    CHECK(t.dtype() == kBool);
    return t.to_vector<bool>();
  };
  using B = std::vector<bool>;
  CHECK(bools(c == d) == B{false, true, false, true});
  CHECK(bools(c != d) == B{true, false, true, false});
  CHECK(bools(c < d) == B{true, false, false, false});
  CHECK(bools(c <= d) == B{true, true, false, true});
  CHECK(bools(c > d) == B{false, false, true, false});
  CHECK(bools(c >= d) == B{false, true, true, true});
  CHECK(bools(c == 2) == B{false, true, false, false});
  CHECK(bools(c != 2) == B{true, false, true, true});
  CHECK(bools(c < 2) == B{true, false, false, false});
  CHECK(bools(c <= 2) == B{true, true, false, false});
  CHECK(bools(c > 2) == B{false, false, true, true});
  CHECK(bools(c >= 2) == B{false, true, true, true});
  CHECK(bools(2 == c) == B{false, true, false, false});
  CHECK(bools(2 != c) == B{true, false, true, true});
  CHECK(bools(2 < c) == B{false, false, true, true});
  CHECK(bools(2 <= c) == B{false, true, true, true});
  CHECK(bools(2 > c) == B{true, false, false, false});
  CHECK(bools(2 >= c) == B{true, true, false, false});
}

TEST_CASE("compound assignment is in place", "[tensor_api][inplace]") {
  Tensor y = tensor(std::vector<double>{1, 2, 3});
  const Tensor alias = y;  // a handle to the same tensor
  const auto* data = y.data_ptr();
  const uint64_t v0 = y.version();
  y += tensor(std::vector<double>{1, 1, 1});
  y -= 0.5;
  y *= 4;
  y /= tensor(std::vector<double>{2});  // broadcasts to self
  y += 1;
  y -= tensor(std::vector<double>{1, 0, 0});
  y *= tensor(std::vector<double>{1, 1, 2});
  y /= 2.0;
  // ((x + 1 - 0.5) * 4 / 2 + 1 - [1,0,0]) * [1,1,2] / 2
  CHECK(values(y) == std::vector<double>{1.5, 3, 8});
  CHECK(values(alias) == values(y));
  CHECK(y.data_ptr() == data);
  CHECK(y.version() == v0 + 8);
  // sub_ with alpha and div_, as methods
  Tensor z = tensor(std::vector<double>{10, 20});
  z.sub_(tensor(std::vector<double>{1, 2}), 3.0).div_(7.0);
  CHECK(values(z) == std::vector<double>{1, 2});
  // another dtype is cast to self's (float32 += float64)
  Tensor f = tensor(std::vector<float>{1, 2});
  f += tensor(std::vector<double>{0.5, 0.5});
  CHECK(f.dtype() == float32);
  CHECK(values(f) == std::vector<double>{1.5, 2.5});
  // in place on a leaf that requires grad is fine under no_grad (an optimizer step)
  Tensor w = hgtest::leaf_from({1, 2}, {2});
  {
    autograd::NoGradGuard ng;
    w -= 1.0;
  }
  CHECK(values(w) == std::vector<double>{0, 1});
  CHECK(w.requires_grad());
}

TEST_CASE("compound assignment errors are PyTorch's", "[tensor_api][inplace][errors]") {
  hgtest::expect_errors({
      {"+= on a leaf that requires grad",
       [] {
         Tensor w = hgtest::leaf({2});
         w += 1.0;
       },
       {"add_", "requires grad"}},
      {"-= on a leaf that requires grad",
       [] {
         Tensor w = hgtest::leaf({2});
         w -= w.detach();
       },
       {"sub_", "requires grad"}},
      {"/= on a leaf that requires grad",
       [] {
         Tensor w = hgtest::leaf({2});
         w /= 2.0;
       },
       {"div_", "requires grad"}},
      {"/= on an int64 tensor",
       [] {
         Tensor i = arange(4);
         i /= 2.0;
       },
       {"div_", "int64", "to(kFloat)"}},
      {"+= that would broadcast self",
       [] {
         Tensor s = zeros({3});
         s += zeros({2, 3});
       },
       {"add_", "[2, 3]"}},
  });
}

TEST_CASE("gradients flow through methods and operators", "[tensor_api][autograd]") {
  const Tensor x = hgtest::leaf_away({3, 4});
  const Tensor y = hgtest::leaf_away({4});
  autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor &a = in[0], &b = in[1];
        const Tensor h = (a.exp() * b - a / 2.0 + 1.0 - b) / (b + 3.0) - 0.5 * a.tanh() + (2.0 / (a.abs() + 1.0));
        return (h.sigmoid() + (a.abs() + 0.5).sqrt().log() - a.t().t() * 2.0 - (-b)).softmax(1).log_softmax(0).sum(1);
      },
      {x, y});
  autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].matmul(in[1].unsqueeze(1)).squeeze(1).mean(0, true) + std::get<0>(in[0].max(1)).sum();
      },
      {hgtest::leaf_distinct({3, 4}), y});
}

TEST_CASE("x[i] selects along dim 0 as a view", "[tensor_api][index]") {
  const Tensor x = iota({3, 4});
  const Tensor r = x[1];
  CHECK(r.shape() == Shape{4});
  CHECK(same_storage(r, x));
  CHECK(values(r) == std::vector<double>{4, 5, 6, 7});
  CHECK(values(x[-1]) == std::vector<double>{8, 9, 10, 11});
  CHECK(x[2][3].item() == 11.0);
  CHECK(x[0].dim() == 1);
  CHECK(x[0][0].dim() == 0);
  // it is the select view: writes through it show in x
  Tensor row = x[0];
  row.fill_(-1);
  CHECK(x[0][2].item() == -1.0);

  Tensor l = hgtest::leaf({3, 2});
  (l[1] * 3.0).sum().backward();
  CHECK(values(l.grad()) == std::vector<double>{0, 0, 3, 3, 0, 0});
}

TEST_CASE("index() with Slice, None, Ellipsis and integers", "[tensor_api][index]") {
  const Tensor x = iota({2, 3, 4});
  auto at = [](const Shape& shape, const std::vector<int64_t>& idx) {  // flat index of x
    return static_cast<double>((idx[0] * shape[1] + idx[1]) * shape[2] + idx[2]);
  };
  SECTION("integers and full slices") {
    CHECK(x.index({1}).shape() == Shape{3, 4});
    CHECK(x.index({1, 2, 3}).item() == 23.0);
    CHECK(x.index({-1, -1, -1}).item() == 23.0);
    CHECK(x.index({Slice(), 1}).shape() == Shape{2, 4});
    CHECK(values(x.index({Slice(), 1, 0})) == std::vector<double>{4, 16});
    CHECK(x.index({}).is_same(x));
  }
  SECTION("Slice bounds as in Python") {
    CHECK(values(x.index({0, 0, Slice(1, 3)})) == std::vector<double>{1, 2});
    CHECK(values(x.index({0, 0, Slice(-2, None)})) == std::vector<double>{2, 3});
    CHECK(values(x.index({0, 0, Slice(None, -3)})) == std::vector<double>{0});
    CHECK(values(x.index({0, 0, Slice(1, 100)})) == std::vector<double>{1, 2, 3});  // clamps
    CHECK(values(x.index({0, 0, Slice(-100, 1)})) == std::vector<double>{0});
    CHECK(x.index({0, 0, Slice(3, 1)}).shape() == Shape{0});  // empty
    CHECK(x.index({0, 0, Slice(4, None)}).shape() == Shape{0});
    CHECK(x.index({Slice(1, 2)}).shape() == Shape{1, 3, 4});
  }
  SECTION("step > 1 is a strided view") {
    const Tensor s = x.index({Ellipsis, Slice(None, None, 2)});
    CHECK(s.shape() == Shape{2, 3, 2});
    CHECK(s.strides() == Shape{12, 4, 2});
    CHECK(same_storage(s, x));
    std::vector<double> ref;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; k += 2) ref.push_back(at({2, 3, 4}, {i, j, k}));
    CHECK(values(s) == ref);
    CHECK(values(x.index({0, 0, Slice(1, None, 2)})) == std::vector<double>{1, 3});
    CHECK(values(x.index({0, 0, Slice(None, None, 3)})) == std::vector<double>{0, 3});
    CHECK(values(x.index({0, 0, Slice(1, None, 5)})) == std::vector<double>{1});
    CHECK(values(x.index({0, Slice(None, None, 2), Slice(None, None, 3)})) == std::vector<double>{0, 3, 8, 11});
    CHECK(x.index({0, 0, Slice(3, 1, 2)}).shape() == Shape{0});
    CHECK(values(x.slice(2, 0, 4, 2).contiguous()) == values(s.contiguous()));
  }
  SECTION("None and Ellipsis") {
    CHECK(x.index({None}).shape() == Shape{1, 2, 3, 4});
    CHECK(x.index({Slice(), None}).shape() == Shape{2, 1, 3, 4});
    CHECK(x.index({Ellipsis, None}).shape() == Shape{2, 3, 4, 1});
    CHECK(x.index({"...", 0}).shape() == Shape{2, 3});
    CHECK(values(x.index({Ellipsis, 0})) == std::vector<double>{0, 4, 8, 12, 16, 20});
    CHECK(x.index({None, 0, "...", -1}).shape() == Shape{1, 3});
    CHECK(values(x.index({None, 0, "...", -1})) == std::vector<double>{3, 7, 11});
    CHECK(x.index({1, Ellipsis, 2, 3}).item() == 23.0);
    CHECK(x.index({0, 0, 0, Ellipsis}).dim() == 0);
    CHECK(same_storage(x.index({None, 0, "...", Slice(None, None, 2)}), x));
  }
  SECTION("gradients flow through index views") {
    autograd::gradcheck(
        [](const std::vector<Tensor>& in) {
          return in[0].index({Slice(None, None, 2), None, Ellipsis, Slice(1, None, 2)}) * 3.0 +
                 in[0].index({Slice(1, None), None, Slice(), Slice(None, 2)});
        },
        {hgtest::leaf({3, 2, 4})});
    Tensor l = hgtest::leaf({5});
    l.index({Slice(1, None, 3)}).sum().backward();
    CHECK(values(l.grad()) == std::vector<double>{0, 1, 0, 0, 1});
  }
}

TEST_CASE("bad indices are Errors naming the op", "[tensor_api][index][errors]") {
  hgtest::expect_errors({
      {"x[i] out of range", [] { (void)iota({3, 4})[3]; }, {"operator[]", "index 3", "size 3", "float32[3, 4]"}},
      {"x[-i] out of range", [] { (void)iota({3, 4})[-4]; }, {"operator[]", "index -4", "-3 to 2"}},
      {"x[i] of a 0-d tensor", [] { (void)iota({3})[0][0]; }, {"operator[]", "0-d", "item()"}},
      {"index out of range", [] { (void)iota({2, 3}).index({0, 3}); }, {"index", "index 3", "dimension 1", "float32[2, 3]"}},
      {"too many indices", [] { (void)iota({2, 3}).index({0, 0, 0}); }, {"index", "too many indices", "has 2"}},
      {"two ellipses", [] { (void)iota({2, 3}).index({Ellipsis, "..."}); }, {"index", "single ellipsis"}},
      {"zero step", [] { (void)iota({4}).index({Slice(0, 4, 0)}); }, {"index", "step must be positive", "got 0"}},
      {"negative step", [] { (void)iota({4}).index({Slice(None, None, -1)}); }, {"index", "step", "-1"}},
      {"a string other than ...", [] { (void)iota({4}).index({".."}); }, {"index", "\"...\"", "Slice"}},
      {"slice of a 0-d tensor", [] { (void)iota({}).slice(0, 0, 1, 2); }, {"slice", "0-d"}},
  });
}

TEST_CASE("operator<< prints what fmt prints", "[tensor_api][print]") {
  const Tensor x = iota({2, 3});
  CHECK(streamed(x) == fmt::format("{}", x));
  CHECK(streamed(x.t()) == fmt::format("{}", x.t()));
  CHECK(streamed(x.to(kHalf)) == fmt::format("{}", x.to(kHalf)));
  const Tensor g = hgtest::leaf({2}) * 2.0;  // with a grad_fn
  CHECK(streamed(g) == fmt::format("{}", g));
  CHECK(streamed(kBFloat16) == "bfloat16");
  CHECK(streamed(DType::Bool) == "bool");
  CHECK(streamed(Device::cpu()) == "cpu");
  CHECK(streamed(Device::cuda(1)) == Device::cuda(1).str());
  CHECK(streamed(x.shape()) == "[2, 3]");
  CHECK(streamed(Shape{}) == shape_str(Shape{}));
  std::ostringstream os;
  os << "x = " << x << " on " << x.device() << " as " << x.dtype();
  CHECK(os.str() == "x = " + fmt::format("{}", x) + " on cpu as float32");
}
