#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

void Optimizer::zero_grad(bool set_to_none) {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    for (const auto& p : group_params(g)) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard no_grad;
        grad.zero_();
      }
    }
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const auto& p : group_params(g)) out.push_back(p);
  return out;
}

void Optimizer::check_param(const Tensor& p, size_t index) const {
  HG_CHECK(p.defined(), "{}: parameter {} is an undefined tensor", name(), index);
  HG_CHECK(p.is_floating_point(), "{}: parameter {} is {}; only floating tensors can be optimized", name(), index,
           p.describe());
  HG_CHECK(p.is_leaf(),
           "{}: parameter {} ({}) is not a leaf tensor (it has a grad_fn), so it never receives a .grad. Optimize "
           "the tensor it was computed from, or make it a leaf with detach().requires_grad_().",
           name(), index, p.describe());
}

}  // namespace halfgrad::optim

namespace halfgrad::optim {

std::vector<Tensor> Optimizer::scaled_grads() const {
  std::vector<Tensor> grads;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const auto& p : group_params(g))
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace halfgrad::optim

#include <algorithm>
#include <cmath>

#include <halfgrad/ops/ops.h>

namespace halfgrad::optim::detail {

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}
bool taken(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}
}  // namespace

double OptionReader::number(const std::string& key) {
  auto v = optional(key);
  HG_CHECK(v.has_value(),
           "{}: param_groups[{}] has no option \"{}\"; a state dict from this optimizer's state_dict() has it", op_,
           group_, key);
  return *v;
}

bool OptionReader::flag(const std::string& key) {
  const double v = number(key);
  HG_CHECK(v == 0.0 || v == 1.0, "{}: param_groups[{}] option \"{}\" is {}; a boolean option must be 0 or 1", op_,
           group_, key, v);
  return v == 1.0;
}

std::optional<double> OptionReader::optional(const std::string& key) {
  taken_.push_back(key);
  auto it = options_.find(key);
  if (it == options_.end()) return std::nullopt;
  HG_CHECK(!std::isnan(it->second), "{}: param_groups[{}] option \"{}\" is NaN", op_, group_, key);
  return it->second;
}

void OptionReader::optional_zero(const std::string& key, const char* remedy) {
  auto v = optional(key);
  HG_CHECK(!v || *v == 0.0, "{}: param_groups[{}] option \"{}\" is {}, which is not supported: {}", op_, group_, key,
           *v, remedy);
}

void OptionReader::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [k, v] : options_)
    if (k != "params" && !taken(taken_, k)) unknown.push_back(k);
  HG_CHECK(unknown.empty(),
           "{}: param_groups[{}] has unknown option(s) {}; known here: {}. Was the state dict saved from another "
           "optimizer?",
           op_, group_, join_keys(unknown), join_keys(taken_));
}

const Tensor& BufferReader::get(const std::string& key) {
  taken_.push_back(key);
  auto it = buffers_.find(key);
  HG_CHECK(it != buffers_.end(), "{}: state[{}] has no \"{}\"", op_, index_, key);
  HG_CHECK(it->second.defined(), "{}: state[{}][\"{}\"] is an undefined tensor", op_, index_, key);
  return it->second;
}

Tensor BufferReader::like_param(const std::string& key, DType dtype) {
  const Tensor& src = get(key);
  HG_CHECK(src.shape() == param_.shape() && src.dtype() == dtype,
           "{}: state[{}][\"{}\"] is {} but parameter {} is {} and this buffer is {}; a buffer must have its "
           "parameter's shape and dtype (or the state_dtype its options give). Load a state dict saved from an "
           "optimizer over the same parameters in the same order, with the same state_dtype (and convert the "
           "model's dtype after loading, not before)",
           op_, index_, key, src.describe(), index_, param_.describe(), dtype_name(dtype));
  NoGradGuard no_grad;
  Tensor out = dtype == param_.dtype() ? empty_like(param_) : empty(param_.shape(), TensorOptions(dtype, param_.device()));
  out.copy_(src);
  return out;
}

uint64_t BufferReader::bits64(const std::string& key) {
  const Tensor& src = get(key);
  HG_CHECK(src.numel() == 1 && src.dtype() == DType::Int64,
           "{}: state[{}][\"{}\"] is {}; it must be a one-element int64 tensor (a seed's 64 bits)", op_, index_, key,
           src.describe());
  const Tensor host = src.cpu().contiguous();
  return static_cast<uint64_t>(*static_cast<const int64_t*>(host.data_ptr()));
}

int64_t BufferReader::step(const std::string& key) {
  const Tensor& src = get(key);
  HG_CHECK(src.numel() == 1,
           "{}: state[{}][\"{}\"] is {}; a step count is a one-element tensor (PyTorch's float32 0-d tensor)", op_,
           index_, key, src.describe());
  const double v = src.item();  // a CUDA step waits for the device, once per load
  HG_CHECK(std::isfinite(v) && v >= 0.0 && v == std::floor(v) && v < 9.0e15,
           "{}: state[{}][\"{}\"] is {}; a step count must be a whole number >= 0", op_, index_, key, v);
  return static_cast<int64_t>(v);
}

void BufferReader::require(const std::string& key, const char* why) const {
  HG_CHECK(has(key), "{}: state[{}] has no \"{}\", which {}", op_, index_, key, why);
}

void BufferReader::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [k, v] : buffers_)
    if (!taken(taken_, k)) unknown.push_back(k);
  HG_CHECK(unknown.empty(), "{}: state[{}] has unknown or unused buffer(s) {}; was it saved from another optimizer?",
           op_, index_, join_keys(unknown));
}

}  // namespace halfgrad::optim::detail
