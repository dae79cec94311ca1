// scaled_dot_product_attention's two paths (ops/transformer_ops.h): the host
// rules that send a call to the math path, and cuDNN's plan key (any machine);
// on a CUDA device, the fused path against the math path and a float64
// reference (forward and backward, float16 and bfloat16, causal and not), the
// path taken where cuDNN says it has an engine, the fall-backs, double
// backward through a fused call, and the plan cache.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <halfgrad.h>

#include <halfgrad/kernels/cuda/cudnn_sdpa.h>

#include "cuda_compare.h"
#include "test_util.h"

using namespace halfgrad;
using Catch::Matchers::Contains;

namespace {

// Turns the fused path off for a scope (and back on after, whatever happens).
struct MathOnly {
  MathOnly() { enable_cudnn_sdp(false); }
  ~MathOnly() { enable_cudnn_sdp(true); }
};

std::string rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {}, double p = 0.0) {
  return detail::sdpa_fused_rules(q, k, v, mask, p);
}

}  // namespace

TEST_CASE("sdpa: the host rules of the fused path, first failing rule named", "[ops][sdpa]") {
  const DType h = DType::Float16;
  const Tensor q = hgtest::uniform({2, 3, 16, 64}, h), k = hgtest::uniform({2, 3, 24, 64}, h),
               v = hgtest::uniform({2, 3, 24, 64}, h);
  // every rule but the device holds: the CPU tensors are the reason
  CHECK_THAT(rule(q, k, v), Contains("not on a CUDA device"));
  CHECK_THAT(rule(q, k, v, hgtest::random_bool({16, 24})), Contains("attn_mask"));
  CHECK_THAT(rule(q, k, v, {}, 0.1), Contains("dropout"));
  CHECK_THAT(rule(q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32)), Contains("float32"));
  CHECK_THAT(rule(hgtest::uniform({3, 16, 64}, h), hgtest::uniform({3, 24, 64}, h), hgtest::uniform({3, 24, 64}, h)),
             Contains("4-d"));
  CHECK_THAT(rule(q, hgtest::uniform({2, 1, 24, 64}, h), v), Contains("broadcast"));
  CHECK_THAT(rule(hgtest::uniform({2, 3, 16, 12}, h), hgtest::uniform({2, 3, 24, 12}, h), v),
             Contains("multiples of 8"));
  CHECK_THAT(rule(q, k, hgtest::uniform({2, 3, 24, 264}, h)), Contains("up to 256"));
  // a last dim with stride != 1 (a transposed view); MultiheadAttention's
  // [B, L, H, E] -> [B, H, L, E] views keep stride 1 and pass
  CHECK_THAT(rule(q, k, hgtest::uniform({2, 3, 64, 24}, h).transpose(-2, -1)), Contains("stride"));
  CHECK_THAT(rule(hgtest::uniform({2, 16, 3, 64}, h).transpose(1, 2), k, v), Contains("not on a CUDA device"));
  {
    MathOnly off;
    CHECK_FALSE(cudnn_sdp_enabled());
    CHECK_THAT(rule(q, k, v), Contains("turned off"));
  }
  CHECK(cudnn_sdp_enabled());
  // the public queries agree, and a CPU call takes the math path
  const AttentionPathInfo info = sdpa_path(q, k, v, {}, 0.0, true);
  CHECK(info.path == AttentionPath::Math);
  CHECK_THAT(info.why, Contains("CPU has no fused attention") || Contains("not on a CUDA device"));
  (void)scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  CHECK(sdpa_last_path().path == AttentionPath::Math);
  CHECK_THAT(sdpa_last_path().why, Contains("not on a CUDA device"));
}

TEST_CASE("sdpa: cuDNN's plan key names what a plan depends on, and not the scale", "[ops][sdpa]") {
  using kernels::cuda::byte_alignment;
  using kernels::cuda::sdpa_plan_key;
  const DType h = DType::Float16;
  const Tensor q = hgtest::uniform({2, 3, 16, 64}, h), k = hgtest::uniform({2, 3, 24, 64}, h),
               v = hgtest::uniform({2, 3, 24, 64}, h);
  const Tensor q2 = hgtest::uniform({2, 3, 16, 64}, h);  // same shapes, other values and pointer
  CHECK(sdpa_plan_key(false, q, k, v, true) == sdpa_plan_key(false, q2, k, v, true));
  CHECK(sdpa_plan_key(false, q, k, v, true) != sdpa_plan_key(false, q, k, v, false));  // causal
  CHECK(sdpa_plan_key(false, q, k, v, true) != sdpa_plan_key(true, q, k, v, true));    // backward
  CHECK(sdpa_plan_key(false, q, k, v, false) !=
        sdpa_plan_key(false, q.to(DType::BFloat16), k.to(DType::BFloat16), v.to(DType::BFloat16), false));
  // the same shape in another layout (MultiheadAttention's view) is another plan
  const Tensor qt = hgtest::uniform({2, 16, 3, 64}, h).transpose(1, 2);
  REQUIRE(qt.shape() == q.shape());
  CHECK(sdpa_plan_key(false, q, k, v, false) != sdpa_plan_key(false, qt, k, v, false));
  // a view that starts mid-block has a smaller byte alignment, and another key
  const Tensor wide = hgtest::uniform({2, 3, 16, 65}, h);
  const Tensor offset = wide.narrow(3, 1, 64);
  CHECK(byte_alignment(offset.data_ptr()) == 2);
  CHECK(byte_alignment(q.data_ptr()) == 16);
  CHECK(sdpa_plan_key(false, offset, k, v, false) != sdpa_plan_key(false, wide.narrow(3, 0, 64), k, v, false));
}

namespace {

struct Shapes {
  int64_t B, H, L, S, E, Ev;
};

// float64 reference of the same (rounded) values, on the CPU.
Tensor f64(const Tensor& t) { return t.detach().cpu().to(DType::Float64); }

// Runs sdpa on fresh CUDA leaves holding q, k, v; backward with g. Returns out, dq, dk, dv.
std::vector<Tensor> run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, bool causal,
                        std::optional<double> scale = std::nullopt) {
  const Tensor ql = hgtest::cuda::leaf_on(q, hgtest::cuda::kCuda), kl = hgtest::cuda::leaf_on(k, hgtest::cuda::kCuda),
               vl = hgtest::cuda::leaf_on(v, hgtest::cuda::kCuda);
  const Tensor out = scaled_dot_product_attention(ql, kl, vl, {}, 0.0, causal, scale);
  out.backward(g);
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

void check_close(const Tensor& got, const Tensor& ref, double tolerance, const std::string& what) {
  INFO(what);
  HG_CHECK_CLOSE_TOL(got.detach().cpu().to(DType::Float64), hgtest::values(ref), tolerance);
}

}  // namespace

TEST_CASE("CUDA sdpa: cuDNN's fused path matches the math path and a float64 reference, forward and backward",
          "[cuda][ops][sdpa]") {
  const std::vector<Shapes> shapes = {{2, 3, 64, 64, 64, 64}, {1, 2, 40, 72, 64, 64}, {2, 2, 128, 128, 128, 128}};
  for (const DType dt : {DType::Float16, DType::BFloat16}) {
    // forward: a few roundings (inputs, P, output); backward: a few more
    const double tol_fwd = 3 * hgtest::tol(dt), tol_bwd = 6 * hgtest::tol(dt);
    for (const bool causal : {false, true}) {
      for (size_t si = 0; si < shapes.size(); ++si) {
        const Shapes& s = shapes[si];
        const std::string what = fmt::format("{} causal={} [B={}, H={}, L={}, S={}, E={}, Ev={}]", dtype_name(dt),
                                             causal, s.B, s.H, s.L, s.S, s.E, s.Ev);
        INFO(what);
        const Tensor q = hgtest::uniform({s.B, s.H, s.L, s.E}, dt), k = hgtest::uniform({s.B, s.H, s.S, s.E}, dt),
                     v = hgtest::uniform({s.B, s.H, s.S, s.Ev}, dt);
        const Tensor g = hgtest::cuda::dev(hgtest::uniform({s.B, s.H, s.L, s.Ev}, dt));
        // the path cuDNN promises for these tensors (grad wanted: forward and backward asked)
        const Tensor ql = hgtest::cuda::leaf_on(q, hgtest::cuda::kCuda);
        const AttentionPathInfo promised =
            sdpa_path(ql, hgtest::cuda::dev(k), hgtest::cuda::dev(v), {}, 0.0, causal);
        INFO("why not fused: " << promised.why);
        // H100/H200 with cuDNN 9: the plain shape must be fused
        if (si == 0) REQUIRE(promised.path == AttentionPath::CudnnFused);
        const std::vector<Tensor> fused = run(q, k, v, g, causal);
        CHECK(sdpa_last_path().path == promised.path);
        std::vector<Tensor> math;
        {
          MathOnly off;
          math = run(q, k, v, g, causal);
          CHECK(sdpa_last_path().path == AttentionPath::Math);
        }
        // float64 reference on the CPU (the math path in float64)
        const Tensor q64 = hgtest::cuda::leaf_on(f64(q), hgtest::cuda::kCpu),
                     k64 = hgtest::cuda::leaf_on(f64(k), hgtest::cuda::kCpu),
                     v64 = hgtest::cuda::leaf_on(f64(v), hgtest::cuda::kCpu);
        const Tensor out64 = scaled_dot_product_attention(q64, k64, v64, {}, 0.0, causal);
        out64.backward(f64(g));
        const std::vector<Tensor> ref = {out64.detach(), q64.grad(), k64.grad(), v64.grad()};
        const char* names[] = {"out", "dq", "dk", "dv"};
        for (size_t i = 0; i < 4; ++i) {
          CHECK(fused[i].dtype() == dt);
          CHECK(fused[i].shape() == ref[i].shape());
          check_close(fused[i], ref[i], i == 0 ? tol_fwd : tol_bwd, std::string("fused ") + names[i]);
          check_close(math[i], ref[i], i == 0 ? tol_fwd : tol_bwd, std::string("math ") + names[i]);
        }
      }
    }
  }
}

TEST_CASE("CUDA sdpa: the fused path takes MultiheadAttention's strided views, a given scale, and autocast's casts",
          "[cuda][ops][sdpa]") {
  const DType dt = DType::Float16;
  const int64_t B = 2, H = 4, L = 48, E = 32;
  // [B, L, H, E] memory seen as [B, H, L, E]: last stride 1, others not contiguous
  const Tensor q = hgtest::uniform({B, L, H, E}, dt).transpose(1, 2), k = hgtest::uniform({B, L, H, E}, dt).transpose(1, 2),
               v = hgtest::uniform({B, L, H, E}, dt).transpose(1, 2);
  const Tensor qd = hgtest::cuda::dev(q).transpose(1, 2).contiguous().transpose(1, 2);
  REQUIRE_FALSE(qd.is_contiguous());
  const Tensor kd = hgtest::cuda::dev(k).transpose(1, 2).contiguous().transpose(1, 2),
               vd = hgtest::cuda::dev(v).transpose(1, 2).contiguous().transpose(1, 2);
  const AttentionPathInfo info = sdpa_path(qd, kd, vd, {}, 0.0, true, 0.3);
  INFO("why not fused: " << info.why);
  CHECK(info.path == AttentionPath::CudnnFused);
  const Tensor out = scaled_dot_product_attention(qd, kd, vd, {}, 0.0, true, 0.3);
  CHECK(sdpa_last_path().path == info.path);
  const Tensor ref = scaled_dot_product_attention(f64(q), f64(k), f64(v), {}, 0.0, true, 0.3);
  check_close(out, ref, 3 * hgtest::tol(dt), "strided views, scale 0.3");
  // float32 inputs under CUDA autocast: cast to float16 first, then fused
  amp::autocast region(DeviceType::CUDA);
  const Tensor o16 = scaled_dot_product_attention(hgtest::cuda::dev(q.to(DType::Float32)),
                                                  hgtest::cuda::dev(k.to(DType::Float32)),
                                                  hgtest::cuda::dev(v.to(DType::Float32)));
  CHECK(o16.dtype() == DType::Float16);
  INFO("why not fused: " << sdpa_last_path().why);
  CHECK(sdpa_last_path().path == AttentionPath::CudnnFused);
}

TEST_CASE("CUDA sdpa: what the fused path does not take falls back to the math path", "[cuda][ops][sdpa]") {
  using hgtest::cuda::dev;
  const DType h = DType::Float16;
  const Tensor q = dev(hgtest::uniform({2, 2, 32, 64}, h)), k = dev(hgtest::uniform({2, 2, 32, 64}, h)),
               v = dev(hgtest::uniform({2, 2, 32, 64}, h));
  auto path_of = [](const Tensor& out, const char* what) {
    INFO(what);
    CHECK(out.defined());
    return sdpa_last_path();
  };
  CHECK_THAT(path_of(scaled_dot_product_attention(q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32)),
                     "float32")
                 .why,
             Contains("float32"));
  CHECK_THAT(path_of(scaled_dot_product_attention(q, k, v, dev(hgtest::random_bool({32, 32}))), "mask").why,
             Contains("attn_mask"));
  CHECK_THAT(path_of(scaled_dot_product_attention(q, k, v, {}, 0.2), "dropout").why, Contains("dropout"));
  const Tensor q12 = dev(hgtest::uniform({2, 2, 32, 12}, h)), k12 = dev(hgtest::uniform({2, 2, 32, 12}, h));
  CHECK_THAT(path_of(scaled_dot_product_attention(q12, k12, v), "head dim 12").why, Contains("multiples of 8"));
  CHECK(sdpa_last_path().path == AttentionPath::Math);
  // a head dim cuDNN may refuse (256 on a GPU without such engines): whatever
  // cuDNN answers, the call works and the path taken is the one promised
  const Tensor q256 = dev(hgtest::uniform({1, 1, 16, 256}, h)), k256 = dev(hgtest::uniform({1, 1, 16, 256}, h));
  const AttentionPathInfo promised = sdpa_path(q256, k256, k256);
  const Tensor o = scaled_dot_product_attention(q256, k256, k256);
  CHECK(sdpa_last_path().path == promised.path);
  check_close(o, scaled_dot_product_attention(f64(q256), f64(k256), f64(k256)), 3 * hgtest::tol(h), "head dim 256");
}

TEST_CASE("CUDA sdpa: double backward through a fused call (its backward in ops under create_graph)",
          "[cuda][ops][sdpa]") {
  const DType h = DType::Float16;
  const Tensor q = hgtest::uniform({1, 2, 32, 64}, h), k = hgtest::uniform({1, 2, 32, 64}, h),
               v = hgtest::uniform({1, 2, 32, 64}, h);
  auto second = [&](bool fused) {
    const Tensor ql = hgtest::cuda::leaf_on(q, hgtest::cuda::kCuda), kl = hgtest::cuda::leaf_on(k, hgtest::cuda::kCuda),
                 vl = hgtest::cuda::leaf_on(v, hgtest::cuda::kCuda);
    const Tensor out = scaled_dot_product_attention(ql, kl, vl, {}, 0.0, true);
    CHECK(sdpa_last_path().path == (fused ? AttentionPath::CudnnFused : AttentionPath::Math));
    autograd::GradOptions opts;
    opts.create_graph = true;
    const std::vector<Tensor> g = autograd::grad({out.to(DType::Float32).sum()}, {ql, kl, vl}, {}, opts);
    add(add(mul(g[0], g[0]).to(DType::Float32).sum(), mul(g[1], g[1]).to(DType::Float32).sum()),
        mul(g[2], g[2]).to(DType::Float32).sum())
        .backward();
    return std::vector<Tensor>{ql.grad(), kl.grad(), vl.grad()};
  };
  const std::vector<Tensor> fused = second(true);
  std::vector<Tensor> math;
  {
    MathOnly off;
    math = second(false);
  }
  for (size_t i = 0; i < 3; ++i) check_close(fused[i], f64(math[i]), 8 * hgtest::tol(h), "second-order grad");
}

#if defined(HALFGRAD_WITH_CUDA)  // the backend's counters exist only in a CUDA build
TEST_CASE("CUDA sdpa: cuDNN's plans are built once per problem and reused", "[cuda][ops][sdpa]") {
  using hgtest::cuda::dev;
  const DType h = DType::BFloat16;
  const Tensor q = dev(hgtest::uniform({3, 1, 56, 64}, h)), k = dev(hgtest::uniform({3, 1, 88, 64}, h)),
               v = dev(hgtest::uniform({3, 1, 88, 64}, h));
  kernels::cuda::reset_sdpa_plan_counts();
  (void)scaled_dot_product_attention(q, k, v);  // no grad wanted: the forward plan only
  const auto first = kernels::cuda::sdpa_plan_counts();
  CHECK(first.built == 1);
  (void)scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.5);  // another scale: the same plan
  const auto second = kernels::cuda::sdpa_plan_counts();
  CHECK(second.built == 1);
  CHECK(second.hits >= 1);
  CHECK(second.unsupported == 0);
}
#endif
