// The distributed tests' runner: every rank of `mpirun -np N` runs every test
// case in the same order (collectives must match), and the job fails when any
// rank's does. Tests use CHECK, not REQUIRE: a REQUIRE stopping one rank's test
// case early would leave the others waiting in a collective.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/distributed/process_group.h>

#include <cstdio>

#include "require_cuda.h"

int main(int argc, char** argv) {
  auto args = hgtest::catch_args_or_skip(argc, argv);  // --require-cuda (the [cuda] entry): 77 without a GPU
  if (!args) return 77;
  auto& pg = halfgrad::distributed::init();
  Catch::Session session;
  if (pg.rank() != 0) session.configData().reporterName = "compact";  // one full report, from rank 0
  int rc = session.run(static_cast<int>(args->size()), args->data());
  halfgrad::Tensor failed = halfgrad::full({1}, rc != 0 ? 1.0 : 0.0);
  pg.all_reduce(failed, halfgrad::distributed::ReduceOp::Max);
  rc = failed.item<float>() != 0.0f ? 1 : 0;
  if (pg.rank() == 0) std::printf("distributed tests on %d ranks: %s\n", pg.world_size(), rc ? "FAILED" : "passed");
  halfgrad::distributed::finalize();
  return rc;
}
