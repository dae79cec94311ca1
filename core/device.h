#pragma once
// Device: where a tensor's storage lives ("cpu", "cuda:0", ...).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace halfgrad {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  Device() = default;
  // Implicit from a DeviceType, as LibTorch's Device(kCUDA): index 0.
  Device(DeviceType type, int index = 0)  // NOLINT(implicit)
      : type_(type), index_(type == DeviceType::CPU ? 0 : index) {}
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // "cpu", "cuda", "cuda:1"; anything else is an Error.
  static Device parse(std::string_view text);

  DeviceType type() const { return type_; }  // what autocast regions are keyed by
  int index() const { return index_; }       // CUDA ordinal; always 0 for the CPU
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::string_view device_type_name(DeviceType t);

// `std::cout << device` prints Device::str() ("cpu", "cuda:0").
std::ostream& operator<<(std::ostream& os, const Device& d);

// LibTorch's torch::kCPU / torch::kCUDA: `t.to(hg::kCUDA)` is `t.to(hg::Device::cuda())`.
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

namespace cuda {
// True when the CUDA backend is built in and a device can be used. Any
// failure of the driver or runtime counts as "no device".
bool is_available();
int device_count();
}  // namespace cuda

}  // namespace halfgrad
