// CUDA random fills: element i is drawn from Philox counter offset + i with
// the arithmetic of core/philox.h, the same as the CPU backend, so a seed gives
// the same tensor on either device. Each device's generator state (seed,
// offset) lives in device memory: the fill kernel reads it and a one-thread
// kernel moves the offset on, so a draw never waits for the host and a
// replayed CUDA graph draws new numbers, as an eager call would. Draws on two
// streams are ordered through an event (stream-ordered, no host wait). A draw
// from a Generator object (core/generator.h) takes its (seed, offset) from the
// host instead (draw_counters, kernels/cuda/random.cuh).
#include <mutex>
#include <vector>

#include <halfgrad/core/philox.h>
#include <halfgrad/core/random.h>
#include <halfgrad/kernels/cuda/cuda_kernels.h>
#include <halfgrad/kernels/cuda/loops.cuh>
#include <halfgrad/kernels/cuda/random.cuh>

namespace halfgrad::kernels::cuda {

namespace {

using rng::PhiloxState;

__global__ void seed_kernel(PhiloxState* s, uint64_t seed) {
  s->seed = seed;
  s->offset = 0;
}

__global__ void advance_kernel(PhiloxState* s, uint64_t n) { s->offset += n; }

std::mutex g_draw_mutex;  // one draw at a time queues its kernels and moves the offset

// One generator per device. Its state lives in device memory (a graph that
// captured a draw must find it at the same address), allocated once and kept
// for the process; `generation` is the manual_seed it was last seeded for, and
// `last_stream`/`drawn` order a draw on another stream after the previous one.
struct DeviceGenerator {
  PhiloxState* state = nullptr;
  uint64_t generation = 0;
  cudaStream_t last_stream = nullptr;
  cudaEvent_t drawn = nullptr;  // recorded after each eager draw's advance
};

// The generator of `device`, ready for a draw on stream `s`: seeded if
// manual_seed ran since its last draw, and ordered after the last draw if
// that was on another stream (the state is shared). Seeding inside a graph
// capture would put the seed in the graph (every replay would restart the
// stream), so that is an Error with the remedy.
DeviceGenerator& generator(int device, cudaStream_t s, bool capturing) {
  static std::vector<DeviceGenerator> all(static_cast<size_t>(std::max(halfgrad::cuda::device_count(), 1)));
  DeviceGenerator& g = all.at(static_cast<size_t>(device));
  const uint64_t generation = rng::seed_generation();
  if (g.state != nullptr && g.last_stream != s && !capturing) HG_CUDA_CHECK(cudaStreamWaitEvent(s, g.drawn, 0));
  if (g.state == nullptr || g.generation != generation) {
    HG_CHECK(!capturing,
             "random draw on cuda:{}: this is the first draw since manual_seed (or ever) on this device, and it is "
             "being captured into a CUDA graph, which would replay the seeding too. Draw once before capturing "
             "(for example, run one eager warm-up step).",
             device);
    if (g.state == nullptr) {
      HG_CUDA_CHECK(cudaMalloc(&g.state, sizeof(PhiloxState)));
      HG_CUDA_CHECK(cudaEventCreateWithFlags(&g.drawn, cudaEventDisableTiming));
    }
    seed_kernel<<<1, 1, 0, s>>>(g.state, initial_seed());
    HG_CUDA_CHECK(cudaGetLastError());
    g.generation = generation;
  }
  return g;
}

// out[i] = f(draw i) for the contiguous `out`.
template <typename S, typename F>
__global__ void fill_kernel(S* out, int64_t n, PhiloxSource source, F f) {
  const PhiloxState st = source.get();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = f(philox::draw(st.seed, st.offset, static_cast<uint64_t>(i)));
}

template <typename T, typename F>
void launch(const Tensor& out, const char* op, Generator* gen, F f) {
  const int device = common_device(op, {&out});
  HG_CHECK(out.is_contiguous(), "{}: the output must be contiguous, got {}", op, out.describe());
  const int64_t n = out.numel();
  if (n == 0) return;
  draw_counters(op, device, static_cast<uint64_t>(n), gen, [&](const PhiloxSource& source) {
    fill_kernel<<<grid_for(n, kThreads, device), kThreads, 0, stream()>>>(static_cast<storage_t<T>*>(out.data_ptr()),
                                                                          n, source, f);
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

// The roundings of kernels/cpu/random.cpp: double -> compute type -> storage.
template <typename T>
struct UniformF {
  double low, high;
  __device__ storage_t<T> operator()(const philox::Words& w) const {
    using E = Elem<T>;
    const storage_t<T> r = E::store(static_cast<typename E::acc>(philox::uniform(w, low, high)));
    // rounding to the dtype may reach `high`: such draws become `low`, keeping [low, high)
    return static_cast<double>(E::load(r)) < high ? r : E::store(static_cast<typename E::acc>(low));
  }
};

template <typename T>
struct NormalF {
  double mean, std;
  __device__ storage_t<T> operator()(const philox::Words& w) const {
    return Elem<T>::store(static_cast<typename Elem<T>::acc>(philox::normal(w, mean, std)));
  }
};

template <typename T>
struct RandintF {
  int64_t low, high;
  __device__ storage_t<T> operator()(const philox::Words& w) const {
    const int64_t v = philox::randint(w, low, high);
    if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
    else return Elem<T>::store(static_cast<typename Elem<T>::acc>(static_cast<double>(v)));
  }
};

}  // namespace

void draw_counters(const char* op, int device, uint64_t n, Generator* gen,
                   const std::function<void(const PhiloxSource&)>& launch) {
  DeviceGuard guard(device);
  const cudaStream_t s = stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (gen != nullptr) {
    HG_CHECK(!capturing,
             "{} on cuda:{} with a Generator object is being captured into a CUDA graph: its state lives on the "
             "host, so every replay would repeat the captured numbers. Draw from the default generator (no "
             "generator argument) inside captured code.",
             op, device);
    launch(PhiloxSource{nullptr, gen->reserve(n)});
    return;
  }
  std::lock_guard<std::mutex> lock(g_draw_mutex);
  DeviceGenerator& g = generator(device, s, capturing);
  launch(PhiloxSource{g.state, {}});
  advance_kernel<<<1, 1, 0, s>>>(g.state, n);
  HG_CUDA_CHECK(cudaGetLastError());
  if (!capturing) {
    HG_CUDA_CHECK(cudaEventRecord(g.drawn, s));
    g.last_stream = s;
  }
}

void uniform(const Tensor& out, double low, double high, Generator* gen) {
  HG_DISPATCH_FLOATING(out.dtype(), "rand",
                       [&] { launch<scalar_t>(out, "rand", gen, UniformF<scalar_t>{low, high}); });
}

void normal(const Tensor& out, double mean, double std, Generator* gen) {
  HG_DISPATCH_FLOATING(out.dtype(), "randn",
                       [&] { launch<scalar_t>(out, "randn", gen, NormalF<scalar_t>{mean, std}); });
}

void randint(const Tensor& out, int64_t low, int64_t high, Generator* gen) {
  HG_DISPATCH_NUMERIC(out.dtype(), "randint",
                      [&] { launch<scalar_t>(out, "randint", gen, RandintF<scalar_t>{low, high}); });
}

}  // namespace halfgrad::kernels::cuda

// torch.cuda.get_rng_state / set_rng_state (core/random.h): the state is
// copied on the current stream, after the draws queued there, and the host
// waits for the copy; the generator is made current first (seeded if
// manual_seed ran since), so a set state is not overwritten by a pending re-seed.
namespace halfgrad::cuda {

namespace {
// Checked before anything touches the runtime: without a usable device (no
// driver) this is the Error, not a failed cudaGetDevice.
void check_device(const char* op, int device) {
  HG_CHECK(device >= 0 && device < device_count(), "{}: there is no device cuda:{} ({} CUDA devices)", op, device,
           device_count());
}

kernels::cuda::DeviceGenerator& generator_for_copy(const char* op, int device, cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  HG_CHECK(capture == cudaStreamCaptureStatusNone,
           "{}: the current stream is being captured into a CUDA graph; read or set the generator outside the capture",
           op);
  return kernels::cuda::generator(device, s, false);
}
}  // namespace

rng::PhiloxState get_rng_state(int device) {
  check_device("halfgrad::cuda::get_rng_state", device);
  DeviceGuard guard(device);
  const cudaStream_t s = stream();
  std::lock_guard<std::mutex> lock(kernels::cuda::g_draw_mutex);
  kernels::cuda::DeviceGenerator& g = generator_for_copy("halfgrad::cuda::get_rng_state", device, s);
  rng::PhiloxState out;
  HG_CUDA_CHECK(cudaMemcpyAsync(&out, g.state, sizeof out, cudaMemcpyDeviceToHost, s));
  HG_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

void set_rng_state(const rng::PhiloxState& state, int device) {
  check_device("halfgrad::cuda::set_rng_state", device);
  DeviceGuard guard(device);
  const cudaStream_t s = stream();
  std::lock_guard<std::mutex> lock(kernels::cuda::g_draw_mutex);
  kernels::cuda::DeviceGenerator& g = generator_for_copy("halfgrad::cuda::set_rng_state", device, s);
  const rng::PhiloxState copy = state;
  HG_CUDA_CHECK(cudaMemcpyAsync(g.state, &copy, sizeof copy, cudaMemcpyHostToDevice, s));
  HG_CUDA_CHECK(cudaStreamSynchronize(s));  // `copy` is on this stack frame
  HG_CUDA_CHECK(cudaEventRecord(g.drawn, s));
  g.last_stream = s;
}

}  // namespace halfgrad::cuda
