#pragma once
// A lookup table (torch.nn.Embedding): row i of "weight" [num_embeddings,
// embedding_dim] for each index i of the input (hg::embedding).
//
// weight ~ N(0, 1) (PyTorch's init, drawn from the global generator), with row
// padding_idx zeroed; that row gets no gradient, so it stays as it is while
// training. A negative padding_idx counts from the end, as in PyTorch. The
// gradient is dense.
//
//   hg::nn::Embedding tok(vocab_size, 64);
//   hg::nn::Embedding tok2(vocab_size, 64, {.padding_idx = 0});
//   auto x = tok(tokens);                              // tokens int64 [B, T] -> [B, T, 64]
#include <optional>
#include <string>

#include <halfgrad/nn/module.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::nn {

struct EmbeddingOptions {
  std::optional<int64_t> padding_idx = std::nullopt;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});

  Tensor forward(const Tensor& indices) const;
  Tensor operator()(const Tensor& indices) const { return with_forward_hooks(forward(indices)); }
  // weight ~ N(0, 1), row padding_idx = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // in [0, num_embeddings) once constructed
  Tensor weight;                       // [num_embeddings, embedding_dim], float32
};

}  // namespace halfgrad::nn
