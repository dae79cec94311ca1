// torch.multinomial (ops/sort_ops.h). The weights are checked here, as
// PyTorch does, from one host copy of a per-row summary (minimum, sum, count
// of positive weights: a device sync on CUDA), so the kernels
// (kernels/kernel_list.h, multinomial) only ever see valid rows.
#include <cmath>

#include <halfgrad/dispatch/dispatch.h>
#include <halfgrad/kernels/kernels.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/ops/util.h>

namespace halfgrad {

namespace {
// PyTorch's checks of every row of the [rows, n] weights w.
void check_rows(const Tensor& input, const Tensor& w, int64_t num_samples, bool replacement) {
  const int64_t rows = w.size(0);
  if (rows == 0) return;
  const Tensor wd = w.to(DType::Float64);
  const Tensor summary = stack({amin(wd, {1}), sum(wd, {1}), sum(gt(wd, 0.0).to(DType::Float64), {1})}).cpu();
  const double* s = summary.data<double>();
  const auto row = [&](int64_t r) { return input.dim() == 1 ? std::string() : fmt::format(" (row {})", r); };
  for (int64_t r = 0; r < rows; ++r) {
    const double min = s[r], total = s[rows + r], positives = s[2 * rows + r];
    // a NaN or an infinity makes the row's sum non-finite
    HG_CHECK(std::isfinite(total) && min >= 0,
             "multinomial: probability tensor contains either `inf`, `nan` or element < 0{} in {} (smallest "
             "element {}, sum {}); pass non-negative finite weights, e.g. softmax(logits) or exp(log_probs)",
             row(r), input.describe(), min, total);
    HG_CHECK(total > 0,
             "multinomial: invalid multinomial distribution (sum of probabilities <= 0){} in {}: every weight of "
             "the row is 0; give each row at least one positive weight",
             row(r), input.describe());
    HG_CHECK(replacement || positives >= static_cast<double>(num_samples),
             "multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative "
             "category to sample){} in {}: {} positive weights for {} samples without replacement; ask for at "
             "most {} or pass replacement=true",
             row(r), input.describe(), static_cast<int64_t>(positives), num_samples,
             static_cast<int64_t>(positives));
  }
}
}  // namespace

Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement, std::optional<Generator> generator) {
  ops::check_defined("multinomial", {{"input", &input}});
  HG_CHECK(input.dim() == 1 || input.dim() == 2,
           "multinomial: prob_dist must be 1 or 2 dim, got {}; pass one distribution [n] or a batch of them "
           "[rows, n] (reshape to 2-d first)",
           input.describe());
  HG_CHECK(is_floating(input.dtype()),
           "multinomial only supports floating-point dtypes for input, got {} ({}); convert the weights with "
           ".to(hg::kFloat)",
           dtype_name(input.dtype()), input.describe());
  HG_CHECK(num_samples > 0, "multinomial: cannot sample n_sample <= 0 samples (num_samples = {}) from {}",
           num_samples, input.describe());
  const int64_t n = input.size(-1);
  HG_CHECK(n > 0, "multinomial: {} has no categories (its last dim is 0); there is nothing to sample",
           input.describe());
  HG_CHECK(replacement || num_samples <= n,
           "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement ({} samples from "
           "{} categories of {}); pass replacement=true or ask for at most {}",
           num_samples, n, input.describe(), n);
  Generator* gen = ops::generator_for("multinomial", generator, input.device());
  return dispatch::call_nograd(OpId::multinomial, {input}, [&](const std::vector<Tensor>& in) {
    const Tensor w = (in[0].dim() == 1 ? in[0].unsqueeze(0) : in[0]).contiguous();
    check_rows(in[0], w, num_samples, replacement);
    Tensor out = make_tensor({w.size(0), num_samples}, TensorOptions(DType::Int64, w.device()));
    if (out.numel() > 0) kernels::multinomial(w, replacement, out, gen);
    return in[0].dim() == 1 ? out.view({num_samples}) : out;
  });
}

}  // namespace halfgrad
