// float8_e4m3fn and float8_e5m2 (core/float8.h) against their definitions,
// computed here independently: every one of the 256 patterns of each format
// decoded from the sign/exponent/fraction formula, and float -> fp8 by a
// nearest-value search over those decoded values (ties to the even pattern).
// Where the CUDA toolkit is at hand, also bit for bit against NVIDIA's own
// conversion (cuda_fp8.h's __nv_cvt_float_to_fp8, which runs on the host too):
// satfinite for e4m3fn, IEEE and satfinite for e5m2. Then fp8 tensors: casts,
// printing, item, fill, safetensors, and the Errors for what fp8 does not do.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include <halfgrad.h>
#include <halfgrad/core/float8.h>
#include <halfgrad/nn/safetensors.h>

#if defined(HALFGRAD_WITH_CUDA) && __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define HG_HAVE_NV_FP8 1
#else
#define HG_HAVE_NV_FP8 0
#endif

#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;

namespace {

struct Format {
  const char* name;
  int exp_bits, frac_bits, bias;
  bool has_inf;  // e5m2: IEEE infinities; e4m3fn: none, only S.1111.111 is NaN
};
constexpr Format kE4M3{"e4m3fn", 4, 3, 7, false};
constexpr Format kE5M2{"e5m2", 5, 2, 15, true};

// The value of a pattern from the definition (NaN for the NaN patterns).
double decode(const Format& f, uint8_t b) {
  const int sign = b >> 7;
  const int e = (b >> f.frac_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.frac_bits) - 1);
  const int emax = (1 << f.exp_bits) - 1;
  double v;
  if (f.has_inf && e == emax) v = m == 0 ? INFINITY : NAN;
  else if (!f.has_inf && e == emax && m == (1 << f.frac_bits) - 1) v = NAN;
  else if (e == 0) v = std::ldexp(m, 1 - f.bias - f.frac_bits);
  else v = std::ldexp(1.0 + std::ldexp(m, -f.frac_bits), e - f.bias);
  return sign ? -v : v;
}

// The expected pattern for x: the nearest finite value, ties to the pattern
// with an even last bit; beyond the largest finite value, `saturate` gives it,
// otherwise (e5m2's IEEE mode) the round-to-nearest-even result past it: inf.
uint8_t encode_reference(const Format& f, float x, bool saturate) {
  if (std::isnan(x)) return 0x7f;
  const bool neg = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_d = INFINITY;
  double max_finite = 0;
  uint8_t max_code = 0;
  for (int b = 0; b < 0x80; ++b) {
    const double v = decode(f, static_cast<uint8_t>(b));
    if (!std::isfinite(v)) continue;
    if (v > max_finite) max_finite = v, max_code = static_cast<uint8_t>(b);
    const double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (b & 1) == 0)) best = static_cast<uint8_t>(b), best_d = d;
  }
  if (a > max_finite && saturate) best = max_code;  // (the distances above can tie in float64 for huge x)
  if (a > max_finite && !saturate) {
    // The next step past the largest finite value would be 2^(emax+1-bias):
    // at or beyond the halfway point to it (a tie goes to it: its last bit is even), inf.
    const double next = std::ldexp(1.0, (1 << f.exp_bits) - 1 - f.bias);
    if (a >= (max_finite + next) / 2) best = 0x7c;
    else best = max_code;
  }
  return static_cast<uint8_t>(best | (neg ? 0x80 : 0));
}

uint8_t encode(const Format& f, float x, bool saturate) {
  if (f.has_inf) return hg::float_to_e5m2_bits(x, saturate ? hg::Fp8Overflow::Saturate : hg::Fp8Overflow::Ieee);
  return hg::float_to_e4m3fn_bits(x);
}
float decode_lib(const Format& f, uint8_t b) {
  return f.has_inf ? hg::e5m2_bits_to_float(b) : hg::e4m3fn_bits_to_float(b);
}

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Floats where rounding decides: every fp8 value, the midpoints between
// neighbours and one float step either side of them, the overflow region,
// zeros, infinities, float subnormals and log-uniform random values.
std::vector<float> probe_values(const Format& f) {
  std::vector<double> vals;
  for (int b = 0; b < 0x80; ++b) {
    const double v = decode(f, static_cast<uint8_t>(b));
    if (std::isfinite(v)) vals.push_back(v);
  }
  std::sort(vals.begin(), vals.end());
  std::vector<float> xs;
  auto add = [&](double v) {
    const float x = static_cast<float>(v);
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) xs.push_back(y), xs.push_back(-y);
  };
  for (size_t i = 0; i < vals.size(); ++i) {
    add(vals[i]);
    if (i + 1 < vals.size()) add((vals[i] + vals[i + 1]) / 2);  // exact in float: one more fraction bit
  }
  const double top = vals.back(), next = std::ldexp(1.0, (1 << f.exp_bits) - 1 - f.bias);
  for (double v : {(top + next) / 2, next, 2 * next, 1e10, 3.4e38}) add(v);
  for (float v : {0.0f, INFINITY, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) add(v);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> log2x(-30, 20);
  for (int i = 0; i < 200000; ++i) xs.push_back(static_cast<float>((i & 1 ? -1 : 1) * std::exp2(log2x(rng))));
  return xs;
}

}  // namespace

TEST_CASE("float8: every pattern decodes to its definition's value", "[float8]") {
  for (const Format& f : {kE4M3, kE5M2}) {
    int nans = 0, infs = 0;
    for (int b = 0; b < 256; ++b) {
      const double want = decode(f, static_cast<uint8_t>(b));
      const float got = decode_lib(f, static_cast<uint8_t>(b));
      INFO(f.name << " pattern 0x" << std::hex << b);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        ++nans;
      } else {
        CHECK(static_cast<double>(got) == want);
        CHECK(std::signbit(got) == ((b & 0x80) != 0));  // -0 too
        infs += std::isinf(want);
      }
    }
    CHECK(nans == (f.has_inf ? 6 : 2));
    CHECK(infs == (f.has_inf ? 2 : 0));
  }
  CHECK(hg::e4m3fn_bits_to_float(0x7e) == 448.0f);
  CHECK(hg::e4m3fn_bits_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(hg::e5m2_bits_to_float(0x7b) == 57344.0f);
  CHECK(hg::e5m2_bits_to_float(0x01) == std::ldexp(1.0f, -16));
  CHECK(float(std::numeric_limits<hg::Float8_e4m3fn>::max()) == hg::kE4M3Max);
  CHECK(float(std::numeric_limits<hg::Float8_e5m2>::max()) == hg::kE5M2Max);
  CHECK(float(std::numeric_limits<hg::Float8_e4m3fn>::min()) == std::ldexp(1.0f, -6));
  CHECK(float(std::numeric_limits<hg::Float8_e5m2>::min()) == std::ldexp(1.0f, -14));
}

TEST_CASE("float8: every finite pattern survives fp8 -> float -> fp8", "[float8]") {
  for (const Format& f : {kE4M3, kE5M2}) {
    for (int b = 0; b < 256; ++b) {
      const float v = decode_lib(f, static_cast<uint8_t>(b));
      if (std::isnan(v)) {
        CHECK(encode(f, v, false) == 0x7f);
        continue;
      }
      INFO(f.name << " pattern 0x" << std::hex << b);
      CHECK(encode(f, v, false) == b);
    }
  }
}

TEST_CASE("float8: float -> fp8 rounds to nearest even, as the definition", "[float8]") {
  for (const Format& f : {kE4M3, kE5M2}) {
    for (bool saturate : {false, true}) {
      if (!f.has_inf && !saturate) continue;  // e4m3fn always saturates
      int bad = 0;
      for (float x : probe_values(f)) {
        const uint8_t want = encode_reference(f, x, saturate), got = encode(f, x, saturate);
        if (want != got && ++bad <= 5)
          FAIL_CHECK(f.name << (saturate ? " satfinite" : " ieee") << ": " << x << " (0x" << std::hex << fbits(x)
                            << ") gives 0x" << int(got) << ", the definition 0x" << int(want));
      }
      CHECK(bad == 0);
    }
  }
  // The cases the docs name.
  CHECK(hg::float_to_e4m3fn_bits(460.0f) == 0x7e);      // past 448: saturates
  CHECK(hg::float_to_e4m3fn_bits(INFINITY) == 0x7e);
  CHECK(hg::float_to_e4m3fn_bits(-INFINITY) == 0xfe);
  CHECK(hg::float_to_e5m2_bits(61440.0f) == 0x7c);      // the tie past 57344 goes to inf
  CHECK(hg::float_to_e5m2_bits(61439.0f) == 0x7b);
  CHECK(hg::float_to_e5m2_bits(1e6f, hg::Fp8Overflow::Saturate) == 0x7b);
  CHECK(hg::float_to_e4m3fn_bits(std::ldexp(1.0f, -10)) == 0x00);  // half the smallest subnormal: to even (0)
  CHECK(hg::float_to_e4m3fn_bits(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(hg::float_to_e4m3fn_bits(-0.0f) == 0x80);
}

#if HG_HAVE_NV_FP8
// Every float32 whose low 12 bits are one of a few patterns (the upper 20 bits
// hold every case the rounding can tell apart: sign, exponent, the kept
// fraction bits and the round bit), against NVIDIA's conversion.
TEST_CASE("float8: bit-identical to NVIDIA's __nv_cvt_float_to_fp8", "[float8]") {
  int bad = 0;
  for (uint32_t hi = 0; hi < (1u << 20); ++hi) {
    for (uint32_t lo : {0x000u, 0x001u, 0x7ffu, 0x800u, 0x801u, 0xfffu}) {
      const float x = bitsf(hi << 12 | lo);
      const uint8_t e4 = hg::float_to_e4m3fn_bits(x), n4 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
      const uint8_t e5 = hg::float_to_e5m2_bits(x), n5 = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
      const uint8_t s5 = hg::float_to_e5m2_bits(x, hg::Fp8Overflow::Saturate),
                    ns5 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
      if ((e4 != n4 || e5 != n5 || s5 != ns5) && ++bad <= 5)
        FAIL_CHECK("0x" << std::hex << fbits(x) << ": ours " << int(e4) << "/" << int(e5) << "/" << int(s5)
                        << ", NVIDIA's " << int(n4) << "/" << int(n5) << "/" << int(ns5));
    }
  }
  CHECK(bad == 0);
  for (int b = 0; b < 256; ++b) {
    __nv_fp8_e4m3 a;
    a.__x = static_cast<__nv_fp8_storage_t>(b);
    __nv_fp8_e5m2 c;
    c.__x = static_cast<__nv_fp8_storage_t>(b);
    const float fa = static_cast<float>(a), fc = static_cast<float>(c);
    CHECK((std::isnan(fa) ? std::isnan(hg::e4m3fn_bits_to_float(b)) : fbits(fa) == fbits(hg::e4m3fn_bits_to_float(b))));
    CHECK((std::isnan(fc) ? std::isnan(hg::e5m2_bits_to_float(b)) : fbits(fc) == fbits(hg::e5m2_bits_to_float(b))));
  }
}
#endif

TEST_CASE("float8 tensors: casts, item, fill, printing", "[float8]") {
  auto x = hg::tensor({1.0f, -0.3f, 500.0f, 1e-4f, 70000.0f, NAN}, {6});
  auto e4 = x.to(hg::kFloat8_e4m3fn);
  auto e5 = x.to(hg::float8_e5m2);
  CHECK(e4.dtype() == hg::DType::Float8_e4m3fn);
  CHECK(hg::itemsize(hg::float8_e5m2) == 1);
  auto back4 = e4.to(hg::kFloat);
  auto back5 = e5.to(hg::kDouble);
  const float v4[] = {1.0f, hg::round_to_e4m3fn(-0.3f), 448.0f, hg::round_to_e4m3fn(1e-4f), 448.0f};
  const float v5[] = {1.0f, hg::round_to_e5m2(-0.3f), 512.0f, hg::round_to_e5m2(1e-4f), INFINITY};
  for (int i = 0; i < 5; ++i) {
    CHECK(back4[i].item<float>() == v4[i]);
    CHECK(back5[i].item<double>() == double(v5[i]));
  }
  CHECK(std::isnan(back4[5].item<float>()));
  CHECK(e4[0].item<float>() == 1.0f);
  // fp8 -> fp8 of the other kind goes through float, like every cast.
  CHECK(e4.to(hg::float8_e5m2).to(hg::kFloat)[1].item<float>() == hg::round_to_e5m2(v4[1]));
  // Views keep working: they only move bytes.
  auto m = hg::arange(0.0, 6.0, 1.0, hg::kFloat).reshape({2, 3}).to(hg::float8_e4m3fn);
  CHECK(m.t().contiguous().to(hg::kFloat)[2][1].item<float>() == 5.0f);
  auto filled = hg::full({3}, 0.3, hg::TensorOptions().dtype(hg::float8_e4m3fn));
  CHECK(filled[2].item<float>() == hg::round_to_e4m3fn(0.3f));
  std::ostringstream os;
  os << e4;
  const std::string text = os.str();
  CHECK(text.find("float8_e4m3fn") != std::string::npos);
  CHECK(text.find("448.0000") != std::string::npos);
}

TEST_CASE("float8 tensors: no arithmetic and no promotion, with a remedy", "[float8]") {
  auto a = hg::ones({4}).to(hg::float8_e4m3fn);
  CHECK_THROWS_WITH(hg::add(a, a), Catch::Contains("float8_e4m3fn") && Catch::Contains("not supported"));
  CHECK_THROWS_WITH(hg::add(a, hg::ones({4})), Catch::Contains("fp8") && Catch::Contains("float32 first"));
  CHECK_THROWS_WITH(hg::promote_types(hg::float8_e5m2, hg::kFloat), Catch::Contains("float8_e5m2"));
  CHECK(hg::promote_types(hg::float8_e5m2, hg::float8_e5m2) == hg::float8_e5m2);
  CHECK(!hg::is_floating(hg::float8_e4m3fn));
  CHECK(hg::is_float8(hg::float8_e4m3fn));
}

TEST_CASE("float8 tensors: safetensors F8_E4M3 / F8_E5M2 round trip bit for bit", "[float8]") {
  hgtest::TempDir dir;
  auto x = hg::randn({5, 7}) * 100;
  std::vector<std::pair<std::string, hg::Tensor>> tensors{{"a", x.to(hg::float8_e4m3fn)}, {"b", x.to(hg::float8_e5m2)}};
  const auto path = dir / "fp8.safetensors";
  hg::nn::save_safetensors(path, tensors);
  auto loaded = hg::nn::load_safetensors(path);
  for (const auto& [name, t] : tensors) {
    REQUIRE(loaded.at(name).dtype() == t.dtype());
    CHECK(std::memcmp(loaded.at(name).data_ptr(), t.data_ptr(), 35) == 0);
  }
}

TEST_CASE("float8 tensors: CUDA casts give the CPU's bits [cuda]", "[float8][cuda]") {
  auto x = hg::cat({hg::randn({1000}) * 300, hg::tensor({NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 464.0f, 61440.0f}, {7})}, 0);
  for (auto dt : {hg::float8_e4m3fn, hg::float8_e5m2}) {
    auto cpu = x.to(dt);
    auto dev = x.to(hg::Device::cuda()).to(dt).to(hg::Device::cpu());
    REQUIRE(dev.dtype() == dt);
    CHECK(std::memcmp(cpu.data_ptr(), dev.data_ptr(), x.numel()) == 0);
    // And back: fp8 -> float on the device.
    const auto up = cpu.to(hg::Device::cuda()).to(hg::kFloat).to_vector<float>();
    const auto up_cpu = cpu.to(hg::kFloat).to_vector<float>();
    REQUIRE(up.size() == up_cpu.size());
    for (size_t i = 0; i < up.size(); ++i) CHECK((std::isnan(up_cpu[i]) ? std::isnan(up[i]) : up[i] == up_cpu[i]));
  }
}
