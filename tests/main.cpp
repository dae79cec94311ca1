// The test runner. `--require-cuda` (used for the [cuda] suites) exits with
// 77, which CTest reports as skipped, when no CUDA device can be used here.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <halfgrad/core/device.h>

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_cuda = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-cuda") == 0) require_cuda = true;
    else args.push_back(argv[i]);
  }
  if (require_cuda && !halfgrad::cuda::is_available()) {
    std::printf("no usable CUDA device here: CUDA tests skipped\n");
    return 77;
  }
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
