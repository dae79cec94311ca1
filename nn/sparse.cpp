#include <halfgrad/nn/sparse.h>

#include <fmt/format.h>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/nn/init.h>

namespace halfgrad::nn {

Embedding::Embedding(int64_t num_embeddings_, int64_t embedding_dim_, EmbeddingOptions options)
    : num_embeddings(num_embeddings_), embedding_dim(embedding_dim_), padding_idx(options.padding_idx) {
  HG_CHECK(num_embeddings >= 0 && embedding_dim >= 0,
           "Embedding: num_embeddings ({}) and embedding_dim ({}) must be non-negative", num_embeddings,
           embedding_dim);
  if (padding_idx) {
    HG_CHECK(*padding_idx < num_embeddings && *padding_idx >= -num_embeddings,
             "Embedding: padding_idx {} must be within num_embeddings ({})", *padding_idx, num_embeddings);
    if (*padding_idx < 0) *padding_idx += num_embeddings;
  }
  weight = empty({num_embeddings, embedding_dim});
  register_parameter("weight", weight);
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard guard;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(indices, weight, padding_idx); }

std::string Embedding::extra_repr() const {
  // PyTorch: "10, 3, padding_idx=0"
  std::string s = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) s += fmt::format(", padding_idx={}", *padding_idx);
  return s;
}

}  // namespace halfgrad::nn
