// hg::set_num_threads / get_num_threads (kernels/threads.h): the default is
// OpenMP's; a setting reaches the caller at once and any other thread at its
// next CPU op (OpenMP's count is per thread).
#include <catch2/catch.hpp>

#include <omp.h>

#include <thread>

#include <halfgrad.h>

namespace hg = halfgrad;
using Catch::Matchers::Contains;

namespace {
// Puts the process's setting back (each CTest case is a process of its own,
// but a whole-suite run is one process).
struct RestoreThreads {
  int n = hg::get_num_threads();
  ~RestoreThreads() { hg::set_num_threads(n); }
};
}  // namespace

TEST_CASE("get_num_threads defaults to OpenMP's count", "[kernels][cpu][threads]") {
  CHECK(hg::get_num_threads() >= 1);
  CHECK(hg::get_num_threads() == omp_get_max_threads());
}

TEST_CASE("set_num_threads reaches the caller at once and other threads at their next CPU op",
          "[kernels][cpu][threads]") {
  RestoreThreads restore;
  hg::set_num_threads(1);
  CHECK(hg::get_num_threads() == 1);
  CHECK(omp_get_max_threads() == 1);
  int seen = -1;
  std::thread worker([&] {
    const hg::Tensor x = hg::ones({4});
    (void)(x + x);  // a CPU kernel call brings this thread up to date
    seen = omp_get_max_threads();
  });
  worker.join();
  CHECK(seen == 1);
  hg::set_num_threads(2);
  CHECK(hg::get_num_threads() == 2);
  CHECK(omp_get_max_threads() == 2);
}

TEST_CASE("set_num_threads refuses a count below 1", "[kernels][cpu][threads][errors]") {
  REQUIRE_THROWS_WITH(hg::set_num_threads(0), Contains("set_num_threads") && Contains("at least 1"));
  REQUIRE_THROWS_WITH(hg::set_num_threads(-3), Contains("at least 1"));
}
