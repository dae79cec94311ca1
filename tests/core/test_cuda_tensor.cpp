// Tensors on a CUDA device: allocation from the pool, fills, host round
// trips. Run on a machine with a GPU; elsewhere CTest reports them skipped.
#include <catch2/catch.hpp>

#include <halfgrad.h>

namespace hg = halfgrad;

TEST_CASE("CUDA tensors: fill, copy to and from the host", "[cuda]") {
  const hg::Device dev = hg::Device::cuda();
  for (hg::DType dt : {hg::float32, hg::float64, hg::float16, hg::bfloat16, hg::int64, hg::boolean}) {
    auto t = hg::full({3, 5}, 2.0, hg::TensorOptions(dt, dev));
    REQUIRE(t.device() == dev);
    auto host = t.cpu();
    REQUIRE(host.device().is_cpu());
    for (int64_t i = 0; i < host.numel(); ++i)
      REQUIRE(host.reshape({-1}).select(0, i).item<double>() == (dt == hg::boolean ? 1.0 : 2.0));
  }
}

TEST_CASE("CUDA tensors: values survive a round trip, with casts on the way", "[cuda]") {
  hg::manual_seed(1);
  auto x = hg::randn({64, 33});
  auto back = x.to(hg::Device::cuda()).cpu();
  REQUIRE(hg::eq(back, x).to(hg::int64).sum().item<int64_t>() == x.numel());
  // a cast on the way to the device goes through the host
  auto h = x.to(hg::Device::cuda(), hg::float16).cpu();
  REQUIRE(hg::eq(h, x.to(hg::float16)).to(hg::int64).sum().item<int64_t>() == x.numel());
  // a transposed (strided) host tensor arrives contiguous and in order
  auto t = x.t().to(hg::Device::cuda()).cpu();
  REQUIRE(hg::eq(t, x.t()).to(hg::int64).sum().item<int64_t>() == x.numel());
}

TEST_CASE("CUDA tensors: factories and item on the device", "[cuda]") {
  auto z = hg::zeros({1000}, hg::Device::cuda());
  REQUIRE(z.cpu().sum().item<float>() == 0.0f);
  auto r = hg::randn({10}, hg::Device::cuda());
  REQUIRE(r.device().is_cuda());
  auto one = hg::ones({}, hg::TensorOptions(hg::float16, hg::Device::cuda()));
  REQUIRE(one.item<float>() == 1.0f);
}

TEST_CASE("Device parsing and names", "[device]") {
  REQUIRE(hg::Device::parse("cpu") == hg::Device::cpu());
  REQUIRE(hg::Device::parse("cuda") == hg::Device::cuda(0));
  REQUIRE(hg::Device::parse("cuda:3") == hg::Device::cuda(3));
  REQUIRE(hg::Device::cuda(2).str() == "cuda:2");
  REQUIRE_THROWS_AS(hg::Device::parse("gpu"), hg::Error);
  REQUIRE_THROWS_AS(hg::Device::parse("cuda:-1"), hg::Error);
  REQUIRE_THROWS_AS(hg::Device::parse("cuda:x"), hg::Error);
}

TEST_CASE("Without a usable device, CUDA tensors are a clear error, never a crash", "[device]") {
  if (hg::cuda::is_available()) return;  // only meaningful where no GPU is usable
  REQUIRE_THROWS_AS(hg::zeros({4}, hg::Device::cuda()), hg::Error);
  REQUIRE_THROWS_AS(hg::randn({4}).to(hg::Device::cuda()), hg::Error);
}
