// The CUDA backend's decisions that need no GPU (core/cuda/policy.h): when the
// out-of-memory retry may synchronise, which epilogue pointers cuBLASLt can take,
// which copies wait for their stream, and what the errors say.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include <halfgrad/core/cuda/policy.h>

namespace policy = halfgrad::cuda::policy;

TEST_CASE("the out-of-memory retry synchronises only when surely not capturing", "[cuda_policy]") {
  CHECK(policy::may_sync_device(/*known=*/true, /*capturing=*/false));
  CHECK_FALSE(policy::may_sync_device(true, true));
  CHECK_FALSE(policy::may_sync_device(false, false));  // cudaStreamIsCapturing failed: maybe capturing
  const std::string m = policy::capture_oom_message(12345, 1);
  CHECK_THAT(m, Catch::Contains("out of memory") && Catch::Contains("cuda:1") && Catch::Contains("12345 bytes") &&
                    Catch::Contains("capture"));
}

TEST_CASE("cuBLASLt epilogue pointers must be 16-byte aligned", "[cuda_policy]") {
  alignas(16) unsigned char buf[64] = {};
  CHECK(policy::epilogue_pointer_aligned(buf));
  CHECK(policy::epilogue_pointer_aligned(buf + 16));
  CHECK(policy::epilogue_pointer_aligned(nullptr));
  for (int off : {1, 2, 4, 8, 12, 14}) {
    INFO("offset " << off);
    CHECK_FALSE(policy::epilogue_pointer_aligned(buf + off));  // e.g. a float16 bias view at element 1: 2 bytes
  }
}

TEST_CASE("copies with a host side wait for their stream, device to device does not", "[cuda_policy]") {
  CHECK(policy::copy_waits_for_stream(/*dst_cuda=*/true, /*src_cuda=*/false));  // host -> device
  CHECK(policy::copy_waits_for_stream(false, true));                            // device -> host
  CHECK_FALSE(policy::copy_waits_for_stream(true, true));
  CHECK_THAT(policy::capture_host_copy_message(64, true), Catch::Contains("host-to-device") &&
                                                              Catch::Contains("capture") && Catch::Contains("64"));
  CHECK_THAT(policy::capture_host_copy_message(64, false), Catch::Contains("device-to-host"));
}
