// LayerNorm, Embedding and MultiheadAttention: registration (PyTorch's names,
// shapes, initial values and state-dict keys), reprs, forwards against float64
// references computed here from the modules' own parameters (MultiheadAttention:
// the projections, per-head attention, averaged weights, with batch_first both
// ways, key_padding_mask, attn_mask, is_causal, distinct query/key/value,
// unbatched input), dropout in training only, gradients, errors; and
// ("[.interop]", CTest's test_nn:interop) against PyTorch's own modules.
#include <catch2/catch.hpp>

#include <halfgrad.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
namespace nn = halfgrad::nn;
using hg::DType;
using hg::Shape;
using hg::Tensor;
using hgtest::values;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// y[r, o] = sum_i x[r, i] w[o, i] + b[o] for x [R, I] (row-major), w [O, I] at row offset w_off.
std::vector<double> affine(const std::vector<double>& x, int64_t R, int64_t I, const std::vector<double>& w,
                           const std::vector<double>& b, int64_t O, int64_t row_off) {
  std::vector<double> y(static_cast<size_t>(R * O));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) {
      double s = b.empty() ? 0.0 : b[row_off + o];
      for (int64_t i = 0; i < I; ++i) s += x[r * I + i] * w[(row_off + o) * I + i];
      y[r * O + o] = s;
    }
  return y;
}

// nn.MultiheadAttention in float64 from its parameters. q_in [N, L, E], k_in and
// v_in [N, S, E] (batch first, row-major); mask(n, h, i, j) the additive term.
// Returns the output [N, L, E]; *weights gets [N, H, L, S].
std::vector<double> mha_ref(const nn::MultiheadAttention& m, const std::vector<double>& q_in,
                            const std::vector<double>& k_in, const std::vector<double>& v_in, int64_t N, int64_t L,
                            int64_t S, const std::function<double(int64_t, int64_t, int64_t, int64_t)>& mask,
                            std::vector<double>* weights) {
  const int64_t E = m.embed_dim, H = m.num_heads, D = E / H;
  const auto W = values(m.in_proj_weight);
  const auto B = m.in_proj_bias.defined() ? values(m.in_proj_bias) : std::vector<double>{};
  const auto q = affine(q_in, N * L, E, W, B, E, 0), k = affine(k_in, N * S, E, W, B, E, E),
             v = affine(v_in, N * S, E, W, B, E, 2 * E);
  std::vector<double> cat(static_cast<size_t>(N * L * E), 0.0), wts(static_cast<size_t>(N * H * L * S), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(static_cast<size_t>(S));
        double mx = -kInf;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[(n * L + i) * E + h * D + d] * k[(n * S + j) * E + h * D + d];
          s[j] = dot / std::sqrt(static_cast<double>(D)) + (mask ? mask(n, h, i, j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j < S; ++j) {
          const double p = s[j] / sum;
          wts[((n * H + h) * L + i) * S + j] = p;
          for (int64_t d = 0; d < D; ++d) cat[(n * L + i) * E + h * D + d] += p * v[(n * S + j) * E + h * D + d];
        }
      }
  if (weights) *weights = wts;
  return affine(cat, N * L, E, values(m.out_proj.weight),
                m.out_proj.bias.defined() ? values(m.out_proj.bias) : std::vector<double>{}, E, 0);
}

// [N, H, L, S] averaged over H.
std::vector<double> head_mean(const std::vector<double>& w, int64_t N, int64_t H, int64_t L, int64_t S) {
  std::vector<double> out(static_cast<size_t>(N * L * S), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t e = 0; e < L * S; ++e) out[n * L * S + e] += w[(n * H + h) * L * S + e] / static_cast<double>(H);
  return out;
}

// [A, B, E] -> [B, A, E] (row-major values).
std::vector<double> swap01(const std::vector<double>& v, int64_t A, int64_t B, int64_t E) {
  std::vector<double> out(v.size());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < E; ++e) out[(b * A + a) * E + e] = v[(a * B + b) * E + e];
  return out;
}

}  // namespace

// ---- LayerNorm ----------------------------------------------------------------------------------

TEST_CASE("LayerNorm: PyTorch's parameters, keys, options and repr", "[nn][layer_norm]") {
  nn::LayerNorm ln(8);
  CHECK(ln.state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(ln.weight.shape() == Shape{8});
  CHECK(ln.weight.requires_grad());
  for (double v : values(ln.weight)) CHECK(v == 1.0);
  for (double v : values(ln.bias)) CHECK(v == 0.0);
  CHECK(ln.repr() == "LayerNorm((8,), eps=1e-05, elementwise_affine=True)");
  nn::LayerNorm ln2({4, 8}, {.eps = 1e-6, .bias = false});
  CHECK(ln2.state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(ln2.weight.shape() == Shape{4, 8});
  CHECK_FALSE(ln2.bias.defined());
  CHECK(ln2.repr() == "LayerNorm((4, 8), eps=1e-06, elementwise_affine=True)");
  nn::LayerNorm ln3(8, {.elementwise_affine = false});
  CHECK(ln3.parameters().empty());
  // forward is the functional op with the module's parameters
  {
    hg::NoGradGuard g;
    ln.weight.copy_(hgtest::uniform({8}, hg::float32, 0.5, 1.5));
    ln.bias.copy_(hgtest::uniform({8}, hg::float32));
  }
  const Tensor x = hgtest::uniform({3, 5, 8}, hg::float32);
  CHECK(hgtest::same_bits(ln(x), hg::layer_norm(x, {8}, ln.weight, ln.bias, 1e-5)));
  CHECK(hgtest::same_bits(ln3(x), hg::layer_norm(x, {8})));
  ln(x).sum().backward();
  CHECK(ln.weight.grad().defined());
  CHECK(ln.bias.grad().defined());
  ln.reset_parameters();
  for (double v : values(ln.weight)) CHECK(v == 1.0);
  hgtest::expect_errors({{"empty normalized_shape", [] { nn::LayerNorm(std::vector<int64_t>{}); }, {"LayerNorm"}},
                         {"zero size", [] { nn::LayerNorm(0); }, {"LayerNorm", "positive"}}});
}

// ---- Embedding ----------------------------------------------------------------------------------

TEST_CASE("Embedding: N(0, 1) weight, padding row zeroed and never trained, key and repr", "[nn][embedding]") {
  hg::manual_seed(0);
  nn::Embedding big(1000, 64);
  CHECK(big.state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(big.weight.shape() == Shape{1000, 64});
  const auto w = values(big.weight);
  double mean = 0, sq = 0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(w.size()));
  CHECK(std::abs(mean) < 0.02);  // 64000 draws: standard error 0.004
  CHECK(std::abs(sd - 1.0) < 0.02);
  CHECK(big.repr() == "Embedding(1000, 64)");

  nn::Embedding emb(10, 4, {.padding_idx = -2});
  CHECK(emb.padding_idx == 8);
  CHECK(emb.repr() == "Embedding(10, 4, padding_idx=8)");
  for (double v : values(emb.weight.select(0, 8))) CHECK(v == 0.0);
  const Tensor idx = hgtest::make({8, 1, 8, 3, 1}, {5}, hg::int64);
  const Tensor y = emb(idx);
  CHECK(y.shape() == Shape{5, 4});
  hg::optim::SGD opt(emb.parameters(), {.lr = 0.5});
  hg::add(hg::mul(y, y).sum(), y.sum()).backward();
  for (double v : values(emb.weight.grad().select(0, 8))) CHECK(v == 0.0);
  for (double v : values(emb.weight.grad().select(0, 1))) CHECK(v != 0.0);
  for (double v : values(emb.weight.grad().select(0, 0))) CHECK(v == 0.0);  // not used
  opt.step();
  for (double v : values(emb.weight.select(0, 8))) CHECK(v == 0.0);
  hgtest::expect_errors({
      {"index out of range", [&] { emb(hgtest::make({1, 10}, {2}, hg::int64)); },
       {"embedding", "index 10", "num_embeddings 10"}},
      {"padding_idx out of range", [] { nn::Embedding(10, 4, {.padding_idx = 10}); }, {"Embedding", "padding_idx 10"}},
  });
}

// ---- MultiheadAttention -----------------------------------------------------------------------

TEST_CASE("MultiheadAttention: PyTorch's parameters, keys and init", "[nn][mha]") {
  nn::MultiheadAttention m(16, 4);
  CHECK(m.state_dict().keys() ==
        std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(m.in_proj_weight.shape() == Shape{48, 16});
  CHECK(m.in_proj_bias.shape() == Shape{48});
  CHECK(m.out_proj.weight.shape() == Shape{16, 16});
  CHECK(m.head_dim == 4);
  for (double v : values(m.in_proj_bias)) CHECK(v == 0.0);
  for (double v : values(m.out_proj.bias)) CHECK(v == 0.0);
  const double bound = std::sqrt(6.0 / (16 + 48));  // xavier_uniform_ on [3E, E]
  double mx = 0;
  for (double v : values(m.in_proj_weight)) mx = std::max(mx, std::abs(v));
  CHECK(mx <= bound);
  CHECK(mx > 0.8 * bound);
  // out_proj keeps Linear's init: |w| <= 1/sqrt(E)
  for (double v : values(m.out_proj.weight)) CHECK(std::abs(v) <= 0.25);
  CHECK(m.num_parameters() == 48 * 16 + 48 + 16 * 16 + 16);
  nn::MultiheadAttention nb(8, 2, {.bias = false});
  CHECK(nb.state_dict().keys() == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
  CHECK(m.repr() ==
        "MultiheadAttention(\n  (out_proj): Linear(in_features=16, out_features=16, bias=True)\n)");
  hgtest::expect_errors({
      {"embed_dim not divisible", [] { nn::MultiheadAttention(10, 4); },
       {"MultiheadAttention", "embed_dim (10)", "divisible by num_heads (4)"}},
      {"zero heads", [] { nn::MultiheadAttention(8, 0); }, {"MultiheadAttention", "num_heads (0)"}},
  });
}

TEST_CASE("MultiheadAttention matches a float64 reference from its own parameters", "[nn][mha]") {
  const int64_t E = 12, H = 3, N = 2, L = 4, S = 6;
  for (DType dt : {hg::float64, hg::float32})
    for (bool batch_first : {false, true}) {
      INFO(hgtest::dname(dt) << (batch_first ? " batch_first" : " sequence first"));
      nn::MultiheadAttention m(E, H, {.batch_first = batch_first});
      {
        hg::NoGradGuard g;
        m.in_proj_bias.copy_(hgtest::uniform({3 * E}, hg::float32, -0.5, 0.5));  // non-zero biases
        m.out_proj.bias.copy_(hgtest::uniform({E}, hg::float32, -0.5, 0.5));
      }
      m.to(dt);
      const double t = hgtest::tol(dt);
      // inputs batch first in the reference; the module sees them as it is configured
      const Tensor xq = hgtest::uniform({N, L, E}, dt), xk = hgtest::uniform({N, S, E}, dt),
                   xv = hgtest::uniform({N, S, E}, dt);
      const auto in = [&](const Tensor& x) { return batch_first ? x : x.transpose(0, 1).contiguous(); };
      // the module's output as a batch-first float64 tensor
      const auto out_values = [&](const Tensor& y, int64_t T) {
        return hgtest::make(batch_first ? values(y) : swap01(values(y), T, N, E), {N, T, E}, hg::float64);
      };
      std::vector<double> w;

      // self-attention: query, key and value one tensor
      {
        const Tensor x = in(xq);
        auto [y, wt] = m(x, x, x);
        CHECK(y.shape() == (batch_first ? Shape{N, L, E} : Shape{L, N, E}));
        const auto ref = mha_ref(m, values(xq), values(xq), values(xq), N, L, L, nullptr, &w);
        HG_CHECK_CLOSE_TOL(out_values(y, L), ref, t);
        REQUIRE(wt.shape() == Shape{N, L, L});
        HG_CHECK_CLOSE_TOL(wt, head_mean(w, N, H, L, L), t);
      }
      // distinct query, key and value, per-head weights
      {
        auto [y, wt] = m(in(xq), in(xk), in(xv), {.average_attn_weights = false});
        const auto ref = mha_ref(m, values(xq), values(xk), values(xv), N, L, S, nullptr, &w);
        HG_CHECK_CLOSE_TOL(out_values(y, L), ref, t);
        REQUIRE(wt.shape() == Shape{N, H, L, S});
        HG_CHECK_CLOSE_TOL(wt, w, t);
        // need_weights = false: the sdpa path, the same output, no weights
        auto [y2, none] = m(in(xq), in(xk), in(xv), {.need_weights = false});
        CHECK_FALSE(none.defined());
        HG_CHECK_CLOSE_TOL(out_values(y2, L), ref, t);
      }
      // key_padding_mask (true = ignore) and a bool attn_mask (true = not allowed)
      const Tensor kpm = hgtest::make({0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {N, S}, DType::Bool);
      const Tensor am = hgtest::make({0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
                                     {L, S}, DType::Bool);
      const auto kv = values(kpm), av = values(am);
      const auto masked = [&](int64_t n, int64_t, int64_t i, int64_t j) {
        return (kv[n * S + j] != 0 || av[i * S + j] != 0) ? -kInf : 0.0;
      };
      for (bool need : {true, false}) {
        auto [y, wt] = m(in(xq), in(xk), in(xv), {.key_padding_mask = kpm, .need_weights = need, .attn_mask = am});
        const auto ref = mha_ref(m, values(xq), values(xk), values(xv), N, L, S, masked, &w);
        HG_CHECK_CLOSE_TOL(out_values(y, L), ref, t);
        if (need) HG_CHECK_CLOSE_TOL(wt, head_mean(w, N, H, L, S), t);
      }
      // a float attn_mask [N * H, L, S], added to the scores
      {
        const Tensor fm = hgtest::uniform({N * H, L, S}, dt, -1, 0);
        const auto fv = values(fm);
        auto [y, wt] = m(in(xq), in(xk), in(xv), {.attn_mask = fm});
        const auto ref = mha_ref(m, values(xq), values(xk), values(xv), N, L, S,
                                 [&](int64_t n, int64_t h, int64_t i, int64_t j) {
                                   return fv[((n * H + h) * L + i) * S + j];
                                 },
                                 &w);
        HG_CHECK_CLOSE_TOL(out_values(y, L), ref, t);
      }
      // is_causal alone (our extension), with and without key_padding_mask
      const auto causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; };
      const auto causal_kpm = [&](int64_t n, int64_t, int64_t i, int64_t j) {
        return (j > i || kv[n * S + j] != 0) ? -kInf : 0.0;
      };
      for (bool need : {true, false}) {
        const Tensor x = in(xk);
        auto [y, wt] = m(x, x, x, {.need_weights = need, .is_causal = true});
        HG_CHECK_CLOSE_TOL(out_values(y, S), mha_ref(m, values(xk), values(xk), values(xk), N, S, S, causal, &w), t);
        auto [y2, wt2] = m(x, x, x, {.key_padding_mask = kpm, .need_weights = need, .is_causal = true});
        HG_CHECK_CLOSE_TOL(out_values(y2, S),
                           mha_ref(m, values(xk), values(xk), values(xk), N, S, S, causal_kpm, &w), t);
      }
      // unbatched [L, E]
      {
        const Tensor x1 = xq.select(0, 1), k1 = xk.select(0, 1);
        auto [y, wt] = m(x1, k1, k1, {.key_padding_mask = kpm.select(0, 1)});
        CHECK(y.shape() == Shape{L, E});
        REQUIRE(wt.shape() == Shape{L, S});
        const auto kv1 = values(kpm.select(0, 1));
        const auto ref = mha_ref(m, values(x1), values(k1), values(k1), 1, L, S,
                                 [&](int64_t, int64_t, int64_t, int64_t j) { return kv1[j] != 0 ? -kInf : 0.0; },
                                 &w);
        HG_CHECK_CLOSE_TOL(y, ref, t);
        HG_CHECK_CLOSE_TOL(wt, head_mean(w, 1, H, L, S), t);
      }
    }
}

TEST_CASE("MultiheadAttention: gradients, dropout only in training, autocast, errors", "[nn][mha]") {
  nn::MultiheadAttention m(8, 2, {.dropout = 0.5, .batch_first = true});
  m.to(hg::float64);
  m.eval();
  const Tensor x = hgtest::leaf({2, 5, 8});
  HG_GRADCHECK(
      [&](const std::vector<Tensor>& in) { return std::get<0>(m(in[0], in[0], in[0], {.is_causal = true})); }, {x});
  HG_GRADCHECK([&](const std::vector<Tensor>& in) { return std::get<1>(m(in[0], in[0], in[0])); }, {x});
  auto [y, w] = m(x, x, x);
  y.sum().backward();
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
  // eval: deterministic; training: dropout on the weights, the kept ones scaled by 2
  auto [ye, we] = m(x, x, x, {.average_attn_weights = false});
  auto [ye2, we2] = m(x, x, x, {.average_attn_weights = false});
  CHECK(hgtest::same_bits(ye, ye2));
  m.train();
  auto [yt, wt] = m(x, x, x, {.average_attn_weights = false});
  const auto a = values(wt), b = values(we);
  int64_t dropped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0) {
      ++dropped;
    } else {
      CHECK(std::abs(a[i] - 2.0 * b[i]) < 1e-12);
    }
  }
  CHECK(dropped > 0);
  CHECK(dropped < static_cast<int64_t>(a.size()));
  m.eval();

  // CPU autocast: float32 module, bfloat16 attention and output
  nn::MultiheadAttention m32(8, 2, {.batch_first = true});
  const Tensor x32 = hgtest::uniform({2, 5, 8}, hg::float32);
  const auto ref = values(std::get<0>(m32(x32, x32, x32)));
  {
    hg::amp::autocast region(hg::DeviceType::CPU);
    auto [ya, wa] = m32(x32, x32, x32, {.need_weights = false});
    CHECK(ya.dtype() == hg::bfloat16);
    auto [yb, wb] = m32(x32, x32, x32);
    CHECK(yb.dtype() == hg::bfloat16);
    CHECK(wb.dtype() == hg::bfloat16);
    HG_CHECK_CLOSE_TOL(ya, ref, 3e-2);
    HG_CHECK_CLOSE_TOL(yb, ref, 3e-2);
  }

  const Tensor x3 = hgtest::uniform({2, 5, 8}, hg::float32);
  hgtest::expect_errors({
      {"wrong embed dim", [&] { m32(hgtest::uniform({2, 5, 6}, hg::float32), x3, x3); },
       {"MultiheadAttention", "embed_dim (8)"}},
      {"1-d input", [&] { m32(hgtest::uniform({8}, hg::float32), x3, x3); }, {"MultiheadAttention", "3-d"}},
      {"key_padding_mask shape", [&] { m32(x3, x3, x3, {.key_padding_mask = hgtest::random_bool({2, 4})}); },
       {"MultiheadAttention", "key_padding_mask", "[2, 5]"}},
      {"attn_mask shape", [&] { m32(x3, x3, x3, {.attn_mask = hgtest::random_bool({5, 4})}); },
       {"MultiheadAttention", "attn_mask", "[5, 5]"}},
      {"3-d attn_mask", [&] { m32(x3, x3, x3, {.attn_mask = hgtest::random_bool({2, 5, 5})}); },
       {"MultiheadAttention", "[4, 5, 5]"}},
      {"batch sizes", [&] { m32(x3, hgtest::uniform({3, 5, 8}, hg::float32), hgtest::uniform({3, 5, 8}, hg::float32)); },
       {"MultiheadAttention", "batch size"}},
  });
}

// Hidden ("[.interop]"): CTest's test_nn:interop runs it where /usr/bin/python3
// has torch (skipped elsewhere). PyTorch loads our state dicts into its own
// LayerNorm and MultiheadAttention and compares their outputs with ours.
TEST_CASE("LayerNorm and MultiheadAttention match PyTorch's with the same weights", "[nn][mha][.interop]") {
  REQUIRE(std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0);
  const int64_t E = 12, H = 3, N = 2, L = 4, S = 6;
  std::vector<std::pair<std::string, Tensor>> out = {{"dims", hgtest::make({double(E), double(H)}, {2}, hg::int64)}};
  const auto add_state = [&](const std::string& prefix, const nn::Module& m) {
    for (const auto& [k, v] : m.state_dict()) out.emplace_back(prefix + "state." + k, v);
  };
  nn::LayerNorm ln(E);
  {
    hg::NoGradGuard g;
    ln.weight.copy_(hgtest::uniform({E}, hg::float32, 0.5, 1.5));
    ln.bias.copy_(hgtest::uniform({E}, hg::float32));
  }
  ln.to(hg::float64);
  const Tensor lx = hgtest::uniform({3, 5, E}, hg::float64, -2, 4);
  add_state("ln.", ln);
  out.emplace_back("ln.x", lx);
  out.emplace_back("ln.y", ln(lx).detach());
  const Tensor kpm = hgtest::make({0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {N, S}, DType::Bool);
  const Tensor am = hgtest::make({0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, {L, S},
                                 DType::Bool);
  nn::MultiheadAttention seq(E, H), bf(E, H, {.batch_first = true});
  for (auto* m : {&seq, &bf}) {
    hg::NoGradGuard g;
    m->in_proj_bias.copy_(hgtest::uniform({3 * E}, hg::float32, -0.5, 0.5));
    m->out_proj.bias.copy_(hgtest::uniform({E}, hg::float32, -0.5, 0.5));
    m->to(hg::float64);
    m->eval();
  }
  for (const auto& [prefix, m] : {std::pair<std::string, nn::MultiheadAttention*>{"mha.", &seq}, {"mha_bf.", &bf}}) {
    const Shape qs = m->batch_first ? Shape{N, L, E} : Shape{L, N, E}, ks = m->batch_first ? Shape{N, S, E} : Shape{S, N, E};
    const Tensor q = hgtest::uniform(qs, hg::float64), k = hgtest::uniform(ks, hg::float64),
                 v = hgtest::uniform(ks, hg::float64);
    add_state(prefix, *m);
    out.emplace_back(prefix + "q", q);
    out.emplace_back(prefix + "k", k);
    out.emplace_back(prefix + "v", v);
    out.emplace_back(prefix + "kpm", kpm);
    out.emplace_back(prefix + "am", am);
    hg::NoGradGuard g;
    auto [y, w] = (*m)(q, k, v, {.key_padding_mask = kpm, .attn_mask = am});
    out.emplace_back(prefix + "out", y);
    out.emplace_back(prefix + "w", w);
    auto [ys, ws] = (*m)(q, q, q, {.average_attn_weights = false});
    out.emplace_back(prefix + "self_out", ys);
    out.emplace_back(prefix + "self_w", ws);
  }
  hgtest::TempDir dir;
  nn::save_safetensors(dir / "transformer.safetensors", out, {{"writer", "halfgrad"}});
  const std::string cmd =
      "/usr/bin/python3 " HALFGRAD_TESTS_DIR "/nn/transformer_interop.py check " + (dir / "transformer.safetensors");
  CHECK(std::system(cmd.c_str()) == 0);
}
