// Peak memory (see memory.h): the CUDA pool's high-water mark, or the CPU
// process's peak RSS.
#include <halfgrad/train/memory.h>

#include <sys/resource.h>

#include <fmt/format.h>

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::train {

uint64_t peak_memory_bytes(Device device) {
  if (device.is_cuda()) return cuda::pool_used_high(device.index());
  rusage usage{};
  HG_CHECK(getrusage(RUSAGE_SELF, &usage) == 0, "peak_memory_bytes(cpu): getrusage failed");
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports kB
}

bool reset_peak_memory(Device device) {
  if (!device.is_cuda()) return false;
  cuda::reset_pool_used_high(device.index());
  return true;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  // Move up while the value would print as 1024.0 or more in this unit.
  while (v >= 1023.95 && u < 5) v /= 1024.0, ++u;
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace halfgrad::train
