// Multi-tensor gradient norm and clipping (amp/grad_norm.h): CPU loops here,
// CUDA tensors go to amp/cuda/grad_norm.cu.
#include <halfgrad/amp/grad_norm.h>

#include <algorithm>
#include <type_traits>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/error.h>
#include <halfgrad/ops/ops.h>
#if HALFGRAD_WITH_CUDA
#include <halfgrad/amp/cuda/grad_norm_cuda.h>
#endif

namespace halfgrad::amp {

namespace {

constexpr int64_t kChunk = 16384;  // as the CUDA kernels' chunk: the same partial sums

// The grads on one device, all floating; returns that device.
Device check_grads(const char* op, const std::vector<Tensor>& grads) {
  HG_CHECK(!grads.empty(), "{}: no gradients", op);
  const Device device = grads[0].device();
  for (const Tensor& g : grads) {
    HG_CHECK(g.defined(), "{}: an undefined gradient", op);
    HG_CHECK(g.is_floating_point(), "{}: gradient {} is not floating (float32, float16, bfloat16 or float64)", op,
             g.describe());
    HG_CHECK(g.device() == device,
             "{}: gradient {} is on {} but gradient {} is on {}; all gradients must be on one device (clip each "
             "device's parameters separately)",
             op, g.describe(), g.device().str(), grads[0].describe(), device.str());
  }
#if !HALFGRAD_WITH_CUDA
  HG_CHECK(device.is_cpu(), "{}: gradient {} is a CUDA tensor but this halfgrad was built without CUDA", op,
           grads[0].describe());
#endif
  return device;
}

// One chunk's accumulated terms (sum, or max for inf), in A; `nan` records a
// NaN for the inf norm (a max would drop it).
template <typename T, typename A>
A chunk_acc(const T* p, int64_t n, grad_norm::Mode mode, A pw, bool& nan) {
  A acc = 0;
  switch (mode) {
    case grad_norm::kTwo:
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(p[i]);
        acc += v * v;
      }
      break;
    case grad_norm::kOne:
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(p[i]);
        acc += v < A(0) ? -v : v;
      }
      break;
    case grad_norm::kGeneral:
      for (int64_t i = 0; i < n; ++i) acc += grad_norm::term(static_cast<A>(p[i]), mode, pw);
      break;
    case grad_norm::kInf: {
      int bad = 0;
#pragma omp simd reduction(max : acc) reduction(| : bad)
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(p[i]);
        const A a = v < A(0) ? -v : v;
        bad |= v != v;
        acc = a > acc ? a : acc;
      }
      nan |= bad != 0;
      break;
    }
  }
  return acc;
}

template <typename T>
void accumulate(const Tensor& g, grad_norm::Mode mode, double pw, double& total, bool& nan) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* p = static_cast<const T*>(g.data_ptr());
  const int64_t n = g.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks));
  std::vector<char> bad(static_cast<size_t>(chunks), 0);
  // chunks in parallel, combined below in order: the same sum whatever the threads
#pragma omp parallel for if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    bool b = false;
    part[c] = static_cast<double>(chunk_acc<T, A>(p + c * kChunk, std::min(kChunk, n - c * kChunk), mode,
                                                  static_cast<A>(pw), b));
    bad[c] = b;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    if (mode == grad_norm::kInf) total = std::max(total, part[c]);
    else total += part[c];
    nan |= bad[c] != 0;
  }
}

template <typename T>
void scale(const Tensor& g, float coef) {
  T* p = static_cast<T*>(g.data_ptr());
  const int64_t n = g.numel();
  if constexpr (std::is_same_v<T, double>) {
    const double c = coef;
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] *= c;
  } else {
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<float>(p[i]) * coef);
  }
}

}  // namespace

Tensor multi_tensor_norm(const std::vector<Tensor>& grads, double norm_type) {
  constexpr const char* op = "multi_tensor_norm";
  HG_CHECK(norm_type > 0.0, "{}: norm_type {} is not supported (use a p > 0, or inf for the max norm)", op,
           norm_type);
  const Device device = check_grads(op, grads);
  NoGradGuard no_grad;
  std::vector<Tensor> dense;  // contiguous views or copies
  dense.reserve(grads.size());
  for (const Tensor& g : grads) dense.push_back(g.is_contiguous() ? g : g.contiguous());
#if HALFGRAD_WITH_CUDA
  if (device.is_cuda()) return cuda_kernels::multi_tensor_norm(dense, norm_type);
#endif
  const grad_norm::Mode mode = grad_norm::mode_of(norm_type);
  double total = 0.0;
  bool nan = false;
  for (const Tensor& g : dense)
    HG_DISPATCH_FLOATING(g.dtype(), op, [&] { accumulate<scalar_t>(g, mode, norm_type, total, nan); });
  const double norm = nan ? std::nan("") : grad_norm::finish(total, mode, norm_type);
  return full({}, norm, TensorOptions(DType::Float32, device));
}

void multi_tensor_clip(const std::vector<Tensor>& grads, const Tensor& total_norm, double max_norm) {
  constexpr const char* op = "multi_tensor_clip";
  const Device device = check_grads(op, grads);
  HG_CHECK(total_norm.defined() && total_norm.dtype() == DType::Float32 && total_norm.numel() == 1 &&
               total_norm.device() == device,
           "{}: the total norm must be a one-element float32 tensor on the gradients' device {}, got {}", op,
           device.str(), total_norm.defined() ? total_norm.describe() : std::string("an undefined tensor"));
  NoGradGuard no_grad;
  // A non-contiguous grad is scaled in a contiguous copy, then copied back.
  std::vector<Tensor> dense;
  std::vector<size_t> copied;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].is_contiguous()) {
      dense.push_back(grads[i]);
    } else {
      dense.push_back(grads[i].contiguous());
      copied.push_back(i);
    }
  }
  auto write_back = [&] {
    size_t j = 0;
    for (size_t i = 0; i < grads.size(); ++i)
      if (j < copied.size() && copied[j] == i) {
        Tensor(grads[i]).copy_(dense[i]);
        ++j;
      }
  };
#if HALFGRAD_WITH_CUDA
  if (device.is_cuda()) {
    cuda_kernels::multi_tensor_clip(dense, total_norm, max_norm);
    return write_back();
  }
#endif
  const float coef = grad_norm::clip_coef(total_norm.item<float>(), static_cast<float>(max_norm));
  if (coef == 1.0f) return;  // x * 1 == x: nothing to write
  for (const Tensor& g : dense) {
    HG_DISPATCH_FLOATING(g.dtype(), op, [&] { scale<scalar_t>(g, coef); });
    g.bump_version();
  }
  write_back();
}

}  // namespace halfgrad::amp
