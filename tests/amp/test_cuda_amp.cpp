// AMP on a CUDA device: the loss scaler's kernels, the fused optimizers, and
// the proof that a whole AMP training step makes no host-device
// synchronisation: it is captured in a CUDA graph and replayed. A sync inside
// a capture (.item(), a device-to-host copy, cudaStreamSynchronize) is illegal:
// CUDA fails the call and invalidates the capture, so "the capture succeeded
// and the replays match the eager steps" is the no-sync property.
//
// Tagged [cuda]: CTest runs them with --require-cuda, which reports them
// skipped where no GPU can be used. The graph tests need the CUDA runtime API
// (HALFGRAD_WITH_CUDA builds link this suite with CUDA::cudart).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <halfgrad.h>

#include <halfgrad/amp/scaler_kernels.h>
#include <halfgrad/core/cuda/runtime.h>
#include "test_util.h"

#if HALFGRAD_WITH_CUDA
#include <cuda_runtime.h>

#include <halfgrad/core/cuda/check.h>
#include "cuda_graph.h"
#endif

#include "tutorial_mlp.h"

namespace hg = halfgrad;
using hg::amp::GradScaler;

namespace {

constexpr int64_t kChunk = 16384;  // elements per block of the multi-tensor kernels
const hg::Device kCuda = hg::Device::cuda();
const std::vector<hg::DType> kGradDTypes = {hg::float32, hg::float16, hg::bfloat16, hg::float64};

hg::Tensor host(const hg::Tensor& t) { return t.detach().cpu().contiguous(); }

using hgtest::same_bits;  // bitwise equality wherever the tensors live

// ||a - b|| / ||b|| in float64 on the host (NaN never passes).
double rel_err(const hg::Tensor& a, const hg::Tensor& b) {
  const hg::Tensor x = host(a).to(hg::float64), y = host(b).to(hg::float64);
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    num += (px[i] - py[i]) * (px[i] - py[i]);
    den += py[i] * py[i];
  }
  const double r = std::sqrt(num) / (den > 0 ? std::sqrt(den) : 1.0);
  return std::isnan(r) ? std::numeric_limits<double>::infinity() : r;
}

// Writes `v` into element i of a contiguous CPU tensor of any floating dtype.
void set_at(const hg::Tensor& t, int64_t i, double v) {
  void* p = t.data_ptr();
  switch (t.dtype()) {
    case hg::DType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case hg::DType::Float64: static_cast<double*>(p)[i] = v; break;
    case hg::DType::Float16: static_cast<hg::Half*>(p)[i] = hg::Half(static_cast<float>(v)); break;
    case hg::DType::BFloat16: static_cast<hg::BFloat16*>(p)[i] = hg::BFloat16(static_cast<float>(v)); break;
    default: FAIL("set_at: not a floating tensor");
  }
}

hg::Tensor scalar(double v, hg::Device device) { return hg::full({}, v, hg::TensorOptions(hg::float32, device)); }

float flag_value(const hg::Tensor& found_inf) { return found_inf.item<float>(); }

// ---- optimizer state, generically -------------------------------------------------------

std::vector<hg::Tensor> state_tensors(const hg::optim::SGDState* s) { return {s->momentum_buffer, s->device_step}; }
std::vector<hg::Tensor> state_tensors(const hg::optim::AdamState* s) {
  return {s->exp_avg, s->exp_avg_sq, s->max_exp_avg_sq, s->device_step};
}
// The state a CPU and a CUDA optimizer both keep (the device step count is CUDA's own).
std::vector<hg::Tensor> shared_state(const hg::optim::SGDState* s) { return {s->momentum_buffer}; }
std::vector<hg::Tensor> shared_state(const hg::optim::AdamState* s) {
  return {s->exp_avg, s->exp_avg_sq, s->max_exp_avg_sq};
}
int64_t step_count(const hg::optim::SGDState*) { return -1; }
int64_t step_count(const hg::optim::AdamState* s) { return s->step_count(); }

std::vector<hg::Tensor> clones(const std::vector<hg::Tensor>& ts) {
  std::vector<hg::Tensor> out;
  for (const auto& t : ts) out.push_back(t.defined() ? t.detach().clone() : hg::Tensor());
  return out;
}

}  // namespace

// ---- the scaler's kernels -------------------------------------------------------------------

TEST_CASE("CUDA unscale_and_check unscales every grad dtype in one call with the CPU kernel's bits",
          "[amp][cuda][scaler]") {
  hg::manual_seed(11);
  // Sizes around the chunk boundaries and the 16-byte vector width.
  const std::vector<int64_t> sizes = {1, 3, 8, 1000, kChunk - 1, kChunk, kChunk + 5, 3 * kChunk + 7};
  std::vector<hg::Tensor> cpu, gpu;
  for (hg::DType dtype : kGradDTypes) {
    for (int64_t n : sizes) {
      const hg::Tensor g = hg::mul(hg::randn({n}), 1000.0).to(dtype);
      cpu.push_back(g);
      gpu.push_back(g.to(kCuda));
    }
    // A contiguous view one element in: not 16-byte aligned, the scalar path.
    const hg::Tensor base = hg::mul(hg::randn({4097}), 1000.0).to(dtype);
    cpu.push_back(base.narrow(0, 1, 4096));
    gpu.push_back(base.to(kCuda).narrow(0, 1, 4096));
  }
  // 1/3 is not a power of two: every product is rounded, and must round alike.
  const double inv = static_cast<float>(1.0 / 3.0);
  const hg::Tensor cpu_found = hg::zeros({}), gpu_found = hg::zeros({}, kCuda);
  hg::amp::unscale_and_check(cpu, cpu_found, scalar(inv, hg::Device::cpu()));
  hg::amp::unscale_and_check(gpu, gpu_found, scalar(inv, kCuda));
  CHECK(flag_value(gpu_found) == 0.0f);
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("grad " << i << ": " << gpu[i].describe());
    CHECK(same_bits(gpu[i], cpu[i]));
  }

  // inv_scale == 1 and a check-only call leave every bit as it was.
  const std::vector<hg::Tensor> before = clones(gpu);
  hg::amp::unscale_and_check(gpu, gpu_found, scalar(1.0, kCuda));
  hg::amp::unscale_and_check(gpu, gpu_found, hg::Tensor());
  for (size_t i = 0; i < gpu.size(); ++i) CHECK(same_bits(gpu[i], before[i]));
  CHECK(flag_value(gpu_found) == 0.0f);
}

TEST_CASE("CUDA unscale_and_check finds inf and NaN anywhere, in every dtype, and never clears the flag",
          "[amp][cuda][scaler]") {
  const int64_t n = 3 * kChunk + 7;
  const std::vector<double> specials = {INFINITY, -INFINITY, NAN};
  // first element, inside a later chunk, the unaligned tail's last element
  const std::vector<int64_t> places = {0, kChunk + 2, n - 1};
  for (hg::DType dtype : kGradDTypes) {
    for (double special : specials) {
      for (int64_t at : places) {
        INFO(hg::dtype_name(dtype) << " value " << special << " at " << at);
        std::vector<hg::Tensor> grads;
        for (int k = 0; k < 3; ++k) {
          const hg::Tensor g = hg::randn({n}).to(dtype);
          if (k == 1) set_at(g, at, special);
          grads.push_back(g.to(kCuda));
        }
        const std::vector<hg::Tensor> before = clones(grads);
        const hg::Tensor found = hg::zeros({}, kCuda);
        hg::amp::unscale_and_check(grads, found, hg::Tensor());
        CHECK(flag_value(found) == 1.0f);
        for (size_t k = 0; k < grads.size(); ++k) CHECK(same_bits(grads[k], before[k]));
      }
    }
  }
  // Finite grads never write 0 over a flag someone already set.
  const hg::Tensor found = scalar(1.0, kCuda);
  hg::amp::unscale_and_check({hg::ones({5}, kCuda)}, found, scalar(0.5, kCuda));
  CHECK(flag_value(found) == 1.0f);
}

TEST_CASE("CUDA unscale_and_check splits 300 tensors of mixed dtypes over several launches", "[amp][cuda][scaler]") {
  hg::manual_seed(12);
  std::vector<hg::Tensor> cpu, gpu;
  for (int i = 0; i < 300; ++i) {
    const hg::Tensor g = hg::randn({1 + i % 7}).to(kGradDTypes[i % 4]);
    cpu.push_back(g);
    gpu.push_back(g.to(kCuda));
  }
  const hg::Tensor cpu_found = hg::zeros({}), gpu_found = hg::zeros({}, kCuda);
  hg::amp::unscale_and_check(cpu, cpu_found, scalar(0.125, hg::Device::cpu()));
  hg::amp::unscale_and_check(gpu, gpu_found, scalar(0.125, kCuda));
  CHECK(flag_value(gpu_found) == 0.0f);
  for (size_t i = 0; i < cpu.size(); ++i) CHECK(same_bits(gpu[i], cpu[i]));

  // An inf in the very last tensor (the last launch) is found.
  hg::Tensor last = hg::ones({6});
  set_at(last, 5, INFINITY);
  gpu.back() = last.to(kGradDTypes[299 % 4]).to(kCuda);
  hg::amp::unscale_and_check(gpu, gpu_found, hg::Tensor());
  CHECK(flag_value(gpu_found) == 1.0f);
}

TEST_CASE("CUDA update_scale follows _amp_update_scale_ step by step, like the CPU kernel", "[amp][cuda][scaler]") {
  const hg::TensorOptions i64_cuda(hg::int64, kCuda);
  hg::Tensor s_cpu = hg::full({}, 8.0), t_cpu = hg::zeros({}, hg::int64);
  hg::Tensor s_gpu = scalar(8.0, kCuda), t_gpu = hg::zeros({}, i64_cuda);
  const std::vector<int> flags = {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
  std::vector<float> trajectory;
  for (int f : flags) {
    const hg::Tensor found_cpu = hg::full({}, f);
    hg::amp::update_scale(s_cpu, t_cpu, found_cpu, 2.0, 0.5, 3);
    hg::amp::update_scale(s_gpu, t_gpu, found_cpu.to(kCuda), 2.0, 0.5, 3);
    CHECK(s_gpu.item<float>() == s_cpu.item<float>());
    CHECK(t_gpu.item<int64_t>() == t_cpu.item<int64_t>());
    trajectory.push_back(s_gpu.item<float>());
  }
  CHECK(trajectory == std::vector<float>{8, 8, 16, 8, 8, 8, 16, 16, 8, 4, 4, 4, 8, 8});

  // growth that would overflow float32 is not applied; the tracker resets
  hg::Tensor big = scalar(3e38, kCuda), tracker = hg::zeros({}, i64_cuda);
  hg::amp::update_scale(big, tracker, hg::zeros({}, kCuda), 2.0, 0.5, 1);
  CHECK(big.item<float>() == 3e38f);
  CHECK(tracker.item<int64_t>() == 0);

  // 1/S on the device: the CPU's bits
  for (double s : {65536.0, 3.0, 1e-3, 3e38, std::ldexp(1.0, -20), 0.1}) {
    INFO("scale " << s);
    const hg::Tensor out_cpu = hg::empty({}), out_gpu = hg::empty({}, kCuda);
    hg::amp::reciprocal_scale(scalar(s, hg::Device::cpu()), out_cpu);
    hg::amp::reciprocal_scale(scalar(s, kCuda), out_gpu);
    CHECK(same_bits(out_gpu, out_cpu));
    CHECK(out_cpu.item<float>() == static_cast<float>(1.0 / static_cast<double>(static_cast<float>(s))));
  }
}

// ---- fused optimizers against the CPU ones --------------------------------------------------

namespace {

// How the scaler hands one step to the optimizer.
enum class Handshake {
  Scaled,    // grads scaled by S, found_inf = 0, inv_scale = 1/S: unscale and update in one pass
  Skipped,   // found_inf = 1: nothing may change
  Unscaled,  // unscale_() ran already: found_inf = 0, no inv_scale
  Plain,     // no scaler at all: optimizer.step()
};

// The same parameters and gradients on the CPU and on CUDA, stepped through
// every kind of hand-shake (a skipped first step included), compared bit for
// bit after each step: the CUDA kernels run optim/update_math.h's arithmetic
// with every operation rounded as on the CPU.
template <typename Opt>
void fused_matches_cpu(const typename Opt::Options& options) {
  hg::manual_seed(21);
  // 70 tensors: more than one launch holds (64 for SGD, 48 for Adam), sizes
  // across chunk boundaries and vector widths.
  std::vector<int64_t> sizes = {3 * kChunk + 7, 1, kChunk, 4};
  for (int i = 4; i < 70; ++i) sizes.push_back(1 + (i * 37) % 300);
  std::vector<hg::Tensor> cpu_params, gpu_params;
  for (int64_t n : sizes) {
    const hg::Tensor t = hg::randn({n});
    cpu_params.push_back(t.clone().requires_grad_());
    gpu_params.push_back(t.to(kCuda).requires_grad_());
  }
  Opt cpu_opt(cpu_params, options), gpu_opt(gpu_params, options);

  const double S = 1024.0;
  const std::vector<Handshake> steps = {Handshake::Skipped, Handshake::Scaled,   Handshake::Scaled,
                                        Handshake::Skipped, Handshake::Unscaled, Handshake::Plain,
                                        Handshake::Scaled};
  int applied = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Handshake kind = steps[k];
    INFO("step " << k << " kind " << static_cast<int>(kind));
    const double factor = kind == Handshake::Scaled || kind == Handshake::Skipped ? S : 1.0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const hg::Tensor g = hg::mul(hg::randn({sizes[i]}), factor);
      cpu_params[i].set_grad(g.clone());
      gpu_params[i].set_grad(g.to(kCuda));
    }
    auto handshake = [&](hg::Device d) {
      if (kind == Handshake::Plain) return hg::amp::ScalerStep{};
      const double found = kind == Handshake::Skipped ? 1.0 : 0.0;
      return hg::amp::ScalerStep{scalar(found, d), kind == Handshake::Unscaled ? hg::Tensor() : scalar(1.0 / S, d)};
    };
    // everything the CUDA step could touch, to prove a skipped step does not
    struct Snapshot {
      hg::Tensor param, grad;
      bool had_state = false;
      std::vector<hg::Tensor> state;
    };
    std::vector<Snapshot> before;
    if (kind == Handshake::Skipped) {
      for (const auto& p : gpu_params) {
        const auto* st = gpu_opt.state(p);
        before.push_back({p.detach().clone(), p.grad().clone(), st != nullptr,
                          st != nullptr ? clones(state_tensors(st)) : std::vector<hg::Tensor>{}});
      }
    }
    cpu_opt.step(handshake(hg::Device::cpu()));
    gpu_opt.step(handshake(kCuda));
    if (kind != Handshake::Skipped) ++applied;

    for (size_t i = 0; i < before.size(); ++i) {
      INFO("parameter " << i << " in the skipped step");
      const hg::Tensor& p = gpu_params[i];
      CHECK(same_bits(p, before[i].param));
      CHECK(same_bits(p.grad(), before[i].grad));
      const auto* st = gpu_opt.state(p);
      REQUIRE(st != nullptr);
      const std::vector<hg::Tensor> now = state_tensors(st);
      if (before[i].had_state) {
        for (size_t j = 0; j < now.size(); ++j) CHECK(same_bits(now[j], before[i].state[j]));
      } else {
        // State made by a skipped first step is all zeros, its count 0: as if nothing happened.
        for (const auto& t : now)
          if (t.defined()) CHECK(host(t).to(hg::float64).abs().sum().item<double>() == 0.0);
      }
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      INFO("parameter " << i << " " << gpu_params[i].describe());
      CHECK(rel_err(gpu_params[i], cpu_params[i]) < 1e-6);
      CHECK(same_bits(gpu_params[i], cpu_params[i]));
      CHECK(same_bits(gpu_params[i].grad(), cpu_params[i].grad()));  // written back unscaled (or left alone)
      const auto* cs = cpu_opt.state(cpu_params[i]);
      const auto* gs = gpu_opt.state(gpu_params[i]);
      if (cs == nullptr) continue;  // the CPU makes state at its first applied step
      REQUIRE(gs != nullptr);
      const auto c = shared_state(cs), g = shared_state(gs);
      for (size_t j = 0; j < c.size(); ++j) CHECK(same_bits(g[j], c[j]));
      CHECK(step_count(gs) == step_count(cs));
      if (step_count(gs) >= 0) CHECK(step_count(gs) == applied);
    }
  }
}

}  // namespace

TEST_CASE("Fused CUDA SGD matches the CPU SGD bit for bit, and a skipped step changes nothing",
          "[amp][cuda][optim]") {
  using hg::optim::SGD;
  SECTION("plain") { fused_matches_cpu<SGD>({.lr = 0.1}); }
  SECTION("momentum") { fused_matches_cpu<SGD>({.lr = 0.1, .momentum = 0.9}); }
  SECTION("nesterov and weight decay") {
    fused_matches_cpu<SGD>({.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true});
  }
  // dampening makes the first step differ from the rest: the device must know which is first
  SECTION("dampening") { fused_matches_cpu<SGD>({.lr = 0.1, .momentum = 0.8, .dampening = 0.25}); }
}

TEST_CASE("Fused CUDA Adam and AdamW match the CPU ones bit for bit, and a skipped step changes nothing",
          "[amp][cuda][optim]") {
  using hg::optim::Adam;
  using hg::optim::AdamW;
  SECTION("Adam") { fused_matches_cpu<Adam>({.lr = 1e-2}); }
  SECTION("Adam, L2 weight decay, amsgrad") {
    fused_matches_cpu<Adam>({.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true});
  }
  SECTION("AdamW") { fused_matches_cpu<AdamW>({.lr = 1e-2}); }
  SECTION("AdamW amsgrad") { fused_matches_cpu<AdamW>({.lr = 1e-2, .amsgrad = true}); }
}

// ---- GradScaler end to end on CUDA (needs the CUDA elementwise and reduction ops) -------------

namespace {
// loss = sum(w * x) * factor, with a float32 leaf w: grad = x * factor.
hg::Tensor toy_loss(const hg::Tensor& w, const hg::Tensor& x, double factor) {
  return hg::mul(hg::sum(hg::mul(w, x)), factor);
}
}  // namespace

TEST_CASE("GradScaler on CUDA: the scale's trajectory lives on the device", "[amp][cuda][scaler]") {
  auto w = hg::ones({3}, kCuda).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 1e-3});
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  std::vector<double> trajectory;
  for (int i = 0; i < 7; ++i) {
    opt.zero_grad();
    const double x = i == 3 ? INFINITY : 1.0;  // step 3 overflows
    scaler.scale(toy_loss(w, hg::full({3}, x, kCuda), 1.0)).backward();
    const auto result = scaler.step(opt);
    scaler.update();
    CHECK(result.skipped() == (i == 3));
    CHECK(scaler.scale_tensor().device().is_cuda());
    trajectory.push_back(scaler.get_scale());
  }
  CHECK(trajectory == std::vector<double>{8, 8, 16, 8, 8, 8, 16});
}

TEST_CASE("GradScaler on CUDA: an inf gradient skips SGD, Adam and AdamW without changing any state",
          "[amp][cuda][scaler]") {
  for (int which = 0; which < 3; ++which) {
    INFO("optimizer " << which);
    hg::manual_seed(7);
    auto w = hg::randn({5}).to(kCuda).requires_grad_();
    auto x = hg::randn({5}).to(kCuda);
    std::unique_ptr<hg::optim::Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<hg::optim::SGD>(std::vector{w}, hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    if (which == 1) opt = std::make_unique<hg::optim::Adam>(std::vector{w}, hg::optim::AdamOptions{.lr = 0.1});
    if (which == 2) opt = std::make_unique<hg::optim::AdamW>(std::vector{w}, hg::optim::AdamWOptions{.lr = 0.1});
    GradScaler scaler({.init_scale = 1024.0});
    auto state = [&]() -> std::vector<hg::Tensor> {
      if (which == 0) return state_tensors(static_cast<hg::optim::SGD&>(*opt).state(w));
      if (which == 1) return state_tensors(static_cast<hg::optim::Adam&>(*opt).state(w));
      return state_tensors(static_cast<hg::optim::AdamW&>(*opt).state(w));
    };

    opt->zero_grad();
    scaler.scale(toy_loss(w, x, 1.0)).backward();
    REQUIRE(scaler.step(*opt).applied());
    scaler.update();

    const hg::Tensor w_before = w.detach().clone();
    const std::vector<hg::Tensor> state_before = clones(state());
    opt->zero_grad();
    scaler.scale(toy_loss(w, hg::full({5}, INFINITY, kCuda), 1.0)).backward();
    const hg::Tensor grad_before = w.grad().clone();
    const auto result = scaler.step(*opt);
    scaler.update();
    CHECK(result.skipped());
    CHECK(same_bits(w, w_before));
    CHECK(same_bits(w.grad(), grad_before));
    const std::vector<hg::Tensor> state_after = state();
    for (size_t i = 0; i < state_after.size(); ++i) CHECK(same_bits(state_after[i], state_before[i]));
    if (which == 1) CHECK(static_cast<hg::optim::Adam&>(*opt).state(w)->step_count() == 1);
    if (which == 2) CHECK(static_cast<hg::optim::AdamW&>(*opt).state(w)->step_count() == 1);
    CHECK(scaler.get_scale() == 512.0);
    CHECK(scaler.growth_tracker() == 0);
  }
}

// ---- the no-sync proof: CUDA graphs ------------------------------------------------------------

#if HALFGRAD_WITH_CUDA
namespace {

using hgtest::Graph;
using hgtest::TestStream;

// Every state tensor of every parameter, in a fixed order.
template <typename Opt>
std::vector<hg::Tensor> all_state(const Opt& o, const std::vector<hg::Tensor>& ps) {
  std::vector<hg::Tensor> out;
  for (const auto& p : ps)
    if (const auto* s = o.state(p))
      for (const auto& t : state_tensors(s)) out.push_back(t);
  return out;
}

// In-place restores: a graph replays on the addresses it captured.
void restore(const std::vector<hg::Tensor>& dst, const std::vector<hg::Tensor>& src) {
  REQUIRE(dst.size() == src.size());
  for (size_t i = 0; i < dst.size(); ++i)
    if (dst[i].defined()) hg::Tensor(dst[i]).detach().copy_(src[i]);
}

// scaler.step + scaler.update with a fused optimizer, captured once and
// replayed against the same steps run eagerly. Each step's scaled gradients
// are fed between replays into fixed buffers (as a real graph loop feeds its
// batch); some hold an inf, so the replays skip steps, back the scale off and
// grow it, all decided on the device.
template <typename Opt>
void scaler_step_graph_matches_eager(const typename Opt::Options& options) {
  TestStream stream;
  hg::manual_seed(5);
  const std::vector<int64_t> sizes = {3 * kChunk + 7, 100, 1000, 10, 1};
  std::vector<hg::Tensor> params, sources;
  for (int64_t n : sizes) {
    hg::Tensor p = hg::randn({n}).to(kCuda).requires_grad_();
    p.set_grad(hg::zeros_like(p));  // made before capture, written in place by the graph
    params.push_back(p);
    sources.push_back(hg::zeros_like(p));
  }
  Opt opt(params, options);
  GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  scaler.scale(hg::ones({}, kCuda));  // puts the scale and growth tracker on the device

  const int N = 12;
  const std::set<int> inf_steps = {0, 3, 4, 9};  // step 0 is the eager warm-up
  std::vector<std::vector<hg::Tensor>> batches(N + 1);
  for (int k = 0; k <= N; ++k)
    for (int64_t n : sizes) {
      hg::Tensor g = hg::mul(hg::randn({n}), 1024.0);
      if (inf_steps.count(k) && n == 1000) set_at(g, 17, INFINITY);
      batches[k].push_back(g);
    }
  auto feed = [&](int k) {  // host -> device, outside the graph
    for (size_t i = 0; i < sources.size(); ++i) sources[i].copy_(batches[k][i]);
  };
  auto step = [&] {  // what the graph holds
    for (size_t i = 0; i < params.size(); ++i) params[i].grad().copy_(sources[i]);
    scaler.step(opt);
    scaler.update();
  };

  // Warm-up: a skipped step makes the optimizer's state (zeros, count 0), so
  // the first applied step happens inside the graph.
  feed(0);
  step();
  stream.sync();
  const std::vector<hg::Tensor> p0 = clones(params), s0 = clones(all_state(opt, params));
  const auto scaler0 = scaler.state_dict();
  REQUIRE(scaler0.at("scale") == 512.0);

  std::vector<double> scales;
  for (int k = 1; k <= N; ++k) {
    feed(k);
    step();
    scales.push_back(scaler.get_scale());  // eager only: this read syncs
  }
  const std::vector<hg::Tensor> p_eager = clones(params), s_eager = clones(all_state(opt, params));
  const auto scaler_eager = scaler.state_dict();
  // the trajectory _amp_update_scale_ gives for these inf steps
  double s = 512.0;
  int tracker = 0;
  for (int k = 1; k <= N; ++k) {
    if (inf_steps.count(k)) s *= 0.5, tracker = 0;
    else if (++tracker == 2) s *= 2.0, tracker = 0;
    CHECK(scales[k - 1] == s);
  }

  restore(params, p0);
  restore(all_state(opt, params), s0);
  scaler.load_state_dict(scaler0);
  stream.sync();
  Graph graph(stream.get(), step);
  for (int k = 1; k <= N; ++k) {
    feed(k);
    graph.replay();
  }
  stream.sync();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(params[i], p_eager[i]));
  }
  const std::vector<hg::Tensor> s_graph = all_state(opt, params);
  REQUIRE(s_graph.size() == s_eager.size());
  for (size_t i = 0; i < s_graph.size(); ++i) CHECK(same_bits(s_graph[i], s_eager[i]));
  CHECK(scaler.state_dict() == scaler_eager);
}

using hgtest::MLP;  // tests/tutorial_mlp.h

}  // namespace

TEST_CASE("scaler.step and scaler.update with fused SGD, Adam and AdamW replay from a CUDA graph like eager steps",
          "[amp][cuda][graph]") {
  SECTION("SGD, momentum, dampening, weight decay") {
    scaler_step_graph_matches_eager<hg::optim::SGD>(
        {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
  }
  SECTION("Adam amsgrad") { scaler_step_graph_matches_eager<hg::optim::Adam>({.lr = 1e-2, .amsgrad = true}); }
  SECTION("AdamW") { scaler_step_graph_matches_eager<hg::optim::AdamW>({.lr = 1e-2}); }
}

TEST_CASE("A whole AMP training step of the tutorial MLP is captured in a CUDA graph: no host-device sync",
          "[amp][cuda][graph]") {
  TestStream stream;
  hg::manual_seed(0);
  MLP model;
  model.to(kCuda);
  hg::nn::CrossEntropyLoss criterion;
  hg::optim::SGD optimizer(model.parameters(), {.lr = 0.01});
  // The scale starts far too high: float16 overflows in backward and the
  // first steps are skipped and backed off, then steps apply and the scale
  // grows every 4 clean steps - all decided on the device.
  GradScaler scaler({.init_scale = std::ldexp(1.0, 40), .growth_interval = 4});
  const hg::Tensor inputs = hg::randn({100, 10}, kCuda);
  const hg::Tensor targets = hg::randint(0, 10, {100}, kCuda);

  // One step, as the tutorial writes it. Grads are dropped at the end (not
  // the start) so that the graph frees every buffer it allocates: a capture
  // may only free memory it allocated itself.
  auto train_step = [&] {
    hg::Tensor loss;
    {
      hg::amp::autocast region(hg::DeviceType::CUDA);
      loss = criterion(model.forward(inputs), targets);
    }
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    optimizer.zero_grad(/*set_to_none=*/true);
  };

  // Warm-up: the scaler's tensors, cuBLASLt handles and workspaces, the pool.
  for (int i = 0; i < 3; ++i) train_step();
  stream.sync();
  const std::vector<hg::Tensor> params = model.parameters();
  const std::vector<hg::Tensor> start = clones(params);
  const auto scaler_start = scaler.state_dict();

  const int N = 40;
  int skipped = 0;
  for (int i = 0; i < N; ++i) {
    const double before = scaler.get_scale();
    train_step();
    if (scaler.get_scale() < before) ++skipped;  // eager only: these reads sync
  }
  const std::vector<hg::Tensor> eager = clones(params);
  const auto scaler_eager = scaler.state_dict();
  INFO("skipped " << skipped << " of " << N << " eager steps");
  CHECK(skipped > 0);
  CHECK(skipped < N);

  restore(params, start);
  scaler.load_state_dict(scaler_start);
  stream.sync();
  Graph graph(stream.get(), train_step);  // throws if anything in the step syncs
  for (int i = 0; i < N; ++i) graph.replay();
  stream.sync();

  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i << " " << params[i].describe());
    CHECK(rel_err(params[i], eager[i]) < 1e-6);
    // Same kernels on the same data: bit-identical unless a reduction uses
    // atomics (order-dependent float sums); reported, not required.
    CHECK_NOFAIL(same_bits(params[i], eager[i]));
    CHECK_FALSE(same_bits(params[i], start[i]));  // the replays trained
  }
  CHECK(scaler.state_dict() == scaler_eager);
}
#endif  // HALFGRAD_WITH_CUDA
