// embedding (torch.nn.functional.embedding): a composite of index_select (and,
// with padding_idx, a where that hands the padding positions a detached copy of
// the same rows, so their gradient goes nowhere). Autograd records the inner
// ops; the gradient is dense and repeated indices add up (index_select's
// backward). No autocast row, as in PyTorch.
#include <halfgrad/core/error.h>
#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
  ops::check_defined("embedding", {{"input", &input}, {"weight", &weight}});
  HG_CHECK(input.dtype() == DType::Int64,
           "embedding: the indices {} must be int64 (PyTorch: Long); cast them with .to(hg::int64)",
           input.describe());
  HG_CHECK(weight.dim() == 2, "embedding: weight {} must be 2-d [num_embeddings, embedding_dim]",
           weight.describe());
  const int64_t n = weight.shape()[0];
  if (padding_idx) {
    HG_CHECK(*padding_idx < n && *padding_idx >= -n,
             "embedding: padding_idx {} must be within num_embeddings ({}) of weight {}", *padding_idx, n,
             weight.describe());
    if (*padding_idx < 0) *padding_idx += n;
  }
  dispatch::check_same_device("embedding", {input, weight});
  if (input.numel() > 0) {
    // One read of the smallest and largest index (one sync on CUDA, whose
    // index_select does not check).
    const Tensor flat = input.reshape({input.numel()});
    const Tensor range = stack({amin(flat), amax(flat)}).cpu();
    const int64_t lo = range.select(0, 0).item<int64_t>(), hi = range.select(0, 1).item<int64_t>();
    const int64_t bad = lo < 0 ? lo : hi;
    HG_CHECK(lo >= 0 && hi < n,
             "embedding: index {} is out of range for weight {} with num_embeddings {}: indices must be in [0, {})",
             bad, weight.describe(), n, n);
  }
  return dispatch::composite(OpId::embedding, {input, weight}, [padding_idx](const std::vector<Tensor>& in) {
    const Tensor &idx = in[0], &w = in[1];
    const Tensor flat = idx.reshape({idx.numel()});
    Tensor rows = index_select(w, 0, flat);
    if (padding_idx && rows.requires_grad()) {
      // Same values; no gradient to the padding row.
      rows = where(eq(flat, static_cast<double>(*padding_idx)).unsqueeze(1), rows.detach(), rows);
    }
    Shape out = idx.shape();
    out.push_back(w.shape()[1]);
    return rows.view(out);
  });
}

}  // namespace halfgrad
