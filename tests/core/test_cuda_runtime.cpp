// The CUDA runtime layer: allocation, fills, copies. Cases tagged [cuda]
// return early with a warning when there is no device (the CMake wrapper
// turns that into a skip); the others run everywhere.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <type_traits>
#include <vector>

#include <halfgrad/core/allocator.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

#if defined(HALFGRAD_WITH_CUDA)
#include <string>

#include "cuda_graph.h"  // the CUDA runtime API, for pinned memory and graph capture
#endif

namespace cuda = halfgrad::cuda;
using halfgrad::BFloat16;
using halfgrad::DType;
using halfgrad::Half;

#define REQUIRE_CUDA()           \
  do {                           \
    if (!cuda::is_available()) { \
      WARN("no CUDA device");    \
      return;                    \
    }                            \
  } while (0)

namespace {

// Device buffer of n T's, released at scope exit.
template <typename T>
struct DeviceBuffer {
  size_t n;
  void* ptr;
  explicit DeviceBuffer(size_t count) : n(count), ptr(cuda::allocate(count * sizeof(T), 0)) {}
  ~DeviceBuffer() { cuda::release(ptr, 0); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::vector<T> to_host() const {
    std::vector<T> out(n);
    cuda::copy_bytes(out.data(), false, ptr, true, n * sizeof(T), 0);
    return out;
  }
};

// What the fill must write: the same conversions as the CPU side.
template <typename T>
T expected(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Fill n elements with v, copy back, compare bit for bit.
template <typename T>
void check_fill(size_t n, double v) {
  const DType dtype = halfgrad::dtype_of<T>::value;
  INFO("dtype " << halfgrad::dtype_name(dtype) << ", n " << n << ", value " << v);
  DeviceBuffer<T> buf(n);
  cuda::fill(buf.ptr, dtype, n, v, 0);
  // Raw bytes, not std::vector<T>: std::vector<bool> has no data().
  std::vector<unsigned char> host(n * sizeof(T));
  cuda::copy_bytes(host.data(), false, buf.ptr, true, host.size(), 0);
  const T want = expected<T>(v);
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i)
    mismatches += std::memcmp(&host[i * sizeof(T)], &want, sizeof(T)) != 0;
  CHECK(mismatches == 0);
}

template <typename T>
void check_fill_values() {
  // 0 takes the memset path; 0.1 is inexact in every float type (rounding);
  // -2.5 is negative and truncates for int64; 1 and 0 for bool.
  for (double v : {0.0, 1.0, 0.1, -2.5}) {
    check_fill<T>(1, v);
    check_fill<T>(1000 + 3, v);               // not a multiple of the block size
    check_fill<T>((size_t{1} << 21) + 7, v);  // more than one grid pass
  }
}

}  // namespace

TEST_CASE("cuda::is_available and device_count never throw", "[cuda_runtime]") {
  bool available = false;
  REQUIRE_NOTHROW(available = cuda::is_available());
  CHECK(cuda::is_available() == available);  // cached, stable
  int count = -1;
  REQUIRE_NOTHROW(count = cuda::device_count());
  CHECK(count >= 0);
  CHECK(available == (count > 0));
}

TEST_CASE("without a device, CUDA calls fail with halfgrad::Error", "[cuda_runtime]") {
  if (cuda::is_available()) return;
  CHECK_THROWS_AS(cuda::allocate(16, 0), halfgrad::Error);
  CHECK_THROWS_WITH(cuda::allocate(16, 0), Catch::Contains("CUDA is not available"));
  // nothing to allocate, but still a tensor on a device that cannot be used: refused, as in PyTorch
  CHECK_THROWS_WITH(cuda::allocate(0, 0), Catch::Contains("CUDA is not available"));
  CHECK_NOTHROW(cuda::release(nullptr, 0));
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("cuda current stream is per thread and defaults to the legacy stream", "[cuda_runtime]") {
  CHECK(cuda::current_stream() == nullptr);
  int token = 0;  // any address will do: the setter does not touch it
  cuda::set_current_stream(&token);
  CHECK(cuda::current_stream() == &token);
  void* seen_by_other = &token;
  std::thread([&] { seen_by_other = cuda::current_stream(); }).join();
  CHECK(seen_by_other == nullptr);
  cuda::set_current_stream(nullptr);
  CHECK(cuda::current_stream() == nullptr);
}

TEST_CASE("cuda::allocate of 0 bytes is nullptr, and release of nullptr is a no-op", "[cuda]") {
  REQUIRE_CUDA();
  CHECK(cuda::allocate(0, 0) == nullptr);
  CHECK_NOTHROW(cuda::release(nullptr, 0));
}

TEST_CASE("cuda::allocate gives aligned, reusable memory", "[cuda][large]") {
  REQUIRE_CUDA();
  for (size_t nbytes : {size_t{1}, size_t{255}, size_t{1} << 20, size_t{3} << 28}) {
    void* p = cuda::allocate(nbytes, 0);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);  // CUDA allocations are 256-byte aligned
    cuda::release(p, 0);
  }
  // Freed memory goes back to the pool: many same-size rounds never run out.
  for (int i = 0; i < 100; ++i) cuda::release(cuda::allocate(size_t{1} << 30, 0), 0);
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("cuda::allocate out of memory is a helpful halfgrad::Error", "[cuda]") {
  REQUIRE_CUDA();
  const size_t too_much = size_t{1} << 40;  // 1 TiB: more than any GPU has
  CHECK_THROWS_WITH(cuda::allocate(too_much, 0), Catch::Contains("out of memory") &&
                                                     Catch::Contains("1099511627776 bytes") &&
                                                     Catch::Contains("batch size"));
  // The failure left no error behind: the next allocation works.
  void* p = cuda::allocate(1024, 0);
  CHECK(p != nullptr);
  cuda::release(p, 0);
}

TEST_CASE("cuda::allocate rejects a device that does not exist", "[cuda]") {
  REQUIRE_CUDA();
  CHECK_THROWS_WITH(cuda::allocate(16, cuda::device_count()), Catch::Contains("does not exist"));
  CHECK_THROWS_AS(cuda::allocate(16, -1), halfgrad::Error);
}

TEST_CASE("cuda::fill writes every dtype", "[cuda]") {
  REQUIRE_CUDA();
  SECTION("float32") { check_fill_values<float>(); }
  SECTION("float64") { check_fill_values<double>(); }
  SECTION("float16") { check_fill_values<Half>(); }
  SECTION("bfloat16") { check_fill_values<BFloat16>(); }
  SECTION("int64") { check_fill_values<int64_t>(); }
  SECTION("bool") { check_fill_values<bool>(); }
  SECTION("special values") {
    check_fill<float>(100, -0.0);  // sign bit set: must not take the memset(0) path
    check_fill<Half>(100, 1e6);    // overflows float16: +inf
    check_fill<Half>(100, 1e-7);   // float16 subnormal
    check_fill<double>(100, 1.0 / 3.0);
  }
  SECTION("n == 0 does nothing") { CHECK_NOTHROW(cuda::fill(nullptr, DType::Float32, 0, 1.0, 0)); }
}

TEST_CASE("cuda::copy_bytes host -> device -> host round trip", "[cuda]") {
  REQUIRE_CUDA();
  const size_t n = (size_t{1} << 20) + 5;
  std::vector<int64_t> src(n);
  std::iota(src.begin(), src.end(), int64_t{-12345});
  DeviceBuffer<int64_t> buf(n);
  cuda::copy_bytes(buf.ptr, true, src.data(), false, n * sizeof(int64_t), 0);
  src.assign(n, 0);  // the host source may be reused right after the call
  const std::vector<int64_t> back = buf.to_host();
  for (size_t i = 0; i < n; i += 9973) CHECK(back[i] == static_cast<int64_t>(i) - 12345);
  CHECK(back.back() == static_cast<int64_t>(n - 1) - 12345);
}

TEST_CASE("cuda::copy_bytes device -> device", "[cuda]") {
  REQUIRE_CUDA();
  const size_t n = 4099;
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = 0.5f * static_cast<float>(i);
  DeviceBuffer<float> a(n), b(n);
  cuda::copy_bytes(a.ptr, true, src.data(), false, n * sizeof(float), 0);
  cuda::fill(b.ptr, DType::Float32, n, 7.0, 0);
  // Copy all but the first element: b[0] keeps the fill, so a wrong offset shows.
  cuda::copy_bytes(static_cast<float*>(b.ptr) + 1, true, static_cast<const float*>(a.ptr) + 1, true,
                   (n - 1) * sizeof(float), 0);
  const std::vector<float> back = b.to_host();
  CHECK(back[0] == 7.0f);
  bool same = true;
  for (size_t i = 1; i < n; ++i) same = same && back[i] == src[i];
  CHECK(same);
}

TEST_CASE("cuda::copy_bytes of 0 bytes or host -> host needs no device", "[cuda_runtime]") {
  CHECK_NOTHROW(cuda::copy_bytes(nullptr, true, nullptr, false, 0, 0));
  const int a = 42;
  int b = 0;
  cuda::copy_bytes(&b, false, &a, false, sizeof(int), 0);
  CHECK(b == 42);
}

TEST_CASE("Storage::record_stream is for CUDA memory only", "[cuda_runtime]") {
  halfgrad::Storage s(64, halfgrad::Device::cpu());
  CHECK_THROWS_WITH(s.record_stream(nullptr), Catch::Contains("record_stream") && Catch::Contains("CUDA"));
}

#if defined(HALFGRAD_WITH_CUDA)
// Memory used on stream B dies while A is current: freed on A, where the pool may hand it
// to the next allocation on A at once. record_stream(B) makes that free wait for B's work:
// the copy B has queued (behind a long stretch of fills) still reads the old values.
TEST_CASE("Storage::record_stream: a free on one stream waits for another stream's work", "[cuda][large]") {
  REQUIRE_CUDA();
  hgtest::TestStream a;  // current
  cudaStream_t b = nullptr;
  HG_CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  const size_t n = size_t{1} << 24, bytes = n * sizeof(float);
  const halfgrad::Device dev = halfgrad::Device::cuda(0);
  auto t = halfgrad::allocate_storage(bytes, dev);
  auto u = halfgrad::allocate_storage(bytes, dev);
  cuda::fill(t->data, DType::Float32, n, 1.0, 0);
  cuda::fill(u->data, DType::Float32, n, 0.0, 0);
  a.sync();
  cuda::set_current_stream(b);
  void* busy = cuda::allocate(size_t{1} << 30, 0);  // 1 GiB on b, kept busy for a while
  for (int i = 0; i < 40; ++i) cuda::fill(busy, DType::Float32, size_t{1} << 28, 0.5 + i, 0);
  cuda::copy_bytes(u->data, true, t->data, true, bytes, 0);  // b reads t, late
  t->record_stream(b);
  cuda::set_current_stream(a.get());
  const void* old = t->data;
  t.reset();  // freed on a, after b's copy
  auto t2 = halfgrad::allocate_storage(bytes, dev);
  INFO("the pool " << (t2->data == old ? "reused" : "did not reuse") << " the block");
  cuda::fill(t2->data, DType::Float32, n, 7.0, 0);  // on a: must not overtake b's copy
  HG_CUDA_CHECK(cudaStreamSynchronize(b));
  a.sync();
  std::vector<float> back(n);
  cuda::copy_bytes(back.data(), false, u->data, true, bytes, 0);
  size_t wrong = 0;
  for (float v : back) wrong += v != 1.0f;
  CHECK(wrong == 0);
  cuda::set_current_stream(b);
  cuda::release(busy, 0);
  HG_CUDA_CHECK(cudaStreamSynchronize(b));
  cuda::set_current_stream(a.get());
  t2.reset();
  u.reset();
  a.sync();
  HG_CUDA_CHECK(cudaStreamDestroy(b));
}

// A pinned source is read by the DMA engine whenever the stream gets to the
// copy: with ~50 GiB of fills queued ahead of it (milliseconds), a copy_bytes that returned
// without waiting would let the overwrite below reach the device. (A pageable
// source has the same hazard, less reliably shown: the runtime may stage it.)
TEST_CASE("cuda::copy_bytes host -> device: the host source may be overwritten on return", "[cuda][large]") {
  REQUIRE_CUDA();
  hgtest::TestStream stream;
  const size_t n = size_t{1} << 20;
  int64_t* pinned = nullptr;
  HG_CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(int64_t)));
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<int64_t>(i);
  {
    DeviceBuffer<float> busy(size_t{1} << 28);  // 1 GiB
    for (int i = 0; i < 50; ++i) cuda::fill(busy.ptr, DType::Float32, busy.n, 0.5 + i, 0);  // keeps the stream busy
    DeviceBuffer<int64_t> buf(n);
    cuda::copy_bytes(buf.ptr, true, pinned, false, n * sizeof(int64_t), 0);
    for (size_t i = 0; i < n; ++i) pinned[i] = -1;
    const std::vector<int64_t> back = buf.to_host();
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += back[i] != static_cast<int64_t>(i);
    CHECK(wrong == 0);
  }
  cudaFreeHost(pinned);
}

// Out of memory while capturing: no cudaDeviceSynchronize (it would invalidate the
// capture and report a confusing capture error), but a clear Error saying why.
TEST_CASE("cuda::allocate out of memory during graph capture is a clear Error, the capture intact", "[cuda]") {
  REQUIRE_CUDA();
  hgtest::TestStream stream;
  HG_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  std::string message;
  void* p = nullptr;
  try {
    p = cuda::allocate(size_t{1} << 50, 0);  // 1 PiB: no GPU has it, not even as address space
  } catch (const halfgrad::Error& e) {
    message = e.what();
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t query = cudaStreamIsCapturing(stream.get(), &status);
  if (p != nullptr) cuda::release(p, 0);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  CHECK(p == nullptr);
  // Before: "CUDA error in cudaDeviceSynchronize(): operation not permitted when stream is capturing".
  CHECK_THAT(message, Catch::Contains("out of memory") && Catch::Contains("during CUDA graph capture"));
  CHECK_THAT(message, !Catch::Contains("cudaDeviceSynchronize"));
  // No sync ran, so nothing of ours ended the capture (the failed cudaMallocAsync itself may
  // have, depending on the driver: reported, not required).
  CHECK(query == cudaSuccess);
  CHECK_NOFAIL(status == cudaStreamCaptureStatusActive);
  CHECK_NOFAIL(end == cudaSuccess);
}

TEST_CASE("cuda::copy_bytes with a host side during graph capture is a clear Error", "[cuda]") {
  REQUIRE_CUDA();
  hgtest::TestStream stream;
  DeviceBuffer<int> buf(16);
  std::vector<int> host(16, 3);
  HG_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
  std::string message;
  try {
    cuda::copy_bytes(buf.ptr, true, host.data(), false, host.size() * sizeof(int), 0);
  } catch (const halfgrad::Error& e) {
    message = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  CHECK_THAT(message, Catch::Contains("host-to-device") && Catch::Contains("during CUDA graph capture"));
  CHECK(end == cudaSuccess);  // refused before anything was queued: the capture is intact
}

#endif  // HALFGRAD_WITH_CUDA
