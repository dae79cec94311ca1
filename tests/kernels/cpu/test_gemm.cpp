// cpu::gemm against a naive float64 loop, for every dtype and the layouts the
// framework produces: transposed views, padded rows, batches with a shared
// (stride-0) operand, non-unit column strides, bias, beta, k == 0.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <halfgrad/core/dtype.h>
#include <halfgrad/core/error.h>
#include <halfgrad/kernels/cpu/gemm.h>

using halfgrad::BFloat16;
using halfgrad::DType;
using halfgrad::Half;
using halfgrad::kernels::cpu::gemm;
using halfgrad::kernels::cpu::GemmArgs;

namespace {

// How an operand sits in memory.
enum class Order {
  RowMajor,  // column stride 1
  ColMajor,  // row stride 1: a transposed view
  Strided,   // column stride 2: oneDNN cannot take it as is
  BatchMid,  // [rows][batch][cols] in memory: a batched view of a permuted tensor
};

struct Case {
  std::string name;
  int64_t batch, m, n, k;
  Order a_order = Order::RowMajor, b_order = Order::RowMajor;
  bool bias = false;
  float beta = 0.f;
  bool a_shared = false, b_shared = false;  // batch stride 0
  int64_t pad = 0;                          // extra elements per row/column and per batch
  Order c_order = Order::RowMajor;          // RowMajor or BatchMid (C rows must be contiguous)
};

template <typename T> double tolerance();
template <> double tolerance<double>() { return 1e-12; }
template <> double tolerance<float>() { return 1e-5; }
template <> double tolerance<BFloat16>() { return 1e-2; }
template <> double tolerance<Half>() { return 2e-3; }

template <typename T>
double to_double(T x) {
  return static_cast<double>(static_cast<halfgrad::acc_t<T>>(x));
}

// A [batch][rows][cols] operand inside a flat buffer with the given strides.
template <typename T>
struct Operand {
  std::vector<T> data;
  int64_t bs = 0, rs = 0, cs = 0;
  double at(int64_t b, int64_t i, int64_t j) const { return to_double(data[b * bs + i * rs + j * cs]); }
};

template <typename T>
Operand<T> make_operand(int64_t batch, int64_t rows, int64_t cols, Order order, bool shared, int64_t pad,
                        std::mt19937& rng) {
  Operand<T> op;
  const int64_t stored = shared ? 1 : batch;
  int64_t span = 0;  // elements one matrix covers
  switch (order) {
    case Order::RowMajor: op.rs = cols + pad, op.cs = 1, span = rows * op.rs; break;
    case Order::ColMajor: op.rs = 1, op.cs = rows + pad, span = cols * op.cs; break;
    case Order::Strided: op.rs = 2 * cols + pad, op.cs = 2, span = rows * op.rs; break;
    case Order::BatchMid: op.rs = stored * cols + pad, op.cs = 1, span = rows * op.rs; break;
  }
  op.bs = shared ? 0 : order == Order::BatchMid ? cols : span + pad;
  const int64_t size = order == Order::BatchMid ? span : (stored - 1) * op.bs + span;
  op.data.resize(static_cast<size_t>(std::max<int64_t>(1, size)));
  // Values away from zero: no term of the reference is trivially 0.
  std::uniform_real_distribution<float> mag(0.25f, 1.f);
  std::bernoulli_distribution neg(0.5);
  for (T& x : op.data) x = static_cast<T>(neg(rng) ? -mag(rng) : mag(rng));
  return op;
}

template <typename T>
double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

template <typename T>
void run_case(const Case& c, uint32_t seed) {
  INFO("dtype " << halfgrad::dtype_name(halfgrad::dtype_of<T>::value) << ", case: " << c.name);
  std::mt19937 rng(seed);
  const Operand<T> a = make_operand<T>(c.batch, c.m, c.k, c.a_order, c.a_shared, c.pad, rng);
  const Operand<T> b = make_operand<T>(c.batch, c.k, c.n, c.b_order, c.b_shared, c.pad, rng);
  const Operand<T> bias = make_operand<T>(1, 1, c.n, Order::RowMajor, false, 0, rng);
  Operand<T> out = make_operand<T>(c.batch, c.m, c.n, c.c_order, false, c.pad, rng);
  // With beta == 0 C must never be read: poison it.
  if (c.beta == 0.f) {
    for (T& x : out.data) x = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
  }
  const std::vector<T> before = out.data;

  std::vector<double> ref;
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < c.k; ++p) sum += a.at(bi, i, p) * b.at(bi, p, j);
        if (c.bias) sum += bias.at(0, 0, j);
        if (c.beta != 0.f) sum += static_cast<double>(c.beta) * out.at(bi, i, j);
        ref.push_back(sum);
      }
    }
  }

  GemmArgs args{.dtype = halfgrad::dtype_of<T>::value, .batch = c.batch, .m = c.m, .n = c.n, .k = c.k,
                .a = a.data.data(), .a_bs = a.bs, .a_rs = a.rs, .a_cs = a.cs,
                .b = b.data.data(), .b_bs = b.bs, .b_rs = b.rs, .b_cs = b.cs,
                .c = out.data.data(), .c_bs = out.bs, .c_rs = out.rs,
                .bias = c.bias ? bias.data.data() : nullptr, .beta = c.beta};
  gemm(args);

  std::vector<double> got;
  std::vector<bool> written(out.data.size(), false);
  for (int64_t bi = 0; bi < c.batch; ++bi) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        got.push_back(out.at(bi, i, j));
        written[bi * out.bs + i * out.rs + j] = true;
      }
    }
  }
  const double err = relative_error<T>(got, ref);
  INFO("relative error " << err << " (tolerance " << tolerance<T>() << ")");
  CHECK(err <= tolerance<T>());
  // Padding between rows and batches is left alone.
  size_t clobbered = 0;
  for (size_t x = 0; x < out.data.size(); ++x) {
    if (!written[x] && std::memcmp(&out.data[x], &before[x], sizeof(T)) != 0) ++clobbered;
  }
  CHECK(clobbered == 0);
}

std::vector<Case> cases() {
  using O = Order;
  return {
      {"square", 1, 64, 64, 64},
      {"non-square", 1, 37, 53, 29},
      {"A transposed", 1, 37, 53, 29, O::ColMajor},
      {"B transposed", 1, 37, 53, 29, O::RowMajor, O::ColMajor},
      {"both transposed, bias, beta 1", 1, 37, 53, 29, O::ColMajor, O::ColMajor, true, 1.f},
      {"padded rows, bias", 1, 37, 53, 29, O::RowMajor, O::RowMajor, true, 0.f, false, false, 3},
      {"padded transposed, beta 0.5", 1, 37, 53, 29, O::ColMajor, O::ColMajor, false, 0.5f, false, false, 3},
      {"column stride 2", 1, 37, 53, 29, O::Strided, O::Strided, true, 1.f},
      {"batched", 3, 37, 53, 29, O::RowMajor, O::RowMajor, true, 1.f},
      {"batched, transposed, padded", 3, 37, 53, 29, O::ColMajor, O::ColMajor, false, 0.f, false, false, 2},
      {"batched, A shared", 4, 37, 53, 29, O::RowMajor, O::RowMajor, true, 0.f, true, false},
      {"batched, B shared and transposed", 4, 37, 53, 29, O::RowMajor, O::ColMajor, false, 1.f, false, true},
      {"batched, both shared, beta 1", 3, 37, 53, 29, O::ColMajor, O::RowMajor, true, 1.f, true, true},
      {"batched, strided", 2, 19, 23, 31, O::Strided, O::ColMajor, true, 0.5f},
      {"batched, batch-in-the-middle A and C", 3, 37, 53, 29, O::BatchMid, O::RowMajor, true, 1.f, false, false, 2,
       O::BatchMid},
      {"batched, batch-in-the-middle B, shared A", 3, 37, 53, 29, O::ColMajor, O::BatchMid, false, 0.f, true, false, 0,
       O::BatchMid},
      {"row vector (m = 1)", 1, 1, 53, 29, O::ColMajor, O::RowMajor, true, 0.f},
      {"column vector (n = 1)", 1, 37, 1, 29, O::RowMajor, O::ColMajor, false, 1.f},
      {"outer product (k = 1)", 2, 37, 53, 1, O::ColMajor, O::RowMajor, true, 0.f},
      {"k = 0, bias, beta 1", 2, 37, 53, 0, O::RowMajor, O::RowMajor, true, 1.f},
      {"k = 0, beta 0", 1, 5, 7, 0},
      {"larger, transposed A (training backward shape)", 1, 96, 200, 300, O::ColMajor, O::RowMajor, true, 1.f},
      {"larger, transposed B", 1, 128, 150, 256, O::RowMajor, O::ColMajor, true, 0.f},
  };
}

template <typename T>
void run_all_cases() {
  uint32_t seed = 1234;
  for (const Case& c : cases()) run_case<T>(c, seed++);
}

}  // namespace

TEST_CASE("gemm float64 matches the reference", "[gemm][cpu]") { run_all_cases<double>(); }
TEST_CASE("gemm float32 matches the reference", "[gemm][cpu]") { run_all_cases<float>(); }
TEST_CASE("gemm bfloat16 matches the reference", "[gemm][cpu]") { run_all_cases<BFloat16>(); }
TEST_CASE("gemm float16 matches the reference", "[gemm][cpu]") { run_all_cases<Half>(); }

TEST_CASE("gemm with m == 0 or n == 0 touches nothing", "[gemm][cpu]") {
  std::vector<float> c(6, 42.f);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{0, 3}, {2, 0}}) {
    gemm({.dtype = DType::Float32, .m = m, .n = n, .k = 4, .c = c.data(), .c_rs = 3, .beta = 1.f});
  }
  CHECK(c == std::vector<float>(6, 42.f));
}

TEST_CASE("gemm gives the same answer from several threads at once", "[gemm][cpu]") {
  // The primitive cache, scratch buffers and streams are shared or per thread:
  // concurrent callers on the same shapes must not disturb each other.
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    constexpr int64_t m = 48, n = 40, k = 56;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> a32(m * k), b32(k * n);
    for (float& x : a32) x = u(rng);
    for (float& x : b32) x = u(rng);
    // Store everything as 32-bit floats; half types use the low 16 bits of a copy.
    auto convert = [dt](const std::vector<float>& v) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        h[i] = dt == DType::Float16 ? Half(v[i]).bits : BFloat16(v[i]).bits;
      return h;
    };
    const std::vector<uint16_t> a16 = convert(a32), b16 = convert(b32);
    const bool wide = dt == DType::Float32;
    auto run = [&](void* c) {
      gemm({.dtype = dt, .m = m, .n = n, .k = k,
            .a = wide ? static_cast<const void*>(a32.data()) : a16.data(), .a_rs = 1, .a_cs = m,
            .b = wide ? static_cast<const void*>(b32.data()) : b16.data(), .b_rs = n, .b_cs = 1,
            .c = c, .c_rs = n});
    };
    const size_t bytes = m * n * halfgrad::itemsize(dt);
    std::vector<std::byte> expected(bytes);
    run(expected.data());

    constexpr int kThreads = 4, kIters = 25;
    std::vector<std::vector<std::byte>> outs(kThreads, std::vector<std::byte>(bytes));
    std::vector<int> mismatches(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int it = 0; it < kIters; ++it) {
          std::fill(outs[t].begin(), outs[t].end(), std::byte{0});
          run(outs[t].data());
          if (outs[t] != expected) ++mismatches[t];
        }
      });
    }
    for (std::thread& th : threads) th.join();
    INFO("dtype " << halfgrad::dtype_name(dt));
    CHECK(mismatches == std::vector<int>(kThreads, 0));
  }
}

TEST_CASE("gemm rejects bad arguments with halfgrad::Error", "[gemm][cpu]") {
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64, 0.f);
  GemmArgs ok{.dtype = DType::Float32, .batch = 1, .m = 4, .n = 4, .k = 4,
              .a = a.data(), .a_bs = 16, .a_rs = 4, .a_cs = 1,
              .b = b.data(), .b_bs = 16, .b_rs = 4, .b_cs = 1,
              .c = c.data(), .c_bs = 16, .c_rs = 4};
  REQUIRE_NOTHROW(gemm(ok));

  GemmArgs bad = ok;
  bad.dtype = DType::Int64;
  CHECK_THROWS_WITH(gemm(bad), Catch::Contains("gemm") && Catch::Contains("int64"));
  bad = ok;
  bad.m = -1;
  CHECK_THROWS_AS(gemm(bad), halfgrad::Error);
  bad = ok;
  bad.c_rs = 2;  // rows of C overlap
  CHECK_THROWS_WITH(gemm(bad), Catch::Contains("gemm") && Catch::Contains("overlap"));
  bad = ok;
  bad.batch = 2;
  bad.c_bs = 0;  // both batches would write one matrix
  CHECK_THROWS_AS(gemm(bad), halfgrad::Error);
  bad = ok;
  bad.b = nullptr;
  CHECK_THROWS_AS(gemm(bad), halfgrad::Error);
}
