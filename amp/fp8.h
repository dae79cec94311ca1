#pragma once
// fp8 training with delayed scaling: Transformer Engine's recipe, as a region
// beside autocast (docs/fp8.md).
//
//   hg::amp::Fp8Recipe recipe;                   // E4M3 forward, E5M2 gradients, history 1024
//   hg::nn::enable_fp8(model, recipe);           // each Linear gets its scales and amax history
//   {
//     hg::amp::fp8_autocast region(recipe);      // `with te.fp8_autocast(fp8_recipe=recipe):`
//     logits = model(x);                         // Linear layers run as fp8 GEMMs
//   }
//   loss.backward();                             // their gradients too (E5M2 under Hybrid)
//
// Why a scale per tensor: fp8 holds 2^-9 .. 448 (E4M3) or 2^-16 .. 57344
// (E5M2); a tensor whose values live elsewhere would saturate or vanish. Each
// tensor x is stored as round(x * s) with s = fp8_max / amax / 2^margin, and
// the GEMM multiplies its float32 sums by 1/s_x * 1/s_w. "Delayed": amax comes
// from the history of earlier steps (max over the last amax_history_len, or
// the most recent), so the scale is known before the tensor is, and the amax
// of this step is recorded while quantising -- no pass over the data and no
// host sync just to choose a scale.
#include <cstdint>

#include <halfgrad/core/tensor.h>

namespace halfgrad::amp {

// Which fp8 format each pass uses (Transformer Engine's Format).
enum class Fp8Format : uint8_t {
  E4M3,    // everything in E4M3: more precision, gradients may saturate
  Hybrid,  // forward (activations, weights) E4M3, backward (gradients) E5M2: more range where it is needed
};

// How a history becomes the amax a scale is computed from.
enum class AmaxCompute : uint8_t { Max, MostRecent };

// Transformer Engine's DelayedScaling, with its defaults.
struct Fp8Recipe {
  Fp8Format format = Fp8Format::Hybrid;
  int64_t amax_history_len = 1024;
  AmaxCompute amax_compute_algo = AmaxCompute::Max;
  float margin = 0.f;  // scale = fp8_max / amax / 2^margin
};

// RAII region: Linear layers with fp8 state (nn::enable_fp8) run in fp8 while
// it is open. Per thread; nests (an inner region replaces the recipe, and
// enabled=false turns fp8 off inside); leaving restores the previous state.
class fp8_autocast {
 public:
  explicit fp8_autocast(const Fp8Recipe& recipe = {}, bool enabled = true);
  ~fp8_autocast();
  fp8_autocast(const fp8_autocast&) = delete;
  fp8_autocast& operator=(const fp8_autocast&) = delete;

 private:
  bool prev_enabled_;
  Fp8Recipe prev_recipe_;
};
bool is_fp8_enabled();
const Fp8Recipe& fp8_recipe();  // the innermost open region's

// One layer's fp8 state, three columns: 0 the input, 1 the weight, 2 the
// gradient of the output. All on the layer's device, all float32 but
// `saturated` (int64): scale, scale_inv [3]; amax_history [L, 3], row 0 the
// newest; saturated [3], the count of values clipped to the format's largest
// (delayed scaling clips a little whenever a tensor outgrows its history:
// a count is information, not an alarm).
// When rows move: a forward's scale update moves the input and weight
// columns down one (row 0 then collects this forward's amaxes), a backward's
// moves the gradient column. After a full step row 0 holds that step's three
// amaxes; a forward without backward (evaluation) moves only the first two.
struct Fp8State {
  Tensor scale, scale_inv, amax_history, saturated;
  bool defined() const { return scale.defined(); }
  // Scales 1, an empty history, no saturations.
  static Fp8State create(int64_t amax_history_len, Device device);
};
enum Fp8Column : int64_t { kFp8Input = 0, kFp8Weight = 1, kFp8GradOutput = 2 };

// y = x @ weight^T + bias as an fp8 GEMM: x and weight quantised with the
// state's scales (updated first from the history: delayed scaling), the
// product accumulated in float32, then multiplied by both inverse scales.
// Backward quantises grad_output (E5M2 under Hybrid) and runs dx and dW as
// fp8 GEMMs from the saved fp8 copies of x and weight; dbias is summed from
// the unquantised gradient. The output has x's dtype, or autocast's
// lower-precision dtype inside an autocast region. x: [..., in].
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8State& state,
                  const Fp8Recipe& recipe);

}  // namespace halfgrad::amp
