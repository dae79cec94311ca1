// CPU random fills: element i of the output is drawn from Philox counter
// offset + i (core/philox.h), the same arithmetic the CUDA backend runs, so
// the elements are independent and the loop runs in parallel.
#include <halfgrad/core/philox.h>
#include <halfgrad/core/random.h>
#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/loops.h>

namespace halfgrad::kernels::cpu {

namespace {
// Calls fill(i, words) for every element of the contiguous `out`, drawing from
// `generator` or (null) the global CPU generator.
template <typename Fill>
void draw(const Tensor& out, const char* op, Generator* generator, Fill&& fill) {
  HG_CHECK(out.is_contiguous(), "{}: the output must be contiguous, got {}", op, out.describe());
  const int64_t n = out.numel();
  const rng::PhiloxState s = reserve(static_cast<uint64_t>(n), generator);
#pragma omp parallel for schedule(static) if (n >= 2 * kParallelGrain)
  for (int64_t i = 0; i < n; ++i) fill(i, philox::draw(s.seed, s.offset, static_cast<uint64_t>(i)));
}

// One rounding from double to the dtype (through float for the half types).
template <typename T>
T round_to(double v) {
  return static_cast<T>(static_cast<acc_t<T>>(v));
}
}  // namespace

void uniform(const Tensor& out, double low, double high, Generator* generator) {
  HG_DISPATCH_FLOATING(out.dtype(), "rand", [&] {
    auto* o = static_cast<scalar_t*>(out.data_ptr());
    draw(out, "rand", generator, [&](int64_t i, const philox::Words& w) {
      const scalar_t r = round_to<scalar_t>(philox::uniform(w, low, high));
      // rounding to the dtype may reach `high`: such draws become `low`, keeping [low, high)
      o[i] = static_cast<double>(static_cast<acc_t<scalar_t>>(r)) < high ? r : round_to<scalar_t>(low);
    });
  });
}

void normal(const Tensor& out, double mean, double std, Generator* generator) {
  HG_DISPATCH_FLOATING(out.dtype(), "randn", [&] {
    auto* o = static_cast<scalar_t*>(out.data_ptr());
    draw(out, "randn", generator,
         [&](int64_t i, const philox::Words& w) { o[i] = round_to<scalar_t>(philox::normal(w, mean, std)); });
  });
}

void randint(const Tensor& out, int64_t low, int64_t high, Generator* generator) {
  HG_DISPATCH_NUMERIC(out.dtype(), "randint", [&] {
    auto* o = static_cast<scalar_t*>(out.data_ptr());
    draw(out, "randint", generator, [&](int64_t i, const philox::Words& w) {
      const int64_t v = philox::randint(w, low, high);
      if constexpr (std::is_integral_v<scalar_t>) o[i] = static_cast<scalar_t>(v);
      else o[i] = round_to<scalar_t>(static_cast<double>(v));
    });
  });
}

}  // namespace halfgrad::kernels::cpu
