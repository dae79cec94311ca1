// autocast(DeviceType::CUDA) where CUDA is not available (a build without it,
// a machine without a device): PyTorch's torch.autocast("cuda") warns "User
// provided device_type of 'cuda', but CUDA is not available. Disabling" and
// runs the region with enabled=False. The warning is printed once per process,
// so the checks run in a fresh process of this test binary (a hidden case),
// whose stderr this case reads.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <halfgrad.h>

#include "temp_dir.h"

namespace hg = halfgrad;
using hg::DeviceType;
using hg::amp::autocast;
using hg::amp::is_autocast_enabled;

namespace {

constexpr const char* kWarning = "User provided device_type of 'cuda', but CUDA is not available. Disabling";
constexpr const char* kMarker = "-- the enabled=false region is closed --";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

// Run only by the case below, in a process of its own (hidden: "[.]").
TEST_CASE("autocast(CUDA) without CUDA, in a fresh process", "[.amp-no-cuda-child]") {
  const bool cuda = hg::cuda::is_available();
  const hg::Tensor x = hg::randn({3, 4}), w = hg::randn({2, 4});
  {
    autocast off(DeviceType::CUDA, std::nullopt, /*enabled=*/false);  // asked off: no warning
    CHECK_FALSE(off.enabled());
  }
  std::fputs((std::string(kMarker) + "\n").c_str(), stderr);
  std::fflush(stderr);
  for (int round = 0; round < 2; ++round) {  // the second region does not warn again
    autocast region(DeviceType::CUDA);
    CHECK(region.enabled() == cuda);
    CHECK(is_autocast_enabled(DeviceType::CUDA) == cuda);
    // it counts as a region, as enabled=false does: the model wrapper sees "off"
    CHECK(hg::amp::autocast_disabled_by_region(DeviceType::CUDA) == !cuda);
    {
      autocast cpu(DeviceType::CPU);  // another device type's region is untouched
      CHECK(hg::linear(x, w).dtype() == hg::bfloat16);
      CHECK(is_autocast_enabled(DeviceType::CUDA) == cuda);
    }
    CHECK_FALSE(is_autocast_enabled(DeviceType::CPU));
    CHECK(hg::linear(x, w).dtype() == hg::float32);
  }
  CHECK(hg::amp::autocast_fn(DeviceType::CUDA, [] { return is_autocast_enabled(DeviceType::CUDA); }) == cuda);
  CHECK_FALSE(is_autocast_enabled(DeviceType::CUDA));
  CHECK_FALSE(hg::amp::autocast_disabled_by_region(DeviceType::CUDA));
}

TEST_CASE("autocast(CUDA) without CUDA warns once (PyTorch's words) and runs the region off", "[amp][autocast]") {
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
    char self[] = "/proc/self/exe", spec[] = "[.amp-no-cuda-child]";
    char* argv[] = {self, spec, nullptr};
    ::execv(self, argv);
    ::_exit(121);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const std::string text = hgtest::read_bytes(err_path);
  INFO("the child's stderr:\n" << text);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // the child's checks passed (its exit code counts failures)
  REQUIRE(count(text, kMarker) == 1);
  if (hg::cuda::is_available()) {
    CHECK(count(text, "CUDA is not available") == 0);
  } else {
    CHECK(count(text, kWarning) == 1);
    CHECK(text.find(kWarning) > text.find(kMarker));  // not for the region asked to be off
    CHECK(count(text, "halfgrad warning: autocast: ") == 1);
    CHECK(count(text, "autocast(DeviceType::CPU)") == 1);  // the remedy
  }
}
