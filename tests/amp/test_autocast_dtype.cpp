// The dtype of an autocast region, as torch.autocast takes it: with
// enabled=false any dtype (it casts nothing: autocast("cpu", dtype=float32,
// enabled=False) is how a float32 run is spelled); with enabled=true on the
// CPU a dtype other than bfloat16/float16 gives PyTorch's warning ("In CPU
// autocast, but the target dtype is not supported. Disabling autocast.", once
// per process here) and the region runs off; on CUDA float32 is accepted (the
// lower-precision ops run in float32, as PyTorch) and any other dtype is an
// Error. The warning is read from a fresh process of this binary.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <halfgrad.h>

#include "temp_dir.h"
#include "test_util.h"

namespace hg = halfgrad;
using hg::DeviceType;
using hg::amp::autocast;
using hg::amp::autocast_dtype;
using hg::amp::is_autocast_enabled;

namespace {
constexpr const char* kWarning = "In CPU autocast, but the target dtype is not supported. Disabling autocast.";
constexpr const char* kMarker = "-- the enabled=false regions are closed --";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("autocast with enabled=false takes any dtype and turns autocast off", "[amp][autocast]") {
  const hg::Tensor x = hg::randn({3, 4}), w = hg::randn({2, 4});
  autocast outer(DeviceType::CPU);  // bfloat16
  CHECK(hg::linear(x, w).dtype() == hg::bfloat16);
  for (hg::DType dt : {hg::kFloat32, hg::kDouble, hg::kLong, hg::kHalf}) {
    INFO(hgtest::dname(dt));
    {
      autocast off(DeviceType::CPU, dt, /*enabled=*/false);
      CHECK_FALSE(off.enabled());
      CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
      CHECK(autocast_dtype(DeviceType::CPU) == dt);  // PyTorch sets it too: get_autocast_dtype says float32
      CHECK(hg::linear(x, w).dtype() == hg::float32);
    }
    CHECK(is_autocast_enabled(DeviceType::CPU));
    CHECK(autocast_dtype(DeviceType::CPU) == hg::bfloat16);
  }
  autocast cuda_off(DeviceType::CUDA, hg::kFloat32, false);  // the same on CUDA, with or without a device
  CHECK_FALSE(is_autocast_enabled(DeviceType::CUDA));
}

// Run only by the case below, in a process of its own (hidden: "[.]").
TEST_CASE("enabled CPU autocast with float32 or float64, in a fresh process", "[.amp-dtype-child]") {
  const hg::Tensor x = hg::randn({3, 4}), w = hg::randn({2, 4});
  { autocast off(DeviceType::CPU, hg::kFloat32, false); }  // asked off: no warning
  std::fputs((std::string(kMarker) + "\n").c_str(), stderr);
  std::fflush(stderr);
  autocast outer(DeviceType::CPU);  // bfloat16, enabled
  for (hg::DType dt : {hg::kFloat32, hg::kDouble}) {
    autocast region(DeviceType::CPU, dt);  // enabled=true asked
    CHECK_FALSE(region.enabled());
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
    CHECK(hg::amp::autocast_disabled_by_region(DeviceType::CPU));  // the model wrapper stays off in it
    CHECK(hg::linear(x, w).dtype() == hg::float32);
  }
  CHECK(hg::linear(x, w).dtype() == hg::bfloat16);  // the outer region again
}

TEST_CASE("enabled CPU autocast with an unsupported dtype warns once (PyTorch's words) and runs off",
          "[amp][autocast]") {
  hgtest::TempDir dir;
  const std::string err_path = dir / "stderr.txt";
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int out = ::open("/dev/null", O_WRONLY);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(120);
    char self[] = "/proc/self/exe", spec[] = "[.amp-dtype-child]";
    char* argv[] = {self, spec, nullptr};
    ::execv(self, argv);
    ::_exit(121);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const std::string text = hgtest::read_bytes(err_path);
  INFO("the child's stderr:\n" << text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // the child's checks passed
  REQUIRE(count(text, kMarker) == 1);
  CHECK(count(text, kWarning) == 1);  // two regions, one warning
  CHECK(text.find(kWarning) > text.find(kMarker));  // none for the region asked to be off
  CHECK(count(text, "CPU Autocast only supports dtype of bfloat16, float16") == 1);
  CHECK(count(text, "(got float32)") == 1);
}

TEST_CASE("CUDA autocast accepts float32 as PyTorch does, and refuses other dtypes", "[cuda][amp][autocast]") {
  const hg::Device cuda = hg::Device::cuda();
  const hg::Tensor x = hg::randn({3, 4}, cuda).to(hg::kHalf), w = hg::randn({2, 4}, cuda).requires_grad_(true);
  {
    autocast region(DeviceType::CUDA, hg::kFloat32);
    CHECK(region.enabled());
    CHECK(autocast_dtype(DeviceType::CUDA) == hg::float32);
    CHECK(hg::linear(x, w).dtype() == hg::float32);  // the lower-precision list, in float32
    CHECK(hg::amp::cast_cache_size() == 0);          // nothing to cache: no lower-precision copies
  }
  hgtest::expect_errors({{"float64", [] { autocast r(DeviceType::CUDA, hg::kDouble); },
                          {"autocast(cuda, float64)", "float16, bfloat16 or float32", "enabled=false"}}});
}
