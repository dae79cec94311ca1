// DistributedSampler: PyTorch's sharding (pad by repeating the start, or drop
// the tail; rank r takes every world_size-th position), the same shuffle on
// every rank, one pass over the data per epoch across ranks; the DataLoader
// with a sampler.
#include <catch2/catch.hpp>

#include <halfgrad.h>
#include <halfgrad/distributed/process_group.h>
#include <halfgrad/distributed/sampler.h>

#include <algorithm>
#include <map>
#include <vector>

#include "test_util.h"

namespace hg = halfgrad;
namespace dist = halfgrad::distributed;
using hg::Tensor;

namespace {
std::vector<int64_t> indices(const dist::DistributedSampler& s, int64_t n, int64_t epoch) {
  return hgtest::ivalues(s.indices(n, epoch));
}
}  // namespace

TEST_CASE("DistributedSampler shards as PyTorch's: padding, drop_last, no shuffle", "[distributed][sampler]") {
  // 10 samples, 3 ranks: padded to 12 by repeating 0, 1; rank r takes r, r+3, ...
  const dist::DistributedSamplerOptions plain{.shuffle = false};
  CHECK(indices(dist::DistributedSampler(3, 0, plain), 10, 0) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(indices(dist::DistributedSampler(3, 1, plain), 10, 0) == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(indices(dist::DistributedSampler(3, 2, plain), 10, 0) == std::vector<int64_t>{2, 5, 8, 1});
  const dist::DistributedSamplerOptions drop{.shuffle = false, .drop_last = true};
  CHECK(indices(dist::DistributedSampler(3, 2, drop), 10, 0) == std::vector<int64_t>{2, 5, 8});
  CHECK(dist::DistributedSampler(3, 0, drop).size(10) == 3);
  CHECK(dist::DistributedSampler(3, 0).size(10) == 4);
  // a data set smaller than the world: padding repeats it
  CHECK(indices(dist::DistributedSampler(4, 3, plain), 2, 0) == std::vector<int64_t>{1});
  CHECK_THROWS_WITH(dist::DistributedSampler(2, 2), Catch::Contains("need 0 <= rank < world_size"));
}

TEST_CASE("DistributedSampler without padding (evaluation): every sample on exactly one rank", "[distributed][sampler]") {
  const dist::DistributedSamplerOptions eval{.shuffle = false, .pad = false};
  CHECK(indices(dist::DistributedSampler(3, 0, eval), 10, 0) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(indices(dist::DistributedSampler(3, 1, eval), 10, 0) == std::vector<int64_t>{1, 4, 7});
  CHECK(indices(dist::DistributedSampler(3, 2, eval), 10, 0) == std::vector<int64_t>{2, 5, 8});
  CHECK(dist::DistributedSampler(4, 3, eval).size(2) == 0);  // a world larger than the data: empty shards
  CHECK(indices(dist::DistributedSampler(4, 3, eval), 2, 0).empty());
  for (int world : {1, 2, 3, 5}) {
    std::map<int64_t, int> seen;
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      const dist::DistributedSampler s(world, r, {.seed = 3, .pad = false});
      CHECK(s.size(101) == static_cast<int64_t>(indices(s, 101, 1).size()));
      total += s.size(101);
      for (int64_t i : indices(s, 101, 1)) ++seen[i];
    }
    CHECK(total == 101);
    CHECK(seen.size() == 101);
  }
}

TEST_CASE("DistributedSampler: each epoch's shuffle covers the data once across ranks", "[distributed][sampler]") {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t epoch : {0, 1}) {
      std::map<int64_t, int> seen;
      for (int r = 0; r < world; ++r)
        for (int64_t i : indices(dist::DistributedSampler(world, r, {.seed = 7}), 101, epoch)) ++seen[i];
      CHECK(seen.size() == 101);  // every sample
      int extra = 0;
      for (auto& [i, c] : seen) extra += c - 1;
      CHECK(extra == (world - 101 % world) % world);  // and only the padding twice
    }
  }
  const dist::DistributedSampler s(2, 0, {.seed = 7});
  CHECK(indices(s, 101, 0) != indices(s, 101, 1));                                      // a new order per epoch
  CHECK(indices(s, 101, 1) == indices(dist::DistributedSampler(2, 0, {.seed = 7}), 101, 1));  // the same on every rank
  CHECK(indices(s, 101, 1) != indices(dist::DistributedSampler(2, 0, {.seed = 8}), 101, 1));
}

TEST_CASE("a DataLoader with a DistributedSampler: this rank's shard, across real ranks", "[distributed][sampler]") {
  auto& pg = dist::init();
  const int64_t n = 23;
  hg::data::TensorDataset ds(hg::arange(0, n).reshape({n, 1}), hg::arange(0, n).to(hg::kLong));
  auto sampler = std::make_shared<dist::DistributedSampler>(pg.world_size(), pg.rank(), dist::DistributedSamplerOptions{.seed = 3});
  hg::data::DataLoader loader(ds, {.batch_size = 4, .prefetch = 0, .sampler = sampler});
  const int64_t per_rank = (n + pg.world_size() - 1) / pg.world_size();
  CHECK(loader.size() == (per_rank + 3) / 4);
  for (int64_t epoch : {0, 1}) {
    loader.set_epoch(epoch);
    std::vector<double> mine;
    for (auto& batch : loader)
      for (double v : hgtest::values(batch.input)) mine.push_back(v);
    CHECK(static_cast<int64_t>(mine.size()) == per_rank);
    // all ranks' samples together: the whole data set (plus the padding)
    const Tensor all = pg.all_gather(hg::tensor(mine));
    std::vector<double> v = hgtest::values(all);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    CHECK(static_cast<int64_t>(v.size()) == n);
  }
  CHECK_THROWS_WITH(hg::data::DataLoader(ds, {.shuffle = true, .sampler = sampler}),
                    Catch::Contains("mutually exclusive"));
}
