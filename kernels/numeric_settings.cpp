// The float32 matmul precision setting (torch.set_float32_matmul_precision) and
// cuDNN's TF32 switch (torch.backends.cudnn.allow_tf32).
#include <atomic>

#include <halfgrad/kernels/numeric_settings.h>

#include <halfgrad/core/error.h>

namespace halfgrad {

namespace {
// 0: highest (exact float32), 1: high, 2: medium
std::atomic<int> g_precision{0};
std::atomic<bool> g_cudnn_tf32{true};  // PyTorch's default
}  // namespace

void set_float32_matmul_precision(std::string_view precision) {
  int p = -1;
  if (precision == "highest") p = 0;
  if (precision == "high") p = 1;
  if (precision == "medium") p = 2;
  HG_CHECK(p >= 0,
           "set_float32_matmul_precision: unknown precision '{}'; expected 'highest' (exact float32, the default), "
           "'high' (TF32 tensor cores on CUDA) or 'medium' (same as 'high' on CUDA)",
           precision);
  g_precision.store(p, std::memory_order_relaxed);
}

std::string get_float32_matmul_precision() {
  static constexpr const char* kNames[] = {"highest", "high", "medium"};
  return kNames[g_precision.load(std::memory_order_relaxed)];
}

bool float32_matmul_allows_tf32() { return g_precision.load(std::memory_order_relaxed) != 0; }

void set_cudnn_allow_tf32(bool allow) { g_cudnn_tf32.store(allow, std::memory_order_relaxed); }
bool cudnn_allow_tf32() { return g_cudnn_tf32.load(std::memory_order_relaxed); }

}  // namespace halfgrad
