#pragma once
// What the [cuda] op tests share: the devices, copies onto the GPU, fresh
// leaves, and the one comparison of a CUDA result against the CPU's
// (||cuda - cpu|| / ||cpu|| within the dtype's tolerance, or exact).
#include <string>
#include <vector>

#include "test_util.h"

namespace hgtest::cuda {

inline const halfgrad::Device kCuda = halfgrad::Device::cuda();
inline const halfgrad::Device kCpu = halfgrad::Device::cpu();

// t on the GPU (an undefined tensor stays undefined: an absent weight).
inline halfgrad::Tensor dev(const halfgrad::Tensor& t) { return t.defined() ? t.to(kCuda) : t; }

// A fresh leaf that requires grad, holding t's values, on `device`.
inline halfgrad::Tensor leaf_on(const halfgrad::Tensor& t, halfgrad::Device device) {
  halfgrad::Tensor l = t.detach().to(device).clone().detach();
  l.requires_grad_(true);
  return l;
}

inline std::vector<halfgrad::DType> float_and_int() {
  auto d = kFloatDTypes;
  d.push_back(halfgrad::DType::Int64);
  return d;
}

// The CUDA result against the CPU result of the same op on the same values:
// exact for integer and bool results (and when asked), else within
// `tolerance` (0: the dtype's).
inline void expect_same(const halfgrad::Tensor& gpu, const halfgrad::Tensor& cpu, const std::string& what,
                        bool exact = false, double tolerance = 0) {
  INFO(what);
  REQUIRE(gpu.defined());
  REQUIRE(cpu.defined());
  CHECK(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.shape() == cpu.shape());
  const halfgrad::Tensor back = gpu.contiguous().cpu();
  const auto ref = values(cpu);
  if (exact || !halfgrad::is_floating(cpu.dtype())) {
    HG_CHECK_EXACT(back, ref);
  } else {
    HG_CHECK_CLOSE_TOL(back, ref, tolerance > 0 ? tolerance : tol(cpu.dtype()));
  }
}

}  // namespace hgtest::cuda
