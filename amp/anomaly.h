#pragma once
// Where a non-finite value first appeared: PyTorch's detect_anomaly, made
// dtype-aware. While an amp::DetectNonFinite guard lives (on this thread),
// every op's forward output and every backward formula's gradients are
// checked for inf and NaN, and the first one found is kept with its op, its
// dtype and shape, its inputs, and the policy-table row that chose its dtype.
// Training goes on (under AMP an overflow is expected now and then: the
// GradScaler skips that step); ask first() after a skipped step.
//
//   hg::amp::DetectNonFinite detect;
//   ... forward, scaler.scale(loss).backward() ...
//   if (detect.first()) fmt::print("{}\n", detect.describe());
//   // first non-finite value: forward of exp -> float32[64, 10] cpu (fp32 by the policy table) holds 3 inf, 0 NaN;
//   //   inputs: float32[64, 10] cpu
//
// Each check reads a count from the device (a sync per op on CUDA): a
// debugging mode, as PyTorch's is.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

struct NonFiniteOrigin {
  std::string phase;   // "forward" or "backward"
  std::string op;      // the op (its backward, for "backward")
  std::string tensor;  // the output or gradient that held it: describe()
  std::string policy;  // "fp32 by the policy table", "float16 by the policy table (lower_precision)", ...
  std::vector<std::string> inputs;  // describe() of each defined input (forward) or of the incoming gradient
  int64_t inf = 0, nan = 0;
};

void detail_check_non_finite(const char* phase, const std::string& op, const std::string& policy_row,
                             const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

class DetectNonFinite {
 public:
  DetectNonFinite();
  ~DetectNonFinite();
  DetectNonFinite(const DetectNonFinite&) = delete;
  DetectNonFinite& operator=(const DetectNonFinite&) = delete;

  // The first non-finite value since the guard (or reset()), if any.
  const std::optional<NonFiniteOrigin>& first() const;
  // One line: "first non-finite value: backward of exp -> ...", or "no non-finite value seen".
  std::string describe() const;
  void reset();

 private:
  DetectNonFinite* prev_;
  std::optional<NonFiniteOrigin> first_;
  friend void detail_check_non_finite(const char*, const std::string&, const std::string&,
                                      const std::vector<Tensor>&, const std::vector<Tensor>&);
};

}  // namespace halfgrad::amp
