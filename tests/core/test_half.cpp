// float16 and bfloat16 conversions against the IEEE definition, computed
// independently of core/half.h: fp16 by a nearest-representable search over
// the sorted list of every finite half (decoded with ldexp) and by the
// compiler's _Float16 (GCC 12 on x86-64: libgcc's correctly rounded soft-fp);
// bf16 by comparing the distances to the two neighbouring bf16 values in
// float64. Rules: round to nearest, ties to even; fp16 keeps subnormals;
// overflow gives +-inf; NaN stays NaN; the sign of zero is kept.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <halfgrad/core/half.h>
#include "test_util.h"

using halfgrad::bfloat16_bits_to_float;
using halfgrad::BFloat16;
using halfgrad::float_to_bfloat16_bits;
using halfgrad::float_to_half_bits;
using halfgrad::Half;
using halfgrad::half_bits_to_float;

namespace {

#if defined(__FLT16_MANT_DIG__)
#define HG_HAVE_FLOAT16 1
#else
#define HG_HAVE_FLOAT16 0
#endif

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bfloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- fp16 reference ------------------------------------------------------------------------
bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Decode by the IEEE definition, with no bit tricks: (-1)^s 2^(e-15) (1 + m/1024), subnormals m 2^-24.
double half_decode(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0x1f) v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

// All non-negative finite halves, ascending: bits 0x0000..0x7bff are monotone in value.
const std::vector<double>& positive_halves() {
  static const std::vector<double> v = [] {
    std::vector<double> out;
    for (uint32_t b = 0; b <= 0x7bffu; ++b) out.push_back(half_decode(static_cast<uint16_t>(b)));
    return out;
  }();
  return v;
}

// float -> half by nearest-representable search. Overflow: IEEE rounds as if
// the exponent were unbounded, so |x| >= 65520 (the midpoint of 65504 and
// 2^16, a tie that goes to the even 2^16) gives inf.
uint16_t ref_float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00u;  // compared only as "is NaN"
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00u;
  const auto& hv = positive_halves();
  auto it = std::lower_bound(hv.begin(), hv.end(), a);  // first >= a
  size_t hi = static_cast<size_t>(it - hv.begin());
  if (hi < hv.size() && hv[hi] == a) return static_cast<uint16_t>(sign | hi);
  // a is between hv[hi-1] and hv[hi] (hi < size since a < 65520 and not above 65504 past the check
  // only when a in (65504, 65520): then the upper neighbour is 2^16, i.e. inf bits 0x7c00).
  const size_t lo = hi - 1;
  const double vlo = hv[lo];
  const double vhi = hi < hv.size() ? hv[hi] : 65536.0;
  const double dlo = a - vlo, dhi = vhi - a;
  size_t pick;
  if (dlo < dhi) pick = lo;
  else if (dhi < dlo) pick = hi;
  else pick = (lo % 2 == 0) ? lo : hi;  // tie: even significand (the bit pattern's last bit)
  return static_cast<uint16_t>(sign | pick);  // pick == 0x7c00 is inf
}

#if HG_HAVE_FLOAT16
uint16_t compiler_float_to_half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float compiler_half_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif

// Same half, or both NaN (NaN payloads are not specified: PyTorch returns the canonical 0x7e00).
bool same_half(uint16_t got, uint16_t want) {
  if (half_is_nan(want)) return half_is_nan(got);
  return got == want;
}

// ---- bf16 reference --------------------------------------------------------------------------
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

double bf16_decode_unbounded(uint32_t mag_bits16) {
  // magnitude bits of a bf16 (no sign); 0x7f80 stands for 2^128 when used as an upper neighbour
  if (mag_bits16 == 0x7f80u) return std::ldexp(1.0, 128);
  return static_cast<double>(bfloat(mag_bits16 << 16));
}

uint16_t ref_float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0u;
  const uint32_t x = fbits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t mag = x & 0x7fffffffu;
  if (mag == 0x7f800000u) return sign | 0x7f80u;
  const uint32_t lo = mag >> 16, hi = lo + 1;  // truncation and the next bf16 up (0x7f80: 2^128 -> inf)
  const double a = std::fabs(static_cast<double>(f));
  const double dlo = a - bf16_decode_unbounded(lo), dhi = bf16_decode_unbounded(hi) - a;
  uint32_t pick;
  if (dlo < dhi) pick = lo;
  else if (dhi < dlo) pick = hi;
  else pick = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint16_t>(sign | pick);
}

bool same_bf16(uint16_t got, uint16_t want) {
  if (bf16_is_nan(want)) return bf16_is_nan(got);
  return got == want;
}

// Every float near a half boundary: each positive half, the midpoint to the
// next one and the floats on either side of each.
std::vector<float> half_boundary_floats() {
  std::vector<float> out;
  const auto& hv = positive_halves();
  for (size_t i = 0; i < hv.size(); ++i) {
    const float h = static_cast<float>(hv[i]);
    const double next = i + 1 < hv.size() ? hv[i + 1] : 65536.0;
    const float mid = static_cast<float>((hv[i] + next) / 2);  // exact: 12 significant bits
    REQUIRE(static_cast<double>(mid) == (hv[i] + next) / 2);
    for (float f : {h, std::nextafter(h, 0.f), std::nextafter(h, INFINITY), mid, std::nextafter(mid, 0.f),
                    std::nextafter(mid, INFINITY)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("numeric_limits of float16 and bfloat16: the formats' limits", "[half]") {
  using HL = std::numeric_limits<halfgrad::Half>;
  using BL = std::numeric_limits<halfgrad::BFloat16>;
  STATIC_REQUIRE(HL::is_specialized);
  STATIC_REQUIRE(BL::is_specialized);
  CHECK(static_cast<float>(HL::max()) == 65504.0f);
  CHECK(static_cast<float>(HL::lowest()) == -65504.0f);
  CHECK(static_cast<float>(HL::min()) == std::ldexp(1.0f, -14));
  CHECK(static_cast<float>(HL::denorm_min()) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(HL::epsilon()) == std::ldexp(1.0f, -10));  // 1 + eps is the next float16 after 1
  CHECK(static_cast<float>(halfgrad::Half(1.0f + static_cast<float>(HL::epsilon()))) > 1.0f);
  CHECK(std::isinf(static_cast<float>(HL::infinity())));
  CHECK(std::isnan(static_cast<float>(HL::quiet_NaN())));
  CHECK(static_cast<float>(BL::max()) == std::ldexp(2.0f - std::ldexp(1.0f, -7), 127));
  CHECK(static_cast<float>(BL::lowest()) == -static_cast<float>(BL::max()));
  CHECK(static_cast<float>(BL::min()) == FLT_MIN);  // float32's exponent range
  CHECK(static_cast<float>(BL::denorm_min()) == std::ldexp(1.0f, -133));
  CHECK(static_cast<float>(BL::epsilon()) == std::ldexp(1.0f, -7));
  CHECK(std::isinf(static_cast<float>(BL::infinity())));
  CHECK(std::isnan(static_cast<float>(BL::quiet_NaN())));
  // one step past max rounds to infinity in each format
  CHECK(std::isinf(static_cast<float>(halfgrad::Half(65520.0f))));
  CHECK(HL::digits == 11);
  CHECK(BL::digits == 8);
}

TEST_CASE("fp16: the compiler's _Float16 is available as a second reference", "[half]") {
#if HG_HAVE_FLOAT16
  CHECK(compiler_float_to_half(65519.f) == 0x7bffu);
  CHECK(compiler_float_to_half(65520.f) == 0x7c00u);
  SUCCEED("_Float16 present (GCC on x86-64)");
#else
  WARN("_Float16 is not supported by this compiler: only the search reference is used");
#endif
}

TEST_CASE("fp16: every one of the 65536 bit patterns decodes exactly and round-trips", "[half]") {
  int64_t nan_count = 0;
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(h);
    const double want = half_decode(h);
    INFO(fmt::format("bits 0x{:04x}: decoded {} expected {}", b, f, want));
    if (half_is_nan(h)) {
      ++nan_count;
      REQUIRE(std::isnan(f));
      // NaN stays NaN, keeps its sign, and comes back quiet
      const uint16_t back = float_to_half_bits(f);
      REQUIRE(half_is_nan(back));
      REQUIRE((back & 0x8000u) == (h & 0x8000u));
      REQUIRE((back & 0x0200u) != 0);
      continue;
    }
    REQUIRE(fbits(f) == fbits(static_cast<float>(want)));  // exact, including -0 and +-inf
    REQUIRE(float_to_half_bits(f) == h);                   // round trip, bit for bit
    REQUIRE(Half::from_bits(h).bits == h);
    REQUIRE(fbits(static_cast<float>(Half::from_bits(h))) == fbits(f));
    REQUIRE(Half(f).bits == h);
#if HG_HAVE_FLOAT16
    REQUIRE(fbits(compiler_half_to_float(h)) == fbits(f));
#endif
  }
  CHECK(nan_count == 2 * 1023);
}

TEST_CASE("fp16: float -> half rounds to nearest even at every half boundary", "[half]") {
  const std::vector<float> fs = half_boundary_floats();
  REQUIRE(fs.size() > 300000);
  int64_t checked = 0;
  for (float f : fs) {
    const uint16_t got = float_to_half_bits(f);
    const uint16_t want = ref_float_to_half(f);
    INFO(fmt::format("float {:.9g} (0x{:08x}): got 0x{:04x}, expected 0x{:04x}", f, fbits(f), got, want));
    REQUIRE(same_half(got, want));
#if HG_HAVE_FLOAT16
    REQUIRE(same_half(compiler_float_to_half(f), want));  // the two references agree
#endif
    ++checked;
  }
  CHECK(checked == static_cast<int64_t>(fs.size()));
}

TEST_CASE("fp16: float -> half over a sweep of all float32 bit patterns", "[half]") {
  // Every 4099th bit pattern (about a million, all exponents, both signs, NaNs and infs),
  // plus a million random patterns.
  std::mt19937_64 gen(7);
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) patterns.push_back(static_cast<uint32_t>(u));
  for (int i = 0; i < 1000000; ++i) patterns.push_back(static_cast<uint32_t>(gen()));
  int64_t bad = 0;
  for (uint32_t u : patterns) {
    const float f = bfloat(u);
    const uint16_t got = float_to_half_bits(f);
    const uint16_t want = ref_float_to_half(f);
    bool ok = same_half(got, want);
#if HG_HAVE_FLOAT16
    ok = ok && same_half(compiler_float_to_half(f), want);
#endif
    if (!ok && bad++ < 5) {
      UNSCOPED_INFO(fmt::format("float 0x{:08x} ({:.9g}): got 0x{:04x}, expected 0x{:04x}", u, f, got, want));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("fp16: named cases (subnormals, largest finite, overflow, NaN, signed zero, ties)", "[half]") {
  struct Case {
    float in;
    uint16_t bits;
  };
  const float two_m24 = std::ldexp(1.f, -24), two_m25 = std::ldexp(1.f, -25);
  const std::vector<Case> cases = {
      {0.f, 0x0000},
      {-0.f, 0x8000},                                  // negative zero keeps its sign
      {two_m24, 0x0001},                               // smallest subnormal
      {-two_m24, 0x8001},
      {two_m25, 0x0000},                               // halfway to 2^-24: tie, rounds to even 0
      {std::nextafter(two_m25, 1.f), 0x0001},          // just above halfway
      {std::nextafter(two_m25, 0.f), 0x0000},
      {3 * two_m25, 0x0002},                           // 1.5 * 2^-24: tie between 1 and 2 -> even 2
      {5 * two_m25, 0x0002},                           // 2.5 * 2^-24: tie -> 2
      {1023 * two_m24, 0x03ff},                        // largest subnormal
      {std::ldexp(1.f, -14), 0x0400},                  // smallest normal
      {std::ldexp(1.f, -14) - two_m25, 0x0400},        // halfway between largest subnormal and smallest normal
      {1.0f, 0x3c00},
      {1.0f + std::ldexp(1.f, -11), 0x3c00},           // tie between 0x3c00 and 0x3c01 -> even 0x3c00
      {1.0f + 3 * std::ldexp(1.f, -11), 0x3c02},       // tie between 0x3c01 and 0x3c02 -> even 0x3c02
      {std::nextafter(1.0f + std::ldexp(1.f, -11), 2.f), 0x3c01},
      {2049.f, 0x6800},                                // 2049: tie between 2048 and 2050 -> 2048
      {2051.f, 0x6802},                                // 2051: tie between 2050 and 2052 -> 2052
      {-2051.f, 0xe802},
      {65504.f, 0x7bff},                               // largest finite
      {65519.f, 0x7bff},                               // below the midpoint: rounds down to 65504
      {std::nextafter(65520.f, 0.f), 0x7bff},
      {65520.f, 0x7c00},                               // the midpoint: ties to even = 2^16 = inf
      {-65520.f, 0xfc00},
      {65536.f, 0x7c00},
      {1e6f, 0x7c00},                                  // overflow -> inf
      {-1e6f, 0xfc00},
      {FLT_MAX, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {1e-10f, 0x0000},                                // underflow -> 0
      {-1e-10f, 0x8000},                               // ... keeping the sign
      {0.1f, 0x2e66},
      {1.0f / 3.0f, 0x3555},
  };
  for (const auto& c : cases) {
    INFO(fmt::format("float {:.9g}: got 0x{:04x}, expected 0x{:04x}", c.in, float_to_half_bits(c.in), c.bits));
    CHECK(float_to_half_bits(c.in) == c.bits);
    CHECK(ref_float_to_half(c.in) == c.bits);  // the reference agrees with the table
#if HG_HAVE_FLOAT16
    CHECK(compiler_float_to_half(c.in) == c.bits);
#endif
  }
  // NaN stays NaN, both signs, quiet and signalling inputs
  for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u}) {
    const uint16_t h = float_to_half_bits(bfloat(nan_bits));
    INFO(fmt::format("NaN 0x{:08x} -> 0x{:04x}", nan_bits, h));
    CHECK(half_is_nan(h));
    CHECK((h >> 15) == (nan_bits >> 31));
    CHECK(std::isnan(half_bits_to_float(h)));
  }
  // the struct converts the same way
  CHECK(static_cast<float>(Half(65519.f)) == 65504.f);
  CHECK(std::isinf(static_cast<float>(Half(65520.f))));
  CHECK(static_cast<float>(Half(two_m24)) == two_m24);
  CHECK(std::signbit(static_cast<float>(Half(-0.f))));
}

TEST_CASE("bf16: every one of the 65536 bit patterns decodes exactly and round-trips", "[half]") {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = bfloat16_bits_to_float(h);
    INFO(fmt::format("bits 0x{:04x}", b));
    REQUIRE(fbits(f) == (b << 16));  // bf16 is the upper half of a float32
    const uint16_t back = float_to_bfloat16_bits(f);
    if (bf16_is_nan(h)) {
      REQUIRE(bf16_is_nan(back));     // NaN stays NaN (never becomes inf) ...
      REQUIRE((back & 0x8000u) == (h & 0x8000u));
      REQUIRE((back & 0x0040u) != 0);  // ... and comes back quiet
    } else {
      REQUIRE(back == h);
      REQUIRE(BFloat16(f).bits == h);
      REQUIRE(fbits(static_cast<float>(BFloat16::from_bits(h))) == fbits(f));
    }
  }
}

TEST_CASE("bf16: rounding of the low 16 bits, exhaustively for chosen upper halves", "[half]") {
  // For each upper half, all 65536 lower halves: every rounding situation
  // (below/at/above the midpoint, odd and even significands, carries into
  // the exponent, overflow to inf, subnormals, both signs).
  const std::vector<uint32_t> uppers = {0x0000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0x3fff, 0x4000,
                                        0x7f7e, 0x7f7f, 0x8000, 0x8001, 0xbf80, 0xbf81, 0xff7f, 0x4b7f};
  for (uint32_t hi : uppers) {
    int64_t bad = 0;
    for (uint32_t lo = 0; lo <= 0xffffu; ++lo) {
      const float f = bfloat((hi << 16) | lo);
      const uint16_t got = float_to_bfloat16_bits(f), want = ref_float_to_bf16(f);
      if (!same_bf16(got, want) && bad++ < 3)
        UNSCOPED_INFO(fmt::format("float 0x{:08x}: got 0x{:04x}, expected 0x{:04x}", (hi << 16) | lo, got, want));
    }
    INFO(fmt::format("upper half 0x{:04x}", hi));
    CHECK(bad == 0);
  }
}

TEST_CASE("bf16: float -> bf16 over a sweep of all float32 bit patterns", "[half]") {
  std::mt19937_64 gen(11);
  int64_t bad = 0, n = 0;
  auto check_one = [&](uint32_t u) {
    const float f = bfloat(u);
    const uint16_t got = float_to_bfloat16_bits(f), want = ref_float_to_bf16(f);
    ++n;
    if (!same_bf16(got, want) && bad++ < 5)
      UNSCOPED_INFO(fmt::format("float 0x{:08x}: got 0x{:04x}, expected 0x{:04x}", u, got, want));
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 257) check_one(static_cast<uint32_t>(u));
  for (int i = 0; i < 1000000; ++i) check_one(static_cast<uint32_t>(gen()));
  CHECK(n > 17000000);
  CHECK(bad == 0);
}

TEST_CASE("bf16: named cases (max 0x7f7f, overflow, ties to even, NaN, signed zero)", "[half]") {
  struct Case {
    uint32_t in;  // float bits
    uint16_t bits;
  };
  const std::vector<Case> cases = {
      {0x00000000, 0x0000}, {0x80000000, 0x8000},  // +-0
      {0x3f800000, 0x3f80},                        // 1
      {0x3f808000, 0x3f80},                        // 1 + 2^-8: tie, even 0x3f80 stays
      {0x3f808001, 0x3f81},                        // just above the tie
      {0x3f807fff, 0x3f80},                        // just below
      {0x3f818000, 0x3f82},                        // tie with odd 0x3f81: up to even 0x3f82
      {0x3fff8000, 0x4000},                        // tie that carries into the exponent
      {0x7f7f0000, 0x7f7f},                        // largest finite bf16: 3.3895314e38
      {0x7f7f7fff, 0x7f7f},                        // below the midpoint to 2^128
      {0x7f7f8000, 0x7f80},                        // the midpoint: odd 0x7f7f -> "2^128" = inf
      {0x7f7fffff, 0x7f80},                        // FLT_MAX overflows to inf
      {0xff7fffff, 0xff80},
      {0x7f800000, 0x7f80}, {0xff800000, 0xff80},  // +-inf
      {0x00000001, 0x0000},                        // smallest float subnormal rounds to 0
      {0x00008000, 0x0000},                        // tie, even 0
      {0x00018000, 0x0002},                        // tie, odd 1 -> 2
      {0x00010000, 0x0001},                        // smallest bf16 subnormal
      {0x807fffff, 0x8080},                        // largest negative float subnormal rounds up to -2^-126
  };
  for (const auto& c : cases) {
    const float f = bfloat(c.in);
    INFO(fmt::format("float 0x{:08x} ({:.9g}): got 0x{:04x}, expected 0x{:04x}", c.in, f, float_to_bfloat16_bits(f),
                     c.bits));
    CHECK(float_to_bfloat16_bits(f) == c.bits);
    CHECK(ref_float_to_bf16(f) == c.bits);
  }
  CHECK(static_cast<float>(BFloat16::from_bits(0x7f7f)) == 3.3895313892515355e38f);
  for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = float_to_bfloat16_bits(bfloat(nan_bits));
    INFO(fmt::format("NaN 0x{:08x} -> 0x{:04x}", nan_bits, b));
    CHECK(bf16_is_nan(b));  // 0x7f80ffff must not round to inf or carry into the sign
    CHECK((b >> 15) == (nan_bits >> 31));
  }
}

TEST_CASE("bf16: tensor casts from float32 (the vector paths) round every pattern like the reference", "[half][tensor]") {
  // The cast kernel's vectorised loop (AVX-512/AVX2 clones) against the
  // reference and the scalar conversion: every lower half of chosen upper
  // halves (subnormals, NaN payloads, ties, overflow), then a sweep of all
  // patterns; an odd count leaves a scalar tail.
  std::vector<uint32_t> patterns;
  for (uint32_t hi : {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x3f81u, 0x7f7fu, 0x7f80u, 0x7fffu, 0x8001u, 0xff80u})
    for (uint32_t lo = 0; lo <= 0xffffu; ++lo) patterns.push_back((hi << 16) | lo);
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) patterns.push_back(static_cast<uint32_t>(u));
  patterns.push_back(0x00000001u);
  std::vector<float> in(patterns.size());
  std::memcpy(in.data(), patterns.data(), patterns.size() * sizeof(float));
  const auto got = hgtest::bits16(halfgrad::tensor(in).to(halfgrad::bfloat16));
  int64_t bad = 0, not_scalar = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!same_bf16(got[i], ref_float_to_bf16(in[i])) && bad++ < 5)
      UNSCOPED_INFO(fmt::format("float 0x{:08x}: got 0x{:04x}, expected 0x{:04x}", patterns[i], got[i],
                                ref_float_to_bf16(in[i])));
    not_scalar += got[i] != float_to_bfloat16_bits(in[i]);  // NaN payloads too: the bits of the scalar path
  }
  CHECK(in.size() % 16 != 0);
  CHECK(bad == 0);
  CHECK(not_scalar == 0);
}

TEST_CASE("fp16/bf16: tensor casts from float32 round like the scalar conversions", "[half][tensor]") {
  using namespace halfgrad;
  const std::vector<float> in = {65504.f, 65519.f, 65520.f, -65520.f, 1e-8f, -0.f, 1.f + std::ldexp(1.f, -11),
                                 std::ldexp(1.f, -24), 0.1f, 3.3895313892515355e38f, INFINITY};
  const Tensor t = halfgrad::tensor(in);
  const Tensor h = t.to(float16), b = t.to(bfloat16);
  const auto hb = hgtest::bits16(h), bb = hgtest::bits16(b);
  for (size_t i = 0; i < in.size(); ++i) {
    INFO(fmt::format("value {:.9g}", in[i]));
    CHECK(hb[i] == float_to_half_bits(in[i]));
    CHECK(hb[i] == ref_float_to_half(in[i]));
    CHECK(bb[i] == ref_float_to_bf16(in[i]));
  }
  // and back: every half and bf16 value widens exactly
  const auto hv = hgtest::values(h.to(float32)), bv = hgtest::values(b.to(float32));
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK(fbits(static_cast<float>(hv[i])) == fbits(half_bits_to_float(hb[i])));
    CHECK(fbits(static_cast<float>(bv[i])) == fbits(bfloat16_bits_to_float(bb[i])));
  }
}
