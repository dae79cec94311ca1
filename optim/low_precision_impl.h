#pragma once
// Inside the library: the low-precision path's state handling (shared by
// SGD and Adam/AdamW) and its CPU loops. optim/low_precision.h has the options.
#include <map>
#include <string>

#include <halfgrad/optim/low_precision.h>
#include <halfgrad/optim/low_precision_math.h>
#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim::low_precision {

math::Rounding rounding(const Config& c);

// Before a host-path update of p: the state follows p to its device (a
// count kept on the device comes back to the host), the float32 master copy
// is made from p on first use, the SR seed is set (to `seed`, the
// optimizer's, unless a state dict gave one) and, with SR, the step counted.
// Returns the element stream's key.
sr::Key prepare_host(LowPrecisionState& s, const Tensor& p, const Config& c, uint64_t seed, int64_t param_index);
// The same before the fused CUDA path, which counts the SR steps on the
// device (device_sr_step, made here); the kernel advances the count.
void prepare_device(LowPrecisionState& s, const Tensor& p, const Config& c, uint64_t seed);

// state_dict: "master_param" (float32, the parameter's shape), "sr_seed"
// (an int64 scalar holding the seed's 64 bits) and "sr_step" (a float32
// scalar, as Adam's step), where present.
void save_state(std::map<std::string, Tensor>& out, const LowPrecisionState& s);
LowPrecisionState load_state(detail::BufferReader& r);

}  // namespace halfgrad::optim::low_precision

namespace halfgrad::optim::fused {

// The CPU loops of a contiguous bfloat16/float16 parameter: grad in the
// parameter's dtype, master float32 (or undefined), state buffers in float32
// or the parameter's dtype (or undefined where unused). inv_scale != 1: the
// gradient is unscaled and written back, as in the float32 loops.
void sgd_low_precision(const Tensor& p, const Tensor& g, const Tensor& master, const Tensor& buf, float inv_scale,
                       const math::SGDHyper& h, math::Rounding r, const sr::Key& key);
void adam_low_precision(const Tensor& p, const Tensor& g, const Tensor& master, const Tensor& m, const Tensor& v,
                        const Tensor& vmax, float inv_scale, const math::AdamHyper& h, math::Rounding r,
                        const sr::Key& key);

}  // namespace halfgrad::optim::fused
