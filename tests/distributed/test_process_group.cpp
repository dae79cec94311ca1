// The process group's collectives on CPU tensors (MPI), run by every rank of
// `mpirun -np 2` and `-np 3`: all_reduce (sum, avg, max) in every dtype,
// broadcast, all_gather, barrier, and the Errors every rank raises alike.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/distributed/process_group.h>

#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
namespace dist = halfgrad::distributed;
using hg::DType;
using hg::Tensor;

TEST_CASE("the world: ranks, size, local rank", "[distributed]") {
  auto& pg = dist::init();
  CHECK(pg.world_size() >= 1);
  CHECK(pg.rank() >= 0);
  CHECK(pg.rank() < pg.world_size());
  CHECK(pg.local_rank() == pg.rank());  // one machine: local ranks are the ranks
  CHECK(dist::is_initialized());
  CHECK(&dist::init() == &pg);  // once per process
}

TEST_CASE("all_reduce: sum, avg and max of each rank's values, in every dtype", "[distributed]") {
  auto& pg = dist::init();
  const double r = pg.rank() + 1, w = pg.world_size();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64}) {
    INFO(hgtest::dname(dt));
    Tensor s = hg::full({7}, r).to(dt);
    pg.all_reduce(s, dist::ReduceOp::Sum);
    CHECK(s.dtype() == dt);
    CHECK(hgtest::values(s) == std::vector<double>(7, w * (w + 1) / 2));
    Tensor m = (hg::arange(0, 7) * r).to(dt);
    pg.all_reduce(m, dist::ReduceOp::Max);
    CHECK(hgtest::values(m) == hgtest::values((hg::arange(0, 7) * w).to(dt)));
    if (hg::is_floating(dt)) {
      Tensor a = hg::full({2, 3}, r).to(dt);
      pg.all_reduce(a, dist::ReduceOp::Avg);
      CHECK(hgtest::values(a) == std::vector<double>(6, (w + 1) / 2));
    }
  }
  Tensor b = hg::full({3}, pg.rank() == 0 ? 1.0 : 0.0).to(DType::Bool);  // true on rank 0 only
  pg.all_reduce(b, dist::ReduceOp::Sum);
  CHECK(hgtest::values(b) == std::vector<double>(3, 1.0));
  Tensor empty = hg::zeros({0});
  pg.all_reduce(empty);
  CHECK(empty.numel() == 0);
}

TEST_CASE("all_reduce_async: several in flight at once, each right once waited for", "[distributed]") {
  auto& pg = dist::init();
  const double r = pg.rank() + 1, w = pg.world_size();
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(hg::full({1000 * (i + 1)}, r * (i + 1)).to(i % 2 ? DType::BFloat16 : DType::Float32));
    works.push_back(pg.all_reduce_async(ts.back(), i == 5 ? dist::ReduceOp::Max : dist::ReduceOp::Avg));
  }
  // a synchronous call between them queues behind them, in order
  Tensor sync = hg::full({3}, r);
  pg.all_reduce(sync);
  CHECK(hgtest::values(sync) == std::vector<double>(3, w * (w + 1) / 2));
  for (int i = 5; i >= 0; --i) {  // waited for in any order
    works[static_cast<size_t>(i)]->wait();
    CHECK(works[static_cast<size_t>(i)]->is_completed());
    const double want = i == 5 ? w * (i + 1) : (w + 1) / 2 * (i + 1);
    CHECK(hgtest::values(ts[static_cast<size_t>(i)]) == std::vector<double>(static_cast<size_t>(1000 * (i + 1)), want));
  }
  Tensor bad = hg::zeros({4}, hg::TensorOptions(DType::Int64));
  CHECK_THROWS_WITH(pg.all_reduce_async(bad, dist::ReduceOp::Avg), Catch::Contains("would truncate"));
}

TEST_CASE("broadcast: every rank ends with the root's tensor", "[distributed]") {
  auto& pg = dist::init();
  const int root = pg.world_size() - 1;
  for (DType dt : {DType::Float32, DType::Float16, DType::Int64}) {
    Tensor t = (hg::arange(0, 5) + 100.0 * pg.rank()).to(dt);
    pg.broadcast(t, root);
    CHECK(hgtest::values(t) == hgtest::values((hg::arange(0, 5) + 100.0 * root).to(dt)));
  }
}

TEST_CASE("all_gather: rank r's tensor at index r, from any layout", "[distributed]") {
  auto& pg = dist::init();
  const Tensor mine = (hg::arange(0, 6).reshape({2, 3}) + 10.0 * pg.rank()).t();  // a transposed view
  const Tensor all = pg.all_gather(mine);
  CHECK(all.shape() == hg::Shape{pg.world_size(), 3, 2});
  for (int r = 0; r < pg.world_size(); ++r)
    CHECK(hgtest::values(all[r]) == hgtest::values((hg::arange(0, 6).reshape({2, 3}) + 10.0 * r).t()));
  pg.barrier();
}

TEST_CASE("collectives refuse what they cannot do, on every rank alike", "[distributed]") {
  auto& pg = dist::init();
  Tensor nc = hg::zeros({4, 4}).t();
  CHECK_THROWS_WITH(pg.all_reduce(nc), Catch::Contains("is not contiguous"));
  Tensor ints = hg::zeros({2}, hg::TensorOptions(DType::Int64));
  CHECK_THROWS_WITH(pg.all_reduce(ints, dist::ReduceOp::Avg), Catch::Contains("would truncate"));
  Tensor t = hg::zeros({2});
  CHECK_THROWS_WITH(pg.broadcast(t, pg.world_size()), Catch::Contains("is not a rank"));
  // a shape that differs between ranks (all_gather compares the counts first)
  if (pg.world_size() > 1) {
    CHECK_THROWS_WITH(pg.all_gather(hg::zeros({pg.rank() + 1})), Catch::Contains("needs the same shape on every rank"));
  }
#if !HALFGRAD_WITH_NCCL
  if (hg::cuda::is_available()) {
    Tensor g = hg::zeros({2}).cuda();
    CHECK_THROWS_WITH(pg.all_reduce(g), Catch::Contains("built without NCCL"));
  }
#endif
  pg.barrier();  // everyone is still in step
}

TEST_CASE("CUDA tensors go through NCCL: all_reduce, broadcast, all_gather against the CPU's", "[distributed][cuda]") {
  // one GPU per rank (a world of 1 on a machine with one GPU still runs NCCL's code)
  auto& pg = dist::init();
  const double r = pg.rank() + 1, w = pg.world_size();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    INFO(hgtest::dname(dt));
    Tensor s = hg::full({1000}, r).to(dt).cuda();
    pg.all_reduce(s, dist::ReduceOp::Sum);
    CHECK(hgtest::values(s.cpu()) == std::vector<double>(1000, w * (w + 1) / 2));
    Tensor a = hg::full({3}, r).to(dt).cuda();
    pg.all_reduce(a, dist::ReduceOp::Avg);
    CHECK(hgtest::values(a.cpu()) == std::vector<double>(3, (w + 1) / 2));
  }
  Tensor b = (hg::arange(0, 4) + 10.0 * pg.rank()).cuda();
  pg.broadcast(b, 0);
  CHECK(hgtest::values(b.cpu()) == hgtest::values(hg::arange(0, 4)));
  const Tensor all = pg.all_gather((hg::arange(0, 4) + 10.0 * pg.rank()).cuda());
  for (int k = 0; k < pg.world_size(); ++k) CHECK(hgtest::values(all[k].cpu()) == hgtest::values(hg::arange(0, 4) + 10.0 * k));
}
