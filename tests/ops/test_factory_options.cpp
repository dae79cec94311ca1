// Factories a PyTorch user reaches for: LibTorch's option spellings
// (dtype(..).device(..)), braced lists, 16-bit host data, from_blob over
// memory the caller owns (no copy, deleter on the last handle).
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;

TEST_CASE("LibTorch option spellings give the dtype, device and requires_grad asked for", "[ops][factory]") {
  const Tensor a = hg::randn({2, 3}, hg::dtype(hg::kBFloat16).device(hg::kCPU));
  CHECK(a.dtype() == hg::kBFloat16);
  CHECK(a.device().is_cpu());
  CHECK(a.shape() == hg::Shape{2, 3});
  const Tensor b = hg::zeros({4}, hg::dtype(hg::kFloat64).requires_grad(true));
  CHECK(b.dtype() == hg::kFloat64);
  CHECK(b.requires_grad());
  const Tensor c = hg::ones({2}, hg::requires_grad());
  CHECK(c.dtype() == hg::kFloat);
  CHECK(c.requires_grad());
  const Tensor d = hg::full({3}, 7.0, hg::device(hg::kCPU).dtype(hg::kLong));
  CHECK(d.dtype() == hg::kLong);
  CHECK(d.to_vector<int64_t>() == std::vector<int64_t>{7, 7, 7});
}

TEST_CASE("braced lists: floating literals give float32, integers int64, booleans bool", "[ops][factory]") {
  const Tensor f = hg::tensor({1.5, -2.25, 3.0});
  CHECK(f.dtype() == hg::kFloat);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f});
  const Tensor i = hg::tensor({4, -5, 6, 7}, {2, 2});
  CHECK(i.dtype() == hg::kLong);
  CHECK(i.shape() == hg::Shape{2, 2});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{4, -5, 6, 7});
  const Tensor b = hg::tensor({true, false, true});
  CHECK(b.dtype() == hg::kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, true});
  const Tensor h = hg::tensor({0.1, 0.2}, {}, hg::kHalf);
  CHECK(h.dtype() == hg::kHalf);
  CHECK(h.to_vector<hg::Half>()[0].bits == hg::Half(0.1f).bits);
  const Tensor v = hg::tensor(std::vector<bool>{false, true, true, false}, {2, 2});
  CHECK(v.to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK_THROWS_WITH(hg::tensor({1.0, 2.0, 3.0}, {2, 2}), Catch::Contains("3 values do not fill shape [2, 2]"));
}

TEST_CASE("16-bit host data keeps its bits: tensor(vector<Half/BFloat16>) and from_blob", "[ops][factory]") {
  // Bit patterns no float literal round-trips by accident: subnormal, -0, inf, NaN, max.
  const std::vector<uint16_t> half_bits = {0x0001, 0x8000, 0x7c00, 0x7e01, 0x7bff, 0x3c00};
  std::vector<hg::Half> hv;
  for (uint16_t b : half_bits) hv.push_back(hg::Half::from_bits(b));
  const Tensor h = hg::tensor(hv, {2, 3});
  CHECK(h.dtype() == hg::kHalf);
  CHECK(hgtest::bits16(h) == half_bits);
  CHECK(std::isnan(h.to(hg::kFloat).to_vector<float>()[3]));

  std::vector<uint16_t> bf_bits = {0x0001, 0x8000, 0x7f80, 0x7fc1, 0x7f7f, 0x3f80};
  const Tensor blob = hg::from_blob(bf_bits.data(), {3, 2}, hg::dtype(hg::kBFloat16));
  CHECK(blob.dtype() == hg::kBFloat16);
  CHECK(hgtest::bits16(blob) == bf_bits);
  const std::vector<float> as_float = blob.to(hg::kFloat).to_vector<float>();
  CHECK(as_float[5] == 1.0f);
  CHECK(as_float[2] == std::numeric_limits<float>::infinity());
  std::vector<hg::BFloat16> bv;
  for (uint16_t b : bf_bits) bv.push_back(hg::BFloat16::from_bits(b));
  CHECK(hgtest::bits16(hg::tensor(bv)) == bf_bits);
}

TEST_CASE("from_blob shares the caller's memory and calls the deleter once, at the last handle", "[ops][factory]") {
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  Tensor t = hg::from_blob(data.data(), {2, 3});
  CHECK(t.dtype() == hg::kFloat);
  CHECK(t.data_ptr() == data.data());
  data[4] = 50;  // no copy: the tensor sees the caller's writes
  CHECK(t[1][1].item() == 50.0);
  t.mul_(2.0);  // and the caller sees the tensor's
  CHECK(data[0] == 2.0f);
  CHECK(data[4] == 100.0f);

  // Strided: every second element of a row of 6.
  std::vector<double> row = {0, 1, 2, 3, 4, 5};
  const Tensor s = hg::from_blob(row.data(), {3}, {2}, hg::kDouble);
  CHECK(s.to_vector<double>() == std::vector<double>{0, 2, 4});

  int calls = 0;
  {
    auto* raw = new int64_t[4]{9, 8, 7, 6};
    Tensor owned = hg::from_blob(
        raw, {4}, [&calls](void* p) { ++calls; delete[] static_cast<int64_t*>(p); }, hg::kLong);
    Tensor view = owned.narrow(0, 1, 2);
    owned = Tensor();
    CHECK(calls == 0);  // the view still holds the memory
    CHECK(view.to_vector<int64_t>() == std::vector<int64_t>{8, 7});
  }
  CHECK(calls == 1);
}

TEST_CASE("from_blob rejects what it cannot wrap safely", "[ops][factory]") {
  alignas(8) unsigned char bytes[16] = {};
  hgtest::expect_errors({
      {"null data", [] { hg::from_blob(nullptr, {2}); }, {"data is null"}},
      {"misaligned", [&] { hg::from_blob(bytes + 1, {2}); }, {"not aligned for float32"}},
      {"requires_grad", [&] { hg::from_blob(bytes, {2}, hg::requires_grad()); }, {"requires_grad"}},
      {"rank", [&] { hg::from_blob(bytes, {2}, hg::Shape{1, 1}); }, {"differ in rank"}},
      {"negative stride", [&] { hg::from_blob(bytes, {2}, hg::Shape{-1}); }, {"negative stride"}},
  });
  // An empty tensor needs no memory.
  CHECK(hg::from_blob(nullptr, {0, 3}).numel() == 0);
}

TEST_CASE("CUDA: options place factories on the device; from_blob wraps device memory", "[cuda][factory]") {
  const Tensor a = hg::randn({2, 3}, hg::dtype(hg::kHalf).device(hg::kCUDA));
  CHECK(a.device().is_cuda());
  CHECK(a.dtype() == hg::kHalf);
  const Tensor owner = hg::arange(6, hg::device(hg::kCUDA).dtype(hg::kFloat));
  const Tensor wrapped = hg::from_blob(owner.data_ptr(), {2, 3}, hg::device(hg::kCUDA));
  CHECK(wrapped.device().is_cuda());
  CHECK(wrapped.data_ptr() == owner.data_ptr());
  CHECK(wrapped.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  const Tensor h = hg::tensor({0.5, 1.5}, {}, hg::dtype(hg::kBFloat16).device(hg::kCUDA));
  CHECK(h.cpu().to_vector<float>() == std::vector<float>{0.5f, 1.5f});
}

TEST_CASE("full: a value outside int64's range is an overflow error, as in PyTorch", "[ops][factory]") {
  hgtest::expect_errors({
      {"1e30 as int64", [] { (void)hg::full({2}, 1e30, hg::kLong); },
       {"full", "1e+30", "cannot be converted to type int64 without overflow"}},
      {"2^63 as int64", [] { (void)hg::full({2}, 0x1p63, hg::kLong); }, {"without overflow"}},
      {"NaN as int64", [] { (void)hg::full({2}, std::nan(""), hg::kLong); }, {"without overflow"}},
      {"-inf as int64", [] { (void)hg::full({2}, -INFINITY, hg::kLong); }, {"without overflow"}},
  });
  // The ends of the range; floating dtypes and bool take any value.
  CHECK(hg::full({1}, -0x1p63, hg::kLong).to_vector<int64_t>()[0] == INT64_MIN);
  CHECK(hg::full({1}, 0x1p62, hg::kLong).to_vector<int64_t>()[0] == int64_t{1} << 62);
  CHECK(std::isinf(hg::full({1}, INFINITY, hg::kHalf).item<double>()));
  CHECK(std::isnan(hg::full({1}, std::nan(""), hg::kBFloat16).item<double>()));
  CHECK(hg::full({1}, 1e300, hg::kDouble).item<double>() == 1e300);
  CHECK(hg::full({1}, 1e30, hg::kBool).item<bool>());
}
