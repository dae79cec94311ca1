// The test runner. `--require-cuda` (used for the [cuda] suites) exits with
// 77, which CTest reports as skipped, when no CUDA device can be used here.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "require_cuda.h"

int main(int argc, char** argv) {
  auto args = hgtest::catch_args_or_skip(argc, argv);
  if (!args) return 77;
  return Catch::Session().run(static_cast<int>(args->size()), args->data());
}
