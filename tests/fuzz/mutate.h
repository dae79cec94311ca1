#pragma once
// The in-suite fuzzers (tests/data/test_idx_fuzz.cpp, tests/optim/
// test_checkpoint_fuzz.cpp): seeded byte-level mutations of a valid file, each
// fed to a reader that must answer with a result or a halfgrad::Error, never a
// crash, a hang or another exception. They build with g++ and run in every
// suite, the sanitizer one included (CI: scripts/test --sanitize), where an
// out-of-bounds read or a leak fails them; libFuzzer (clang) drives only the
// safetensors parser (tests/fuzz/safetensors_fuzz.cpp), which stands alone.
//
// Budget: a fixed number of inputs per run (same inputs every run, from
// HALFGRAD_FUZZ_SEED, default 1), or HALFGRAD_FUZZ_SECONDS=N for a longer
// run of N seconds (docs/training.md, "Hostile files").
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>

namespace hgfuzz {

inline uint64_t seed() {
  const char* s = std::getenv("HALFGRAD_FUZZ_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 1;
}

inline double seconds_budget() {
  const char* s = std::getenv("HALFGRAD_FUZZ_SECONDS");
  return s ? std::strtod(s, nullptr) : 0.0;
}

// 1 to 4 stacked edits of `in`: the kinds of damage a hostile or broken file
// has (flipped bits, sizes and counts set to extremes, cuts, repeats, junk).
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string operator()(std::string s) {
    const int edits = 1 + static_cast<int>(below(4));
    for (int e = 0; e < edits; ++e) edit(s);
    return s;
  }

 private:
  std::mt19937_64 rng_;

  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }

  // Values at the edges of the integer types a reader converts.
  uint64_t extreme() {
    static constexpr uint64_t values[] = {0,          1,          2,          7,           8,
                                          0x7f,       0x80,       0xff,       0x7fff,      0xffff,
                                          0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0x7fffffffffffffff,
                                          0x8000000000000000,     0xffffffffffffffff};
    return values[below(std::size(values))];
  }

  void put(std::string& s, size_t at, uint64_t v, int bytes, bool big_endian) {
    for (int i = 0; i < bytes && at + i < s.size(); ++i) {
      const int shift = 8 * (big_endian ? bytes - 1 - i : i);
      s[at + i] = static_cast<char>((v >> shift) & 0xff);
    }
  }

  void edit(std::string& s) {
    const size_t n = s.size();
    const size_t at = below(n + 1);
    switch (below(9)) {
      case 0:  // one bit
        if (n) s[at % n] = static_cast<char>(s[at % n] ^ (1 << below(8)));
        break;
      case 1:  // one byte at an extreme
        if (n) s[at % n] = static_cast<char>(extreme());
        break;
      case 2:  // a 32-bit size or count, big-endian (IDX) or little-endian
        put(s, at, extreme(), 4, below(2) == 0);
        break;
      case 3:  // a 64-bit one, little-endian (safetensors' header length)
        put(s, at, extreme(), 8, false);
        break;
      case 4:  // cut the rest
        s.resize(at);
        break;
      case 5:  // drop a piece
        s.erase(at, 1 + below(64));
        break;
      case 6: {  // repeat a piece
        const std::string piece = s.substr(at, 1 + below(64));
        s.insert(at, piece);
        break;
      }
      case 7: {  // junk
        std::string junk(1 + below(16), '\0');
        for (char& c : junk) c = static_cast<char>(rng_());
        s.insert(at, junk);
        break;
      }
      default: {  // a decimal number in text (JSON) set to an extreme or negative
        const size_t d = s.find_first_of("0123456789", at);
        if (d == std::string::npos) break;
        const size_t end = s.find_first_not_of("0123456789", d);
        const std::string v = below(2) ? std::to_string(extreme()) : "-" + std::to_string(extreme());
        s.replace(d, (end == std::string::npos ? s.size() : end) - d, v);
        break;
      }
    }
  }
};

// Runs f(i) for i = 0, 1, ... `inputs` times, or for HALFGRAD_FUZZ_SECONDS
// when that is set; returns how many ran.
template <typename F>
int64_t loop(int64_t inputs, F&& f) {
  const double budget = seconds_budget();
  const auto start = std::chrono::steady_clock::now();
  int64_t i = 0;
  for (;; ++i) {
    if (budget > 0) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= budget) break;
    } else if (i >= inputs) {
      break;
    }
    f(i);
  }
  return i;
}

}  // namespace hgfuzz
