// Stochastic rounding and the other low-precision optimizer options
// (optim/low_precision.h): the rounding function bit by bit, the lost-update
// case, reproducibility, state dicts, the GradScaler's skipped step, and the
// CUDA kernels against the CPU loops bit for bit ([cuda]).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <halfgrad.h>
#include <halfgrad/optim/low_precision_impl.h>
#include <halfgrad/optim/stochastic_rounding.h>

#include "test_util.h"

namespace hg = halfgrad;
namespace sr = halfgrad::optim::sr;
namespace math = halfgrad::optim::math;
using Catch::Matchers::Contains;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Uniform in [-1, 1) from the global generator (hg::manual_seed repeats it).
hg::Tensor rnd(const hg::Shape& shape) { return hg::rand(shape) * 2.0 - 1.0; }
double bf16(uint16_t b) { return static_cast<float>(hg::BFloat16::from_bits(b)); }
double f16(uint16_t b) { return static_cast<float>(hg::Half::from_bits(b)); }

}  // namespace

TEST_CASE("SR to bfloat16: representable values stay, the threshold is exact", "[optim][sr]") {
  for (float x : {0.0f, -0.0f, 1.0f, -1.5f, 0.00390625f, 3.0e38f, 1e-40f}) {
    const float v = static_cast<float>(hg::BFloat16(x));  // a bfloat16 value
    for (uint32_t r : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu})
      CHECK(sr::bfloat16_bits(v, static_cast<uint16_t>(r)) == hg::BFloat16(v).bits);
  }
  // x = 1 + f/2^16 of the gap above 1 (bfloat16 0x3F80 -> 0x3F81); negative
  // values round away from zero alike.
  for (uint32_t f : {1u, 2u, 0x1234u, 0x8000u, 0xfffeu, 0xffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = from_bits(sign | 0x3F800000u | f);
      const uint16_t lo = static_cast<uint16_t>((sign >> 16) | 0x3F80u);
      INFO("fraction " << f << " sign " << sign);
      CHECK(sr::bfloat16_bits(x, static_cast<uint16_t>(f - 1)) == lo + 1);  // r < f: away from zero
      CHECK(sr::bfloat16_bits(x, static_cast<uint16_t>(f)) == lo);          // r = f: toward zero
      CHECK(sr::bfloat16_bits(x, 0) == lo + 1);
      CHECK(sr::bfloat16_bits(x, 0xffff) == lo);
    }
  }
  // Across a binade: just below 2, the neighbour away from zero is 2.
  CHECK(bf16(sr::bfloat16_bits(from_bits(0x3FFF8001u), 0)) == 2.0);
}

TEST_CASE("SR to float16: the threshold is exact, normals and subnormals", "[optim][sr]") {
  // 1 + k 2^-23: float16's gap above 1 is 2^-10 = 2^13 float ulps, so the
  // fraction is k / 2^13 and the threshold k * 8.
  for (uint32_t k : {1u, 7u, 1000u, 4096u, 8191u}) {
    const float x = from_bits(0x3F800000u + k);
    CHECK(sr::half_bits(x, static_cast<uint16_t>(8 * k - 1)) == 0x3C01);
    CHECK(sr::half_bits(x, static_cast<uint16_t>(8 * k)) == 0x3C00);
    CHECK(sr::half_bits(-x, 0) == 0xBC01);
  }
  // A subnormal float16 region: 2.25 * 2^-24 lies between 2^-24 x {2, 3}.
  const float s = 2.25f * std::ldexp(1.0f, -24);
  CHECK(sr::half_bits(s, 0x3fff) == 3);  // r < 0.25 * 2^16
  CHECK(sr::half_bits(s, 0x4000) == 2);
  // Below the smallest subnormal: 0 or 2^-24.
  const float tiny = 0.5f * std::ldexp(1.0f, -24);
  CHECK(sr::half_bits(tiny, 0x7fff) == 1);
  CHECK(sr::half_bits(tiny, 0x8000) == 0);
  // Representable values stay, whatever the bits.
  for (float v : {1.0f, -2.5f, 65504.0f, 0.0f, std::ldexp(1.0f, -24), std::ldexp(3.0f, -20)})
    for (uint32_t r : {0u, 0xffffu}) CHECK(sr::half_bits(v, static_cast<uint16_t>(r)) == hg::Half(v).bits);
  // Past the largest finite 65504 (gap 32): inf with the fraction's probability.
  CHECK(sr::half_bits(65520.0f, 0x7fff) == 0x7C00);
  CHECK(sr::half_bits(65520.0f, 0x8000) == 0x7BFF);
  CHECK(sr::half_bits(70000.0f, 0xffff) == 0x7C00);
}

TEST_CASE("SR passes NaN and inf through", "[optim][sr]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (uint32_t r : {0u, 0x8000u, 0xffffu}) {
    const auto b = static_cast<uint16_t>(r);
    CHECK(sr::bfloat16_bits(inf, b) == 0x7F80);
    CHECK(sr::bfloat16_bits(-inf, b) == 0xFF80);
    CHECK(std::isnan(bf16(sr::bfloat16_bits(nan, b))));
    CHECK(std::isnan(bf16(sr::bfloat16_bits(from_bits(0x7F800001u), b))));  // payload only in the low bits
    CHECK(sr::half_bits(inf, b) == 0x7C00);
    CHECK(sr::half_bits(-inf, b) == 0xFC00);
    CHECK(std::isnan(f16(sr::half_bits(nan, b))));
  }
}

TEST_CASE("SR is unbiased: exactly over all 2^16 bits, statistically over Philox's", "[optim][sr]") {
  // Every r once: round-up happens for exactly f of the 2^16 values, so the
  // mean is lo + f / 2^16 * gap = x, exactly (sums of dyadic values in double).
  for (float x : {1.0001f, -0.3333f, 7.77e-5f, 1e-39f}) {
    double sum_b = 0, sum_h = 0;
    for (uint32_t r = 0; r < 65536; ++r) {
      sum_b += bf16(sr::bfloat16_bits(x, static_cast<uint16_t>(r)));
      sum_h += f16(sr::half_bits(x, static_cast<uint16_t>(r)));
    }
    CHECK(sum_b / 65536 == static_cast<double>(x));
    if (std::fabs(x) >= std::ldexp(1.0f, -24)) CHECK(sum_h / 65536 == static_cast<double>(x));
  }
  // Philox's bits: N roundings of x = 1 + 0.3 gap. Each is lo or lo + gap,
  // a Bernoulli(0.3) times the gap: the mean's standard deviation is
  // gap sqrt(0.3 * 0.7 / N); allow 5 of them.
  const float x = 1.0f + 0.3f * 0.0078125f;  // bfloat16's gap above 1 is 2^-7
  constexpr int kN = 200000;
  const sr::Key key{0x1234abcdULL, 3, 17};
  double sum = 0;
  for (int i = 0; i < kN; ++i) sum += bf16(sr::bfloat16_bits(x, sr::bits(key, static_cast<uint64_t>(i))));
  const double sd = 0.0078125 * std::sqrt(0.3 * 0.7 / kN);
  CHECK(std::fabs(sum / kN - x) < 5 * sd);
}

TEST_CASE("SR bits: 8 elements per Philox call, distinct per parameter and step", "[optim][sr]") {
  const sr::Key a{42, 0, 1}, b{42, 1, 1}, c{42, 0, 2}, d{43, 0, 1};
  const hg::philox::Words w = sr::words(a, 5);
  for (uint64_t i = 40; i < 48; ++i) CHECK(sr::bits(a, i) == sr::pick(w, i));
  int same_b = 0, same_c = 0, same_d = 0;
  for (uint64_t i = 0; i < 256; ++i) {
    same_b += sr::bits(a, i) == sr::bits(b, i);
    same_c += sr::bits(a, i) == sr::bits(c, i);
    same_d += sr::bits(a, i) == sr::bits(d, i);
  }
  // Independent 16-bit draws agree with probability 2^-16 each.
  CHECK(same_b <= 2);
  CHECK(same_c <= 2);
  CHECK(same_d <= 2);
}

namespace {

// A bfloat16 vector of n ones, SGD on loss = sum(w) (gradient 1) with lr 1e-4, `steps` times.
hg::Tensor lost_update_run(const hg::optim::SGDOptions& o, int64_t n, int steps, hg::DType dtype = hg::bfloat16) {
  auto w = hg::ones({n}, dtype).requires_grad_();
  hg::optim::SGD opt({w}, o);
  for (int i = 0; i < steps; ++i) {
    w.set_grad(hg::ones({n}, dtype));
    opt.step();
  }
  return w.detach();
}

}  // namespace

TEST_CASE("Lost updates: bfloat16 round-to-nearest stays, SR and master weights reach 0.9", "[optim][sr]") {
  constexpr int kSteps = 1000;
  constexpr double kLr = 1e-4;
  hg::manual_seed(5);
  // Round to nearest (PyTorch's behaviour): 1 - 1e-4 is within half a gap (2^-9) of 1.
  const hg::Tensor rtn = lost_update_run({.lr = kLr}, 4, kSteps);
  for (double v : hgtest::values(rtn)) CHECK(v == 1.0);

  // Master weights: the float32 copy accumulates; the parameter is its
  // bfloat16 rounding, within half a gap (2^-9 below 1) of 0.9.
  auto w = hg::ones({4}, hg::bfloat16).requires_grad_();
  hg::optim::SGD master_opt({w}, {.lr = kLr, .master_weights = true});
  for (int i = 0; i < kSteps; ++i) {
    w.set_grad(hg::ones({4}, hg::bfloat16));
    master_opt.step();
  }
  const hg::Tensor master = master_opt.state(w)->lp.master_param;
  REQUIRE(master.dtype() == hg::float32);
  for (double v : hgtest::values(master)) CHECK(std::fabs(v - 0.9) < 2e-5);  // float32's own drift (lesson 2)
  for (double v : hgtest::values(w)) CHECK(std::fabs(v - 0.9) <= std::ldexp(1.0, -9));
  CHECK(hgtest::same_bits(w.detach(), master.to(hg::bfloat16)));

  // SR: each step is unbiased, so E[w] = 0.9. From a bfloat16 value w the step
  // goes to w - gap (gap = 2^-8 below 1) with probability q = 1e-4 / gap and
  // stays otherwise: variance q (1 - q) gap^2 <= 1e-4 * gap per step, 1000
  // steps: sd <= sqrt(0.1 * 2^-8) = 0.0198 for one weight. Over 4096
  // independent weights the mean's sd is 0.0198 / 64 = 3.1e-4: allow 5 sd;
  // and every weight moved (one that stays put has probability (1 - q)^1000 ~ 1e-11).
  constexpr int64_t kN = 4096;
  const hg::Tensor srw = lost_update_run({.lr = kLr, .stochastic_rounding = true}, kN, kSteps);
  const auto v = hgtest::values(srw);
  double sum = 0, worst = 0;
  for (double x : v) {
    sum += x;
    worst = std::max(worst, std::fabs(x - 0.9));
  }
  const double sd1 = std::sqrt(0.1 * std::ldexp(1.0, -8));
  INFO("SR mean " << sum / kN << ", largest |w - 0.9| " << worst);
  CHECK(std::fabs(sum / kN - 0.9) < 5 * sd1 / 64);
  CHECK(worst < 6 * sd1);
  CHECK(worst > 0.0);  // the weights do differ from each other (independent streams)
  for (double x : v) REQUIRE(x < 1.0);

  // float16 alike (gap 2^-11 below 1: also a lost update under round to nearest).
  CHECK(hgtest::values(lost_update_run({.lr = kLr}, 4, 200, hg::float16))[0] == 1.0);
  const auto h = hgtest::values(lost_update_run({.lr = kLr, .stochastic_rounding = true}, kN, 200, hg::float16));
  double hs = 0;
  for (double x : h) hs += x;
  // 200 steps: E = 0.98; per-weight variance <= 200 * 1e-4 * 2^-11, over 4096 weights: allow 5 sd.
  CHECK(std::fabs(hs / kN - 0.98) < 5 * std::sqrt(200 * 1e-4 * std::ldexp(1.0, -11)) / 64);
}

TEST_CASE("The low-precision CPU loop draws element i's bits as sr::bits(key, i), across chunks", "[optim][sr]") {
  // 5 chunks and a ragged tail, parallel: the per-8 Philox words restart at
  // each chunk. Plain SGD, no weight decay: p = SR(p - lr * g) elementwise.
  constexpr int64_t kN = 16384 * 5 + 13;
  hg::Tensor p = rnd({kN}).to(hg::bfloat16);
  hg::Tensor g = rnd({kN}).to(hg::bfloat16);
  const hg::Tensor p0 = p.clone();
  const sr::Key key{0xfeedULL, 9, 3};
  const math::SGDHyper h{0.01f, 0.f, 1.f, 0.f, false, true};
  hg::optim::fused::sgd_low_precision(p, g, hg::Tensor(), hg::Tensor(), 1.0f, h, math::Rounding::Stochastic, key);
  const auto got = hgtest::bits16(p), start = hgtest::bits16(p0), grad = hgtest::bits16(g);
  int64_t bad = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const float x = static_cast<float>(hg::BFloat16::from_bits(start[i])) -
                    0.01f * static_cast<float>(hg::BFloat16::from_bits(grad[i]));
    bad += got[i] != sr::bfloat16_bits(x, sr::bits(key, static_cast<uint64_t>(i)));
  }
  CHECK(bad == 0);
}

TEST_CASE("Stochastic rounding is reproducible from hg::manual_seed", "[optim][sr]") {
  auto run = [](uint64_t seed) {
    hg::manual_seed(seed);
    hg::Tensor w = rnd({300}).to(hg::bfloat16).requires_grad_();
    hg::optim::AdamW opt({w}, {.lr = 1e-3, .stochastic_rounding = true, .state_dtype = hg::float32});
    for (int i = 0; i < 5; ++i) {
      w.set_grad(hg::full({300}, 0.01 * (i + 1), hg::bfloat16));
      opt.step();
    }
    return w.detach();
  };
  const hg::Tensor a = run(11), b = run(11), c = run(12);
  CHECK(hgtest::same_bits(a, b));
  // Another seed: other initial weights too, so compare the stream itself.
  CHECK_FALSE(hgtest::same_bits(a, c));
  hg::manual_seed(11);
  const uint64_t s1 = hg::optim::low_precision::draw_seed();
  hg::manual_seed(12);
  CHECK(hg::optim::low_precision::draw_seed() != s1);
}

TEST_CASE("Without stochastic rounding the optimizer draws no seed", "[optim][sr]") {
  // An optimizer without SR leaves the global generator's stream as it was.
  hg::manual_seed(3);
  const hg::Tensor a = hg::rand({4});
  hg::manual_seed(3);
  hg::Tensor w = hg::ones({4}, hg::bfloat16).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 0.1, .master_weights = true});
  CHECK(hgtest::same_bits(hg::rand({4}), a));
}

TEST_CASE("Low-precision options on float32 parameters change nothing", "[optim][sr]") {
  auto run = [](const hg::optim::AdamOptions& o) {
    hg::manual_seed(2);
    hg::Tensor w = rnd({50}).requires_grad_();
    hg::optim::Adam opt({w}, o);
    for (int i = 0; i < 3; ++i) {
      w.set_grad(hg::full({50}, 0.5, hg::float32));
      opt.step();
    }
    return w.detach();
  };
  const hg::Tensor plain = run({.lr = 0.01});
  CHECK(hgtest::same_bits(run({.lr = 0.01, .stochastic_rounding = true}), plain));
  CHECK(hgtest::same_bits(run({.lr = 0.01, .master_weights = true, .state_dtype = hg::bfloat16}), plain));
}

TEST_CASE("Low-precision options: errors", "[optim][sr]") {
  hg::Tensor w = hg::ones({2}, hg::bfloat16).requires_grad_();
  CHECK_THROWS_WITH(hg::optim::SGD({w}, {.lr = 0.1, .master_weights = true, .stochastic_rounding = true}),
                    Contains("master_weights and stochastic_rounding are both set"));
  CHECK_THROWS_WITH(hg::optim::AdamW({w}, {.lr = 0.1, .master_weights = true, .stochastic_rounding = true}),
                    Contains("choose one"));
  CHECK_THROWS_WITH(hg::optim::Adam({w}, {.lr = 0.1, .state_dtype = hg::int64}), Contains("state_dtype int64"));
  hg::Tensor h = hg::ones({2}, hg::float16).requires_grad_();
  hg::optim::Adam opt({h}, {.lr = 0.1, .stochastic_rounding = true, .state_dtype = hg::bfloat16});
  h.set_grad(hg::ones({2}, hg::float16));
  CHECK_THROWS_WITH(opt.step(), Contains("the state of a float16 parameter is float32 or float16"));
}

namespace {

struct Model {
  hg::Tensor a, b;  // two bfloat16 parameters, in two groups
};
Model make_model() {
  return {rnd({40}).to(hg::bfloat16).requires_grad_(),
          rnd({7, 3}).to(hg::bfloat16).requires_grad_()};
}
void set_grads(const Model& m, int step, double scale = 1.0) {
  m.a.set_grad((hg::full({40}, 0.003 * scale * (step % 3 - 1)) + hg::arange(40, hg::float32) * (1e-5 * scale)).to(hg::bfloat16));
  m.b.set_grad(hg::full({7, 3}, -0.002 * scale * (step + 1), hg::bfloat16));
}

template <typename Opt>
std::unique_ptr<Opt> make_opt(const Model& m, const typename Opt::Options& o) {
  auto opt = std::make_unique<Opt>(std::vector<hg::Tensor>{m.a}, o);
  auto o2 = o;
  o2.lr = o.lr * 0.5;
  opt->add_param_group({m.b}, o2);
  return opt;
}

// Train 3 steps, save (state dict, or a file), train 3 more -> A; a fresh
// optimizer built after another seed on the saved weights loads it and
// trains the same 3 -> B; A == B bit for bit.
template <typename Opt>
void check_round_trip(const typename Opt::Options& o, bool through_file) {
  hg::manual_seed(21);
  Model m = make_model();
  auto opt = make_opt<Opt>(m, o);
  for (int i = 0; i < 3; ++i) {
    set_grads(m, i);
    opt->step();
  }
  const hg::Tensor a0 = m.a.detach().clone(), b0 = m.b.detach().clone();
  const auto sd = opt->state_dict();
  const std::string file = (std::filesystem::temp_directory_path() / "hg_sr_round_trip.safetensors").string();
  if (through_file) hg::save(*opt, file);
  for (int i = 3; i < 6; ++i) {
    set_grads(m, i);
    opt->step();
  }

  hg::manual_seed(99);  // another seed: only a loaded stream gives the same bits
  Model m2{a0.clone().requires_grad_(), b0.clone().requires_grad_()};
  auto opt2 = make_opt<Opt>(m2, o);
  if (through_file) hg::load(*opt2, file);
  else opt2->load_state_dict(sd);
  for (int i = 3; i < 6; ++i) {
    set_grads(m2, i);
    opt2->step();
  }
  CHECK(hgtest::same_bits(m2.a, m.a));
  CHECK(hgtest::same_bits(m2.b, m.b));
  if (through_file) std::filesystem::remove(file);
}

}  // namespace

TEST_CASE("Low-precision optimizer state round trip resumes bit for bit", "[optim][sr]") {
  const bool file = GENERATE(false, true);
  check_round_trip<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9, .stochastic_rounding = true}, file);
  check_round_trip<hg::optim::SGD>({.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .master_weights = true,
                                    .state_dtype = hg::float32},
                                   file);
  check_round_trip<hg::optim::AdamW>({.lr = 1e-2, .stochastic_rounding = true, .state_dtype = hg::float32}, file);
  check_round_trip<hg::optim::Adam>({.lr = 1e-2, .amsgrad = true, .stochastic_rounding = true}, file);

  // What the state dict holds.
  hg::manual_seed(4);
  Model m = make_model();
  auto opt = make_opt<hg::optim::AdamW>(m, {.lr = 1e-2, .stochastic_rounding = true, .state_dtype = hg::float32});
  set_grads(m, 0);
  opt->step();
  const auto sd = opt->state_dict();
  CHECK(sd.param_groups[0].options.at("stochastic_rounding") == 1.0);
  CHECK(sd.param_groups[0].options.at("state_dtype") == 1.0);
  CHECK(sd.param_groups[0].options.count("master_weights") == 0);  // defaults are not written
  const auto& s0 = sd.state.at(0);
  CHECK(s0.at("exp_avg").dtype() == hg::float32);
  CHECK(s0.at("sr_seed").dtype() == hg::int64);
  CHECK(s0.at("sr_step").item<float>() == 1.0f);
  CHECK(s0.count("master_param") == 0);
  auto master = make_opt<hg::optim::SGD>(m, {.lr = 0.1, .master_weights = true});
  set_grads(m, 1);
  master->step();
  CHECK(master->state_dict().state.at(1).at("master_param").dtype() == hg::float32);
  // A state dict without the new options (PyTorch's) loads as the defaults.
  auto plain = make_opt<hg::optim::SGD>(m, {.lr = 0.1});
  auto loaded_into = make_opt<hg::optim::SGD>(m, {.lr = 0.1, .stochastic_rounding = true});
  loaded_into->load_state_dict(plain->state_dict());
  CHECK_FALSE(loaded_into->param_groups()[0].options.stochastic_rounding);
}

TEST_CASE("A step the GradScaler skips changes nothing under SR and master weights", "[optim][sr]") {
  using O = hg::optim::AdamWOptions;
  const O o = GENERATE(O{.lr = 1e-2, .stochastic_rounding = true}, O{.lr = 1e-2, .master_weights = true},
                       O{.lr = 1e-2, .stochastic_rounding = true, .state_dtype = hg::float32});
  const hg::Tensor clean = hg::zeros({}), inf = hg::ones({}), inv = hg::full({}, 0.25);
  // A: steps 0, 1, a skipped one, 2. B: steps 0, 1, 2. Same bits.
  auto run = [&](bool with_skip) {
    hg::manual_seed(8);
    Model m = make_model();
    auto opt = make_opt<hg::optim::AdamW>(m, o);
    for (int i = 0; i < 3; ++i) {
      if (i == 2 && with_skip) {
        set_grads(m, 7, 4.0);
        const hg::Tensor a = m.a.detach().clone();
        const auto before = opt->state_dict();
        opt->step(hg::amp::ScalerStep{inf, inv});
        CHECK(hgtest::same_bits(m.a, a));
        const auto after = opt->state_dict();
        for (const auto& [k, t] : before.state.at(0)) CHECK(hgtest::same_bits(after.state.at(0).at(k), t));
      }
      set_grads(m, i, 4.0);  // scaled by 4: inv_scale unscales
      opt->step(hg::amp::ScalerStep{clean, inv});
    }
    return m;
  };
  const Model a = run(true), b = run(false);
  CHECK(hgtest::same_bits(a.a, b.a));
  CHECK(hgtest::same_bits(a.b, b.b));
}

// ---- CUDA against the CPU, bit for bit ------------------------------------------

namespace {

template <typename Opt>
void check_cuda_matches_cpu(const typename Opt::Options& o, hg::DType dtype, bool with_scaler) {
  const hg::Device cuda = hg::Device::cuda();
  hg::manual_seed(31);
  const hg::Tensor init = rnd({5000}).to(dtype);
  hg::Tensor wc = init.clone().requires_grad_(), wg = init.to(cuda).requires_grad_();
  hg::manual_seed(32);  // both optimizers draw the same SR seed
  Opt cpu_opt({wc}, o);
  hg::manual_seed(32);
  Opt gpu_opt({wg}, o);
  for (int i = 0; i < 6; ++i) {
    const hg::Tensor g = (rnd({5000}) * (with_scaler ? 64.0 : 1.0)).to(dtype);
    wc.set_grad(g.clone());
    wg.set_grad(g.to(cuda));
    const bool skip = with_scaler && i == 3;
    const hg::Tensor flag = hg::full({}, skip ? 1.0 : 0.0), inv = hg::full({}, 1.0 / 64);
    if (with_scaler) {
      cpu_opt.step(hg::amp::ScalerStep{flag, inv});
      gpu_opt.step(hg::amp::ScalerStep{flag.to(cuda), inv.to(cuda)});
    } else {
      cpu_opt.step();
      gpu_opt.step();
    }
    INFO("step " << i);
    REQUIRE(hgtest::same_bits(wg, wc));
    if (with_scaler) CHECK(hgtest::same_bits(wg.grad(), wc.grad()));
  }
  // The state saved from the device equals the host's.
  const auto a = cpu_opt.state_dict(), b = gpu_opt.state_dict();
  for (const auto& [k, t] : a.state.at(0)) {
    INFO(k);
    CHECK(hgtest::same_bits(b.state.at(0).at(k), t));
  }
}

}  // namespace

TEST_CASE("Low-precision CUDA kernels match the CPU loops bit for bit", "[optim][sr][cuda]") {
  const bool scaler = GENERATE(false, true);
  check_cuda_matches_cpu<hg::optim::SGD>({.lr = 0.01, .momentum = 0.9, .stochastic_rounding = true}, hg::bfloat16,
                                         scaler);
  check_cuda_matches_cpu<hg::optim::SGD>(
      {.lr = 0.01, .momentum = 0.9, .dampening = 0.1, .stochastic_rounding = true, .state_dtype = hg::float32},
      hg::bfloat16, scaler);
  check_cuda_matches_cpu<hg::optim::SGD>({.lr = 0.01, .weight_decay = 1e-3, .master_weights = true}, hg::float16,
                                         scaler);
  check_cuda_matches_cpu<hg::optim::AdamW>({.lr = 1e-3, .stochastic_rounding = true, .state_dtype = hg::float32},
                                           hg::bfloat16, scaler);
  check_cuda_matches_cpu<hg::optim::Adam>({.lr = 1e-3, .amsgrad = true, .stochastic_rounding = true}, hg::float16,
                                          scaler);
  check_cuda_matches_cpu<hg::optim::AdamW>({.lr = 1e-3, .master_weights = true}, hg::bfloat16, scaler);
  check_cuda_matches_cpu<hg::optim::Adam>({.lr = 1e-3, .state_dtype = hg::float32}, hg::bfloat16, scaler);
}

TEST_CASE("Low-precision state moves between CPU and CUDA and resumes", "[optim][sr][cuda]") {
  // Two steps on the CPU, two on CUDA (Module::to; the state follows), against four on the CPU.
  struct One : hg::nn::Module {
    hg::Tensor w;
    One() {
      w = rnd({3000}).to(hg::bfloat16).requires_grad_();
      register_parameter("w", w);
    }
  };
  auto run = [&](bool move) {
    hg::manual_seed(41);
    One m;
    hg::optim::AdamW opt(m.parameters(), {.lr = 1e-3, .stochastic_rounding = true, .state_dtype = hg::float32});
    for (int i = 0; i < 4; ++i) {
      if (move && i == 2) m.to(hg::Device::cuda());
      m.w.set_grad(hg::full({3000}, 0.01 * (i + 1), hg::bfloat16).to(m.w.device()));
      opt.step();
    }
    return m.w.detach().cpu();
  };
  CHECK(hgtest::same_bits(run(true), run(false)));
}
