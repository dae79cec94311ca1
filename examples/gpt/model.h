#pragma once
// A GPT decoder as in nanoGPT's model.py (Karpathy), written with halfgrad's
// nn layers: token and learned position embeddings, n_layer pre-LayerNorm
// blocks (causal self-attention, then an MLP), a final LayerNorm and a
// language-model head whose weight is the token embedding's (weight tying, as
// nanoGPT and GPT-2). Parameter names follow nanoGPT's (wte, wpe, h.0.ln_1,
// h.0.attn.c_attn, ..., ln_f), without its "transformer." prefix.
//
// Shared by examples/gpt/main.cpp (training) and benchmarks/gpt_step.cpp.
#include <halfgrad.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

namespace hg = halfgrad;

struct Config {
  int64_t vocab_size = 0;
  int64_t block_size = 64;  // the longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
};

// Causal self-attention: one fused Linear makes q, k and v, each split into
// heads; scaled_dot_product_attention(is_causal=true) lets position t attend
// to positions <= t; c_proj mixes the heads again.
struct CausalSelfAttention : hg::nn::Module {
  hg::nn::Linear c_attn, c_proj;
  int64_t n_head, n_embd;
  double dropout;

  explicit CausalSelfAttention(const Config& c)
      : c_attn(c.n_embd, 3 * c.n_embd), c_proj(c.n_embd, c.n_embd), n_head(c.n_head), n_embd(c.n_embd),
        dropout(c.dropout) {
    register_module("c_attn", c_attn);
    register_module("c_proj", c_proj);
  }

  hg::Tensor forward(const hg::Tensor& x) const {
    const int64_t B = x.size(0), T = x.size(1), C = n_embd, hs = C / n_head;
    const hg::Tensor qkv = c_attn(x);  // [B, T, 3C]
    // [B, T, C] -> [B, n_head, T, hs]
    auto heads = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, n_head, hs}).transpose(1, 2); };
    hg::Tensor y = hg::scaled_dot_product_attention(heads(0), heads(1), heads(2), {},
                                                    is_training() ? dropout : 0.0, /*is_causal=*/true);
    y = y.transpose(1, 2).reshape({B, T, C});  // the heads side by side again
    return hg::dropout(c_proj(y), dropout, is_training());
  }
};

// Linear 4C with GELU (fused into the GEMM), Linear back to C.
struct MLP : hg::nn::Module {
  hg::nn::Linear c_fc, c_proj;
  double dropout;

  explicit MLP(const Config& c)
      : c_fc(c.n_embd, 4 * c.n_embd, /*bias=*/true, hg::Activation::GELU), c_proj(4 * c.n_embd, c.n_embd),
        dropout(c.dropout) {
    register_module("c_fc", c_fc);
    register_module("c_proj", c_proj);
  }

  hg::Tensor forward(const hg::Tensor& x) const { return hg::dropout(c_proj(c_fc(x)), dropout, is_training()); }
};

struct Block : hg::nn::Module {
  hg::nn::LayerNorm ln_1;
  CausalSelfAttention attn;
  hg::nn::LayerNorm ln_2;
  MLP mlp;

  explicit Block(const Config& c) : ln_1(c.n_embd), attn(c), ln_2(c.n_embd), mlp(c) {
    register_module("ln_1", ln_1);
    register_module("attn", attn);
    register_module("ln_2", ln_2);
    register_module("mlp", mlp);
  }

  hg::Tensor forward(const hg::Tensor& x) const {
    hg::Tensor h = x + attn.forward(ln_1(x));  // pre-LayerNorm residual blocks
    return h + mlp.forward(ln_2(h));
  }
};

struct GPT : hg::nn::Module {
  Config config;
  hg::nn::Embedding wte, wpe;
  hg::nn::ModuleList h;  // the blocks, children "0", "1", ... (h.0.attn..., as nanoGPT's)
  hg::nn::LayerNorm ln_f;

  explicit GPT(const Config& c) : config(c), wte(c.vocab_size, c.n_embd), wpe(c.block_size, c.n_embd), ln_f(c.n_embd) {
    HG_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
             "GPT: every size must be positive (vocab {}, block {}, layers {}, heads {}, n_embd {})", c.vocab_size,
             c.block_size, c.n_layer, c.n_head, c.n_embd);
    HG_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd ({}) must be a multiple of n_head ({})", c.n_embd, c.n_head);
    HG_CHECK(c.dropout >= 0 && c.dropout < 1, "GPT: dropout must be in [0, 1), got {}", c.dropout);
    register_module("wte", wte);
    register_module("wpe", wpe);
    for (int64_t i = 0; i < c.n_layer; ++i) h.append(std::make_shared<Block>(c));
    register_module("h", h);
    register_module("ln_f", ln_f);
    init_weights();
  }

  // nanoGPT's init: every Linear and Embedding weight ~ N(0, 0.02), biases 0,
  // the residual projections (c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)).
  void init_weights() {
    hg::NoGradGuard no_grad;
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
    for (auto& [name, p] : named_parameters()) {
      if (name.ends_with(".bias")) hg::nn::init::zeros_(p);  // LayerNorm's are 0 already
      else if (p.dim() >= 2) hg::nn::init::normal_(p, 0.0, name.ends_with("c_proj.weight") ? residual_std : 0.02);
      // LayerNorm weights stay 1
    }
  }

  // idx: int64 [B, T] token ids, T <= block_size. Returns the logits [B, T, vocab].
  hg::Tensor forward(const hg::Tensor& idx) const {
    const int64_t T = idx.size(1);
    HG_CHECK(T <= config.block_size, "GPT: a context of {} tokens is longer than block_size {}", T,
             config.block_size);
    hg::Tensor pos = hg::arange(T, hg::TensorOptions(hg::kLong, idx.device()));
    hg::Tensor x = hg::dropout(wte(idx) + wpe(pos), config.dropout, is_training());
    for (const hg::nn::Module& block : h) x = static_cast<const Block&>(block).forward(x);
    x = ln_f(x);
    return hg::linear(x, wte.weight);  // the head shares the token embedding's weight
  }

  // Parameters without the position embedding's (nanoGPT's count).
  int64_t num_parameters_without_positions() const { return num_parameters() - wpe.weight.numel(); }
};

}  // namespace gpt
