#include <halfgrad/optim/low_precision.h>

#include <halfgrad/core/philox.h>
#include <halfgrad/ops/ops.h>
#include <halfgrad/optim/low_precision_impl.h>
#include <halfgrad/core/random.h>
#include <halfgrad/optim/optimizer.h>

namespace halfgrad::optim {

int64_t LowPrecisionState::sr_steps() const {
  return device_sr_step.defined() ? static_cast<int64_t>(device_sr_step.item<float>()) : sr_step;
}

namespace low_precision {

namespace {
// The state_dict codes of state_dtype (see low_precision.h).
double dtype_code(const std::optional<DType>& d) {
  if (!d) return 0.0;
  switch (*d) {
    case DType::Float32: return 1.0;
    case DType::BFloat16: return 2.0;
    case DType::Float16: return 3.0;
    default: fail("state_dtype {} has no state_dict code", dtype_name(*d));
  }
}
}  // namespace

bool is_16bit_float(DType dtype) { return dtype == DType::BFloat16 || dtype == DType::Float16; }

void check(const char* op, const Config& c) {
  HG_CHECK(!(c.master_weights && c.stochastic_rounding),
           "{}: master_weights and stochastic_rounding are both set; choose one. With master weights the update "
           "is kept in the float32 copy and the parameter is only its rounded image, so rounding that image "
           "stochastically adds noise and keeps nothing; stochastic rounding is the way to train without the copy",
           op);
  HG_CHECK(!c.state_dtype || *c.state_dtype == DType::Float32 || *c.state_dtype == DType::BFloat16 ||
               *c.state_dtype == DType::Float16,
           "{}: state_dtype {} is not supported; use float32 (float32 state for a bfloat16/float16 parameter), or "
           "leave it unset (the state in the parameter's dtype, as PyTorch)",
           op, dtype_name(*c.state_dtype));
}

bool applies(const Tensor& p, const Config& c) {
  return is_16bit_float(p.dtype()) &&
         (c.master_weights || c.stochastic_rounding || (c.state_dtype && *c.state_dtype != p.dtype()));
}

DType state_dtype(const char* op, const Tensor& p, const Config& c) {
  if (!is_16bit_float(p.dtype()) || !c.state_dtype) return p.dtype();
  const DType d = *c.state_dtype;
  HG_CHECK(d == DType::Float32 || d == p.dtype(),
           "{}: state_dtype {} for parameter {}; the state of a {} parameter is float32 or {}. Set state_dtype to "
           "float32, or leave it unset",
           op, dtype_name(d), p.describe(), dtype_name(p.dtype()), dtype_name(p.dtype()));
  return d;
}

void save(std::map<std::string, double>& options, const Config& c) {
  if (c.master_weights) options["master_weights"] = 1.0;
  if (c.stochastic_rounding) options["stochastic_rounding"] = 1.0;
  if (c.state_dtype) options["state_dtype"] = dtype_code(c.state_dtype);
}

Config load(detail::OptionReader& r) {
  Config c;
  auto flag = [&](const char* key) {
    const auto v = r.optional(key);
    if (!v) return false;
    HG_CHECK(*v == 0.0 || *v == 1.0, "load_state_dict: option \"{}\" is {}; a boolean option must be 0 or 1", key,
             *v);
    return *v == 1.0;
  };
  c.master_weights = flag("master_weights");
  c.stochastic_rounding = flag("stochastic_rounding");
  if (const auto code = r.optional("state_dtype")) {
    constexpr DType kCodes[] = {DType::Float32, DType::BFloat16, DType::Float16};
    HG_CHECK(*code == 0.0 || *code == 1.0 || *code == 2.0 || *code == 3.0,
             "load_state_dict: option \"state_dtype\" is {}; it is 0 (the parameter's dtype), 1 (float32), 2 "
             "(bfloat16) or 3 (float16)",
             *code);
    if (*code != 0.0) c.state_dtype = kCodes[static_cast<int>(*code) - 1];
  }
  return c;
}

uint64_t draw_seed() {
  const rng::PhiloxState s = rng::cpu_reserve(1);
  const philox::Words w = philox::draw(s.seed, s.offset, 0);
  return static_cast<uint64_t>(w.x[0]) | (static_cast<uint64_t>(w.x[1]) << 32);
}

math::Rounding rounding(const Config& c) {
  return c.master_weights ? math::Rounding::Master
                          : c.stochastic_rounding ? math::Rounding::Stochastic : math::Rounding::Nearest;
}

namespace {
// The master copy goes where its parameter went (Module::to), once.
void follow_master(LowPrecisionState& s, const Tensor& p, const Config& c) {
  if (s.master_param.defined() && s.master_param.device() != p.device()) s.master_param = s.master_param.to(p.device());
  if (c.master_weights && !s.master_param.defined()) s.master_param = p.detach().to(DType::Float32).contiguous();
  if (c.master_weights && !s.master_param.is_contiguous()) s.master_param = s.master_param.contiguous();
}
}  // namespace

sr::Key prepare_host(LowPrecisionState& s, const Tensor& p, const Config& c, uint64_t seed, int64_t param_index) {
  if (s.device_sr_step.defined()) {
    s.sr_step = s.sr_steps();  // from the device path: waits for the GPU, once
    s.device_sr_step = Tensor();
  }
  follow_master(s, p, c);
  if (c.stochastic_rounding) {
    if (!s.sr_seed) s.sr_seed = seed;
    ++s.sr_step;
  }
  return {s.sr_seed.value_or(0), static_cast<uint32_t>(param_index), static_cast<uint32_t>(s.sr_step)};
}

void prepare_device(LowPrecisionState& s, const Tensor& p, const Config& c, uint64_t seed) {
  follow_master(s, p, c);
  if (!c.stochastic_rounding) return;
  if (!s.sr_seed) s.sr_seed = seed;
  if (!s.device_sr_step.defined()) {
    s.device_sr_step = full({}, static_cast<double>(s.sr_step), TensorOptions(DType::Float32, p.device()));
    s.sr_step = 0;  // one count, kept where it is advanced
  } else if (s.device_sr_step.device() != p.device()) {
    s.device_sr_step = s.device_sr_step.to(p.device());
  }
}

void save_state(std::map<std::string, Tensor>& out, const LowPrecisionState& s) {
  if (s.master_param.defined()) out.emplace("master_param", s.master_param.detach().clone());
  if (s.sr_seed) {
    Tensor seed = empty({}, TensorOptions(DType::Int64));
    *static_cast<int64_t*>(seed.data_ptr()) = static_cast<int64_t>(*s.sr_seed);  // the 64 bits as they are
    out.emplace("sr_seed", seed);
    out.emplace("sr_step", full({}, static_cast<double>(s.sr_steps()), TensorOptions(DType::Float32)));
  }
}

LowPrecisionState load_state(detail::BufferReader& r) {
  LowPrecisionState s;
  if (r.has("master_param")) s.master_param = r.like_param("master_param", DType::Float32);
  if (r.has("sr_seed")) {
    s.sr_seed = r.bits64("sr_seed");
    s.sr_step = r.step("sr_step");
  }
  return s;
}

}  // namespace low_precision
}  // namespace halfgrad::optim
