#pragma once
// The test runners' `--require-cuda` (the [cuda] suites' CTest entries): with
// it, and no usable CUDA device here, the runner exits with 77, which CTest
// reports as skipped. Returns the other arguments, for Catch, or nullopt to
// exit 77.
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include <halfgrad/core/device.h>

namespace hgtest {

// True in a runner started with `--require-cuda` on a machine with a device:
// the CUDA suites. run_in_child (test_util.h) then runs its work in-process,
// as CUDA cannot be used in a forked child.
inline bool& cuda_suite() {
  static bool on = false;
  return on;
}

inline std::optional<std::vector<char*>> catch_args_or_skip(int argc, char** argv) {
  std::vector<char*> args;
  bool require_cuda = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-cuda") == 0) require_cuda = true;
    else args.push_back(argv[i]);
  }
  if (require_cuda && !halfgrad::cuda::is_available()) {
    std::printf("no usable CUDA device here: CUDA tests skipped\n");
    return std::nullopt;
  }
  cuda_suite() = require_cuda;
  return args;
}

}  // namespace hgtest
