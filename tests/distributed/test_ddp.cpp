// DistributedDataParallel on 2 and 3 ranks: replicas start from rank 0's
// weights; data-parallel training equals one process on the concatenated
// batch; the parameters stay bit-identical on every rank; no_sync accumulates;
// the GradScaler skips the same steps everywhere when one rank alone sees an
// inf; a parameter without a gradient is an Error.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/distributed/ddp.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
namespace dist = halfgrad::distributed;
using hg::Tensor;

namespace {

hg::nn::Sequential make_model(uint64_t seed) {
  hg::manual_seed(seed);
  return hg::nn::Sequential(hg::nn::Linear(6, 16), hg::nn::ReLU(), hg::nn::Linear(16, 16), hg::nn::ReLU(),
                            hg::nn::Linear(16, 3));
}

// Every rank's copy of t, exactly equal to rank 0's?
bool same_on_all_ranks(dist::ProcessGroup& pg, const Tensor& t) {
  const Tensor all = pg.all_gather(t.detach().contiguous());
  for (int r = 1; r < pg.world_size(); ++r)
    if (!hg::equal(all[r], all[0])) return false;
  return true;
}

}  // namespace

TEST_CASE("DDP: replicas start from rank 0's weights, and train as one process on the whole batch", "[distributed][ddp]") {
  auto& pg = dist::init();
  const int w = pg.world_size(), r = pg.rank();
  for (const bool view : {false, true}) {
    INFO("gradient_as_bucket_view " << view);
    auto model = make_model(100 + static_cast<uint64_t>(r));  // different on every rank...
    dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.001, .gradient_as_bucket_view = view});
    // ...until DDP broadcasts rank 0's
    CHECK(ddp.buckets().size() > 1);  // several buckets, last layer first
    CHECK(ddp.buckets().front().front() == "4.bias");
    for (const auto& p : model.parameters()) CHECK(same_on_all_ranks(pg, p));
    // the reference: rank 0's initial weights trained on the concatenated batch in one process
    auto reference = make_model(100);
    hg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    hg::optim::SGD ref_opt(reference.parameters(), {.lr = 0.1, .momentum = 0.9});
    hg::manual_seed(7);  // the same global batches on every rank
    for (int step = 0; step < 5; ++step) {
      const Tensor x = hg::randn({4 * w, 6}), y = hg::randint(0, 3, {4 * w});
      opt.zero_grad(/*set_to_none=*/step % 2 == 0);  // both ways: a fresh .grad, and one zeroed in place
      hg::cross_entropy(model(x.narrow(0, 4 * r, 4)), y.narrow(0, 4 * r, 4)).backward();  // this rank's shard
      opt.step();
      ref_opt.zero_grad();
      hg::cross_entropy(reference(x), y).backward();
      ref_opt.step();
    }
    const auto ps = model.parameters(), rs = reference.parameters();
    std::set<const void*> storages;
    for (size_t i = 0; i < ps.size(); ++i) {
      CHECK(hg::allclose(ps[i], rs[i], 1e-5, 1e-6));
      CHECK(same_on_all_ranks(pg, ps[i]));  // bit for bit
      storages.insert(ps[i].grad().storage().get());
    }
    // as views, the gradients of one bucket share its buffer
    CHECK((storages.size() < ps.size()) == view);
  }
}

TEST_CASE("DDP: no_sync accumulates locally, the next backward reduces the sum", "[distributed][ddp]") {
  auto& pg = dist::init();
  const int w = pg.world_size(), r = pg.rank();
  auto model = make_model(3);
  dist::DistributedDataParallel ddp(model, pg);
  auto reference = make_model(3);
  hg::manual_seed(11);
  const Tensor x1 = hg::randn({2 * w, 6}), y1 = hg::randint(0, 3, {2 * w});
  const Tensor x2 = hg::randn({2 * w, 6}), y2 = hg::randint(0, 3, {2 * w});
  {
    auto no_sync = ddp.no_sync();
    hg::cross_entropy(model(x1.narrow(0, 2 * r, 2)), y1.narrow(0, 2 * r, 2)).backward();
  }
  if (w > 1) CHECK_FALSE(same_on_all_ranks(pg, model.parameters()[0].grad()));  // not reduced yet
  hg::cross_entropy(model(x2.narrow(0, 2 * r, 2)), y2.narrow(0, 2 * r, 2)).backward();
  hg::cross_entropy(reference(x1), y1).backward();
  hg::cross_entropy(reference(x2), y2).backward();
  const auto ps = model.parameters(), rs = reference.parameters();
  for (size_t i = 0; i < ps.size(); ++i) CHECK(hg::allclose(ps[i].grad(), rs[i].grad(), 1e-5, 1e-6));
}

TEST_CASE("DDP + GradScaler: one rank's inf skips the step on every rank, and the scales stay equal", "[distributed][ddp]") {
  auto& pg = dist::init();
  const int r = pg.rank();
  auto model = make_model(5);
  dist::DistributedDataParallel ddp(model, pg);
  hg::amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  ddp.sync_scaler(scaler);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::manual_seed(13);
  std::vector<bool> skipped;
  for (int step = 0; step < 6; ++step) {
    Tensor x = hg::randn({3, 6});
    const Tensor y = hg::randint(0, 3, {3});
    opt.zero_grad();
    const auto before = model.parameters()[0].clone();
    if (step == 2 && r == pg.world_size() - 1) x = x * std::numeric_limits<double>::infinity();
    {
      // under no_sync the gradients stay local: only the scaler's all-reduce tells the other ranks
      auto no_sync = ddp.no_sync();
      scaler.scale(hg::cross_entropy(model(x), y)).backward();
    }
    const auto result = scaler.step(opt);
    scaler.update();
    skipped.push_back(result.skipped());
    CHECK(result.skipped() == hg::equal(model.parameters()[0], before));
    CHECK(same_on_all_ranks(pg, hg::full({1}, scaler.get_scale())));
    CHECK(same_on_all_ranks(pg, hg::full({1}, static_cast<double>(scaler.growth_tracker()))));
  }
  // step 2 skipped everywhere (scale 1024 -> 512); the rest applied, growing every 2 clean steps
  CHECK(skipped == std::vector<bool>{false, false, true, false, false, false});
  CHECK(scaler.get_scale() == 2048.0);  // 1024 x2 (after 0, 1) /2 (2) x2 (3, 4) ; 5 counts 1
}

TEST_CASE("DDP: a parameter without a gradient is an Error on every rank", "[distributed][ddp]") {
  auto& pg = dist::init();
  auto model = make_model(9);
  dist::DistributedDataParallel ddp(model, pg);
  // only the first layer takes part
  auto& first = model.at<hg::nn::Linear>(0);
  CHECK_THROWS_WITH(hg::sum(first(hg::randn({2, 6}))).backward(), Catch::Contains("got no gradient in this backward"));
  pg.barrier();
}
