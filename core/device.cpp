#include <halfgrad/core/device.h>

#include <fmt/format.h>

#include <charconv>
#include <ostream>

#include <halfgrad/core/dtype.h>
#include <halfgrad/core/error.h>

namespace halfgrad {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index_);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:") {
    int index = -1;
    auto digits = text.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  fail("Device: cannot parse '{}' (expected 'cpu', 'cuda' or 'cuda:N')", text);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

void fail_float8_promotion(DType a, DType b) {
  fail("promote_types({}, {}): fp8 dtypes promote with no other dtype (as in PyTorch): cast the fp8 tensor "
       "to float32 first, or use ops::scaled_mm for fp8 matrix products", dtype_name(a), dtype_name(b));
}

}  // namespace halfgrad
