#pragma once
// bfloat16/float16 parameters without AMP's float32 master weights: the
// options SGD, Adam and AdamW share (at the end of their option structs),
// and the per-parameter state they need. docs/amp.md, "Stochastic rounding".
//
//   master_weights       the optimizer keeps a float32 copy of the parameter
//                        ("master_param" in its state), updates it, and
//                        writes parameter = round-to-nearest(copy);
//   stochastic_rounding  no copy: parameter = SR(parameter + update)
//                        (optim/stochastic_rounding.h), with a Philox stream
//                        keyed by a seed drawn from the global generator
//                        (hg::manual_seed makes it reproducible);
//   state_dtype          the dtype of the state buffers (momentum, Adam's
//                        moments): unset = the parameter's (PyTorch's),
//                        float32 = float32 moments for a bfloat16 parameter.
//
// Neither flag and no state_dtype: PyTorch's behaviour (the update is
// computed in float32 and rounded to nearest into the parameter, so one
// smaller than half an ulp is lost). For float32 and float64 parameters all
// three options do nothing (a model may mix float32 norms with bfloat16
// weights under one optimizer). Both flags at once are an Error.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <halfgrad/core/tensor.h>

namespace halfgrad::optim {

namespace detail {
class OptionReader;
}

// A parameter's state for the options above (a member of SGDState and AdamState).
struct LowPrecisionState {
  int64_t param_index = 0;  // over all groups (set by each step): part of the SR counter
  Tensor master_param;  // master_weights: the float32 copy, on the parameter's device
  // stochastic_rounding: the stream's key, and the applied steps that used
  // it (the counter's step), on the host path; the CUDA fused path counts on
  // the device (float32, as Adam's step), so a skipped step is not counted.
  std::optional<uint64_t> sr_seed;
  int64_t sr_step = 0;
  Tensor device_sr_step;
  int64_t sr_steps() const;  // applied steps, wherever counted (CUDA: waits for the GPU)
};

namespace low_precision {

bool is_16bit_float(DType dtype);  // bfloat16 or float16 (the formats these options serve)

// What an optimizer's options ask of one parameter.
struct Config {
  bool master_weights = false;
  bool stochastic_rounding = false;
  std::optional<DType> state_dtype;
};
template <typename O>
Config config(const O& o) {
  return {o.master_weights, o.stochastic_rounding, o.state_dtype};
}

// check_options: both flags at once, or a state_dtype that is not floating.
void check(const char* op, const Config& c);
// True when parameter p takes the low-precision loops (a bfloat16/float16
// parameter with any of the options set); false: the usual path.
bool applies(const Tensor& p, const Config& c);
// The dtype of p's state buffers (an Error for a state_dtype that does not
// fit p, such as bfloat16 state for a float16 parameter).
DType state_dtype(const char* op, const Tensor& p, const Config& c);

// state_dict's param_groups: "master_weights", "stochastic_rounding" (0/1)
// and "state_dtype" (0: the parameter's, 1: float32, 2: bfloat16, 3:
// float16), written only when not the default, so a state dict without them
// (PyTorch's) reads as the defaults.
void save(std::map<std::string, double>& options, const Config& c);
Config load(detail::OptionReader& r);
template <typename O>
void load_into(detail::OptionReader& r, O& o) {
  const Config c = load(r);
  o.master_weights = c.master_weights;
  o.stochastic_rounding = c.stochastic_rounding;
  o.state_dtype = c.state_dtype;
}

// A fresh seed for an optimizer's SR stream, from the global CPU generator
// (consumes one of its counters).
uint64_t draw_seed();

}  // namespace low_precision
}  // namespace halfgrad::optim
