// Data sets and the DataLoader: batching, drop_last, the seeded per-epoch
// shuffle (its own stream, independent of the global generator), the
// background thread (same batches as without it, errors rethrown at the
// failing batch, clean shutdown on break and on destruction), resuming from
// state(), transforms, pinned host tensors, and the CUDA path ("[cuda]").
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <halfgrad/core/pinned.h>
#include <halfgrad/data/data.h>

#include "test_util.h"

namespace hg = halfgrad;
using hg::Tensor;
using hg::data::DataLoader;
using hg::data::DataLoaderOptions;
using hg::data::Example;
using hg::data::TensorDataset;

namespace {

// n samples: input i is [3] = (i, i + 0.25, i + 0.5) as float32, target i is 1000 + i.
TensorDataset numbered(int64_t n) {
  std::vector<float> in;
  std::vector<int64_t> tg;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) in.push_back(static_cast<float>(i) + 0.25f * static_cast<float>(j));
    tg.push_back(1000 + i);
  }
  return TensorDataset(hg::tensor(in, {n, 3}), hg::tensor(tg, {n}));
}

// The sample ids of a batch of `numbered`, checking inputs and targets agree.
std::vector<int64_t> ids(const Example& b) {
  const auto in = b.input.to_vector<double>();
  const auto tg = b.target.to_vector<int64_t>();
  REQUIRE(b.input.dim() == 2);
  REQUIRE(b.input.size(1) == 3);
  REQUIRE(b.target.size(0) == b.input.size(0));
  std::vector<int64_t> out;
  for (size_t r = 0; r < tg.size(); ++r) {
    const int64_t id = tg[r] - 1000;
    for (int j = 0; j < 3; ++j) REQUIRE(in[3 * r + j] == static_cast<double>(id) + 0.25 * j);
    out.push_back(id);
  }
  return out;
}

// Every batch of one pass, as ids.
std::vector<std::vector<int64_t>> pass(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) out.push_back(ids(batch));
  return out;
}

std::vector<int64_t> concat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  if (static_cast<int64_t>(v.size()) != n) return false;
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

// A general data set (no get_batch of its own): sample i is ([2] = (i, -i), i),
// made on whatever thread asks; `fail_at` throws for that sample.
class Counting : public hg::data::Dataset {
 public:
  explicit Counting(int64_t n, int64_t fail_at = -1, int sleep_us = 0) : n_(n), fail_at_(fail_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads_.insert(std::this_thread::get_id());
    }
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    HG_CHECK(i != fail_at_, "Counting: sample {} is unreadable", i);
    const auto v = static_cast<double>(i);
    return {hg::tensor({v, -v}), hg::tensor(std::vector<int64_t>{i}, {})};
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }

 private:
  int64_t n_, fail_at_;
  int sleep_us_;
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> threads_;
};

}  // namespace

TEST_CASE("TensorDataset: get is a view, get_batch gathers", "[data][dataset]") {
  const TensorDataset ds = numbered(7);
  CHECK(ds.size() == 7);
  const Example e = ds.get(4);
  CHECK(e.input.shape() == hg::Shape{3});
  CHECK(e.target.dim() == 0);
  CHECK(e.input.storage() == ds.inputs().storage());  // a view
  CHECK(e.input.to_vector<double>() == std::vector<double>{4, 4.25, 4.5});
  CHECK(e.target.item<int64_t>() == 1004);
  const Example b = ds.get_batch(hg::tensor({6, 0, 3}));
  CHECK(ids(b) == std::vector<int64_t>{6, 0, 3});
  CHECK(b.input.storage() != ds.inputs().storage());
  // The gather equals index_select, for contiguous data (a memcpy per row) and
  // for a strided view (index_select itself), 0-d targets' rows included.
  const Tensor idx = hg::tensor({2, 2, 5, 0, 1});
  for (bool strided : {false, true}) {
    INFO("strided " << strided);
    Tensor in = hgtest::uniform({6, 4, 3}, hg::DType::Float32);
    if (strided) in = in.transpose(1, 2);
    const TensorDataset d(in, hg::randint(0, 9, {6}));
    const Example g = d.get_batch(idx);
    CHECK(g.input.equal(hg::index_select(in, 0, idx)));
    CHECK(g.target.equal(hg::index_select(d.targets(), 0, idx)));
  }
  // A general data set stacks get(i).
  const Counting c(5);
  const Example s = c.get_batch(hg::tensor({4, 1}));
  CHECK(s.input.shape() == hg::Shape{2, 2});
  CHECK(s.input.to_vector<double>() == std::vector<double>{4, -4, 1, -1});
  CHECK(s.target.to_vector<int64_t>() == std::vector<int64_t>{4, 1});
}

TEST_CASE("DataLoader: batches in order, a partial last batch, drop_last", "[data][loader]") {
  for (int64_t prefetch : {0, 1, 3}) {
    INFO("prefetch " << prefetch);
    DataLoader keep(numbered(10), DataLoaderOptions{.batch_size = 4, .prefetch = prefetch});
    CHECK(keep.size() == 3);
    const auto b = pass(keep);
    CHECK(b == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}});
    DataLoader drop(numbered(10), DataLoaderOptions{.batch_size = 4, .drop_last = true, .prefetch = prefetch});
    CHECK(drop.size() == 2);
    CHECK(pass(drop) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
    DataLoader exact(numbered(8), DataLoaderOptions{.batch_size = 4, .drop_last = true, .prefetch = prefetch});
    CHECK(exact.size() == 2);
    CHECK(concat(pass(exact)).size() == 8);
    // Fewer samples than a batch: one small batch, or none with drop_last.
    DataLoader small(numbered(3), DataLoaderOptions{.batch_size = 4, .prefetch = prefetch});
    CHECK(pass(small) == std::vector<std::vector<int64_t>>{{0, 1, 2}});
    DataLoader none(numbered(3), DataLoaderOptions{.batch_size = 4, .drop_last = true, .prefetch = prefetch});
    CHECK(none.size() == 0);
    CHECK(pass(none).empty());
    DataLoader empty(numbered(0), DataLoaderOptions{.batch_size = 2, .prefetch = prefetch});
    CHECK(empty.size() == 0);
    CHECK(empty.begin() == empty.end());
  }
}

TEST_CASE("DataLoader: general data sets are stacked on the background thread", "[data][loader]") {
  auto ds = std::make_shared<Counting>(9);
  DataLoader loader(ds, DataLoaderOptions{.batch_size = 2, .prefetch = 2});
  std::vector<int64_t> seen;
  for (auto& b : loader) {
    CHECK(b.input.size(1) == 2);
    for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  const auto threads = ds->threads();
  CHECK(threads.size() == 1);
  CHECK(threads.count(std::this_thread::get_id()) == 0);  // not made on the consumer's thread

  auto ds0 = std::make_shared<Counting>(4);
  DataLoader inline_loader(ds0, DataLoaderOptions{.batch_size = 3, .prefetch = 0});
  CHECK(concat(std::vector<std::vector<int64_t>>{}).empty());
  for (auto& b : inline_loader) CHECK(b.target.numel() > 0);
  CHECK(ds0->threads() == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("DataLoader shuffle: a permutation per epoch that depends on seed and epoch alone", "[data][loader][shuffle]") {
  const int64_t n = 103;
  DataLoaderOptions opts{.batch_size = 10, .shuffle = true, .seed = 1234};
  DataLoader a(numbered(n), opts);
  const auto e0 = concat(pass(a));
  CHECK(a.state().epoch == 1);
  const auto e1 = concat(pass(a));
  CHECK(is_permutation_of_range(e0, n));
  CHECK(is_permutation_of_range(e1, n));
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(e0 != identity);
  CHECK(e0 != e1);  // a new order each epoch
  // The same seed gives the same orders, whatever the global generator does.
  hg::manual_seed(99);
  (void)hg::rand({50});
  DataLoader b(numbered(n), opts);
  (void)hg::randn({17});
  CHECK(concat(pass(b)) == e0);
  hg::manual_seed(5);
  CHECK(concat(pass(b)) == e1);
  CHECK(a.epoch_order(0).to_vector<int64_t>() == e0);
  CHECK(a.epoch_order(1).to_vector<int64_t>() == e1);
  // Another seed, another order.
  DataLoader c(numbered(n), DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 1235});
  CHECK(concat(pass(c)) != e0);
  // The default seed is initial_seed() when the loader is made.
  hg::manual_seed(1234);
  DataLoader d(numbered(n), DataLoaderOptions{.batch_size = 10, .shuffle = true});
  CHECK(d.seed() == 1234);
  CHECK(concat(pass(d)) == e0);
  // Prefetching does not change what arrives.
  DataLoader p(numbered(n), DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 1234, .prefetch = 4});
  DataLoader q(numbered(n), DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 1234, .prefetch = 0});
  for (int epoch = 0; epoch < 3; ++epoch) CHECK(pass(p) == pass(q));
}

TEST_CASE("DataLoader shuffle: positions are close to uniform", "[data][loader][shuffle]") {
  // Over 2000 epochs of 5 samples, each sample lands in each position ~400
  // times; a biased shuffle (e.g. j in [0, n) instead of [0, i]) misses by far more.
  DataLoader loader(numbered(5), DataLoaderOptions{.batch_size = 5, .shuffle = true, .seed = 7, .prefetch = 0});
  int counts[5][5] = {};
  for (int e = 0; e < 2000; ++e) {
    const auto order = loader.epoch_order(e).to_vector<int64_t>();
    for (int pos = 0; pos < 5; ++pos) ++counts[order[pos]][pos];
  }
  for (auto& row : counts)
    for (int c : row) CHECK(std::abs(c - 400) < 80);  // ~4.5 sigma
}

TEST_CASE("DataLoader resume: stopped after batch k, continued from state() on a new loader", "[data][loader][resume]") {
  const int64_t n = 57;
  for (int64_t prefetch : {0, 2}) {
    INFO("prefetch " << prefetch);
    const DataLoaderOptions opts{.batch_size = 8, .shuffle = true, .seed = 42, .prefetch = prefetch};
    DataLoader whole(numbered(n), opts);
    std::vector<std::vector<int64_t>> expected;
    for (int e = 0; e < 3; ++e)
      for (auto& b : pass(whole)) expected.push_back(b);

    for (int stop_after : {0, 3, 7, 8, 12}) {  // batch 7 ends epoch 0 (8 batches per epoch)
      INFO("stopped after batch " << stop_after);
      std::vector<std::vector<int64_t>> got;
      hg::data::DataLoaderState saved;
      {
        DataLoader first(numbered(n), opts);
        int k = 0;
        bool stopped = false;
        while (!stopped) {
          for (auto& b : first) {
            got.push_back(ids(b));
            if (k++ == stop_after) {
              saved = first.state();  // inside the body: batch k counts as done
              stopped = true;
              break;
            }
          }
        }
      }  // the loader dies with its thread possibly mid-epoch
      CHECK(saved.seed == 42);
      CHECK(saved.epoch == (stop_after + 1) / 8);
      CHECK(saved.batch == (stop_after + 1) % 8);
      DataLoader second(numbered(n), DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 1, .prefetch = prefetch});
      second.set_state(saved);
      CHECK(second.state() == saved);
      while (got.size() < expected.size())
        for (auto& b : second) got.push_back(ids(b));
      CHECK(got == expected);
    }
  }
  // A loop left early and entered again continues the same epoch.
  DataLoader loader(numbered(20), DataLoaderOptions{.batch_size = 5, .shuffle = true, .seed = 3});
  const auto order = loader.epoch_order(0).to_vector<int64_t>();
  std::vector<int64_t> seen;
  for (auto& b : loader) {
    for (auto i : ids(b)) seen.push_back(i);
    break;
  }
  CHECK(loader.state() == hg::data::DataLoaderState{3, 0, 1});
  for (auto& b : loader)
    for (auto i : ids(b)) seen.push_back(i);
  CHECK(seen == order);
  CHECK(loader.state() == hg::data::DataLoaderState{3, 1, 0});
  loader.set_epoch(0);
  CHECK(concat(pass(loader)) == order);
}

TEST_CASE("DataLoader position in a checkpoint's map: saved, restored, and an Error when missing or damaged",
          "[data][loader][resume]") {
  using Catch::Matchers::Contains;
  const DataLoaderOptions opts{.batch_size = 4, .shuffle = true, .seed = 11};
  DataLoader first(numbered(30), opts);
  int k = 0;
  for (auto& b : first) {
    (void)b;
    if (++k == 10) break;  // into epoch 1 (8 batches an epoch)
  }
  std::map<std::string, std::string> extra{{"other", "kept"}};
  hg::data::save_position(first, extra);
  CHECK(extra.at("loader.epoch") == "1");
  CHECK(extra.at("other") == "kept");
  DataLoader second(numbered(30), DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 99});
  hg::data::restore_position(second, extra);
  CHECK(second.state() == first.state());
  CHECK(pass(second) == pass(first));
  // a second loader under its own key
  hg::data::save_position(second, extra, "eval_loader");
  CHECK(extra.count("eval_loader.batch") == 1);
  // a checkpoint saved without it: an Error, not epoch 0 again
  DataLoader third(numbered(30), opts);
  REQUIRE_THROWS_WITH(hg::data::restore_position(third, {{"other", "kept"}}),
                      Contains("no data loader position") && Contains("loader.seed"));
  // hostile entries: not numbers, out of range, a position this loader does not have
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"loader.epoch", "x1"}, {"loader.epoch", ""}, {"loader.seed", "-1"},
           {"loader.batch", "99999999999999999999999"}, {"loader.epoch", "3 "}}) {
    INFO(name << " = '" << value << "'");
    auto bad = extra;
    bad[name] = value;
    REQUIRE_THROWS_WITH(hg::data::restore_position(third, bad), Contains(name));
  }
  auto beyond = extra;
  beyond["loader.batch"] = "100";
  REQUIRE_THROWS_WITH(hg::data::restore_position(third, beyond), Contains("not a position of this loader"));
}

TEST_CASE("DataLoader: a failing sample is rethrown at its batch, in the consumer's thread", "[data][loader][errors]") {
  for (int64_t prefetch : {0, 1, 4}) {
    INFO("prefetch " << prefetch);
    auto ds = std::make_shared<Counting>(20, /*fail_at=*/13);
    DataLoader loader(ds, DataLoaderOptions{.batch_size = 3, .prefetch = prefetch});
    std::vector<int64_t> seen;
    std::string message;
    try {
      for (auto& b : loader)
        for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
    } catch (const hg::Error& e) {
      message = e.what();
    }
    CHECK_THAT(message, Catch::Matchers::Contains("sample 13 is unreadable"));
    CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});  // batches 0..3, not batch 4
    CHECK(loader.state().batch == 4);  // the failed batch is next again
    // A throw in the first batch comes out of begin().
    auto first = std::make_shared<Counting>(5, 0);
    DataLoader l2(first, DataLoaderOptions{.batch_size = 2, .prefetch = prefetch});
    CHECK_THROWS_WITH(l2.begin(), Catch::Matchers::Contains("sample 0 is unreadable"));
  }
}

TEST_CASE("DataLoader: break, restart and destruction mid-epoch stop the thread cleanly", "[data][loader][threads]") {
  auto ds = std::make_shared<Counting>(200, -1, /*sleep_us=*/200);
  for (int round = 0; round < 5; ++round) {
    DataLoader loader(ds, DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 9, .prefetch = 3});
    int k = 0;
    for (auto& b : loader) {
      CHECK(b.input.size(0) == 4);
      if (++k == round + 1) break;  // the queue is full or the thread is mid-batch
    }
    CHECK(loader.state().batch == round + 1);
    auto it = loader.begin();  // a new pass while nothing runs
    CHECK(it != loader.end());
    auto it2 = loader.begin();  // ends the first pass: `it` is stale now
    CHECK_THROWS_WITH(++it, Catch::Matchers::Contains("pass was ended"));
    CHECK(it2->input.size(0) == 4);
  }
  // An iterator that outlives its loader is inert.
  DataLoader::Iterator survivor;
  {
    auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 4, .prefetch = 2});
    survivor = loader->begin();
    loader.reset();  // the thread is stopped and joined here, mid-epoch
  }
  CHECK_THROWS_WITH(*survivor, Catch::Matchers::Contains("at the end"));
}

TEST_CASE("DataLoader errors", "[data][loader][errors]") {
  using hgtest::ErrorCase;
  hgtest::expect_errors({
      {"batch_size 0", [] { DataLoader l(numbered(4), DataLoaderOptions{.batch_size = 0}); }, {"batch_size must be positive"}},
      {"negative prefetch", [] { DataLoader l(numbered(4), DataLoaderOptions{.prefetch = -1}); }, {"prefetch must be >= 0"}},
      {"set_state beyond the epoch",
       [] {
         DataLoader l(numbered(4), DataLoaderOptions{.batch_size = 2});
         l.set_state({1, 0, 3});
       },
       {"set_state", "2 batches per epoch"}},
      {"negative epoch", [] { DataLoader(numbered(4)).set_epoch(-1); }, {"set_epoch"}},
      {"TensorDataset size mismatch", [] { TensorDataset(hg::zeros({3, 2}), hg::zeros({4})); }, {"3 samples", "4"}},
      {"TensorDataset 0-d", [] { TensorDataset(hg::tensor({1.0}).sum(), hg::zeros({1})); }, {"first dimension"}},
      {"get out of range", [] { numbered(3).get(3); }, {"index 3 is out of range for 3 samples"}},
      {"get_batch out of range", [] { numbered(3).get_batch(hg::tensor({0, 3})); }, {"index 3 is out of range"}},
      {"get_batch with float indices", [] { numbered(3).get_batch(hg::tensor({1.0})); }, {"1-d int64 CPU"}},
      {"dereferencing end", [] {
         DataLoader l(numbered(2));
         *l.end();
       }, {"at the end"}},
  });
  if (!hg::cuda::is_available())
    hgtest::expect_errors({{"CUDA device without CUDA",
                            [] { DataLoader l(numbered(4), DataLoaderOptions{.device = hg::Device::cuda()}); },
                            {"cuda:0 is not available"}}});
}

TEST_CASE("Pad: torchvision's constant padding of the last two dims", "[data][transforms]") {
  const Tensor x = hgtest::uniform({2, 1, 3, 2}, hg::DType::Float32, 0.5, 1.5);
  const Tensor y = hg::data::Pad(2, -1.0)(x);
  REQUIRE(y.shape() == hg::Shape{2, 1, 7, 6});
  CHECK(y.dtype() == hg::DType::Float32);
  const auto xv = hgtest::values(x), yv = hgtest::values(y);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        const bool inside = i >= 2 && i < 5 && j >= 2 && j < 4;
        const double want = inside ? xv[static_cast<size_t>(n * 6 + (i - 2) * 2 + (j - 2))] : -1.0;
        CHECK(yv[static_cast<size_t>(n * 42 + i * 6 + j)] == want);
      }
  // An Example keeps its target; 0 padding is the identity; a sample [H, W] works.
  Example e{hg::ones({1, 28, 28}), hg::tensor({3})};
  const Example p = hg::data::Pad(2)(e);
  CHECK(p.input.shape() == hg::Shape{1, 32, 32});
  CHECK(p.input.sum().item() == 28.0 * 28.0);
  CHECK(p.target.is_same(e.target));
  CHECK(hg::data::Pad(0)(x).is_same(x));
  CHECK(hg::data::Pad(1)(hg::ones({2, 2})).shape() == hg::Shape{4, 4});
  hgtest::expect_errors({{"negative", [] { hg::data::Pad(-1); }, {"padding must be >= 0"}},
                         {"1-d", [] { hg::data::Pad(1)(hg::ones({3})); }, {"expected [..., H, W]"}}});
}

TEST_CASE("Normalize and Flatten", "[data][transforms]") {
  for (hg::DType dt : {hg::DType::Float32, hg::DType::Float64}) {
    INFO(hgtest::dname(dt));
    // [2, 3, 2, 2]: 3 channels with their own mean/std.
    Tensor x = hgtest::uniform({2, 3, 2, 2}, dt, -1.0, 2.0);
    const std::vector<double> mean{0.5, -0.25, 1.0}, std{0.2, 2.0, 0.75};
    const Tensor y = hg::data::Normalize(mean, std)(x);
    CHECK(y.dtype() == dt);
    const auto xv = hgtest::values(x);
    std::vector<double> ref(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = (i / 4) % 3;
      ref[i] = (xv[i] - mean[c]) / std[c];
    }
    HG_CHECK_CLOSE_TOL(y, ref, hgtest::tol(dt) * 10);
    // one value for every channel, on a single sample [C, H, W] that is a permuted view
    const Tensor v = x.select(0, 1).permute({0, 2, 1});
    const auto vv = hgtest::values(v);
    std::vector<double> ref1(vv.size());
    for (size_t i = 0; i < vv.size(); ++i) ref1[i] = (vv[i] - 0.3) / 0.5;
    HG_CHECK_CLOSE_TOL(hg::data::Normalize({0.3}, {0.5})(v), ref1, hgtest::tol(dt) * 10);
  }
  // On an Example: the input changes, the target does not.
  Example e{hg::ones({4, 1, 2, 2}), hg::tensor({1, 2, 3, 4})};
  const Example n = hg::data::Flatten{}(hg::data::Normalize({0.5}, {0.25})(e));
  CHECK(n.input.shape() == hg::Shape{4, 4});
  CHECK(n.input.to_vector<double>() == std::vector<double>(16, 2.0));
  CHECK(n.target.is_same(e.target));
  CHECK(hg::data::Flatten{0}(hg::ones({2, 3, 4})).shape() == hg::Shape{24});
  hgtest::expect_errors({
      {"zero std", [] { hg::data::Normalize({0.0}, {0.0}); }, {"std positive"}},
      {"sizes differ", [] { hg::data::Normalize({0.0, 1.0}, {1.0}); }, {"mean has 2 values and std 1"}},
      {"channels differ", [] { hg::data::Normalize({0.0, 1.0}, {1.0, 1.0})(hg::ones({1, 3, 2, 2})); },
       {"3 channels", "2 mean/std"}},
      {"integer input", [] { hg::data::Normalize({0.0}, {1.0})(hg::zeros({1, 1, 2, 2}, hg::DType::Int64)); },
       {"floating"}},
      {"too few dims", [] { hg::data::Normalize({0.0}, {1.0})(hg::ones({4, 4})); }, {"dimension -3"}},
  });
}

TEST_CASE("empty_pinned: a writable host tensor, ordinary memory without CUDA", "[data][pinned]") {
  Tensor t = hg::empty_pinned({3, 5}, hg::DType::Float64);
  CHECK(t.device().is_cpu());
  CHECK(t.shape() == hg::Shape{3, 5});
  CHECK(t.dtype() == hg::DType::Float64);
  CHECK(t.is_contiguous());
  t.fill_(2.5);
  CHECK(t.sum().item<double>() == 37.5);
  CHECK(hg::is_pinned(t) == hg::cuda::is_available());
  CHECK_FALSE(hg::is_pinned(hg::ones({2})));
  CHECK(hg::empty_pinned({0}).numel() == 0);
}

// ---- CUDA (run only where a GPU is usable) --------------------------------

TEST_CASE("CUDA DataLoader: batches arrive on the device, equal to the CPU's", "[cuda][data][loader]") {
  const hg::Device gpu = hg::Device::cuda();
  Tensor pinned = hg::empty_pinned({4}, hg::DType::Float32);
  CHECK(hg::is_pinned(pinned));
  const TensorDataset ds(hgtest::uniform({50, 2, 3}, hg::DType::Float32, -1.0, 1.0), hg::randint(0, 10, {50}));
  for (bool pin : {true, false})
    for (int64_t prefetch : {0, 1, 3}) {
      INFO("pin_memory " << pin << ", prefetch " << prefetch);
      DataLoader cpu(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 11, .prefetch = 0});
      DataLoader dev(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 11, .device = gpu,
                                           .pin_memory = pin, .prefetch = prefetch});
      std::vector<Example> want;
      for (auto& b : cpu) want.push_back(b);
      size_t k = 0;
      for (auto& b : dev) {
        REQUIRE(k < want.size());
        CHECK(b.input.device() == gpu);
        CHECK(b.target.device() == gpu);
        // use it on the consumer's stream at once: the copy must be waited for
        const Tensor doubled = b.input * 2.0;
        CHECK(doubled.cpu().equal(want[k].input * 2.0));
        CHECK(b.target.cpu().equal(want[k].target));
        ++k;
      }
      CHECK(k == want.size());
    }
  // A data set already on the device is gathered there.
  const TensorDataset on_gpu(ds.inputs().to(gpu), ds.targets().to(gpu));
  DataLoader g(on_gpu, DataLoaderOptions{.batch_size = 16, .device = gpu, .prefetch = 2});
  int64_t seen = 0;
  for (auto& b : g) {
    CHECK(b.input.device() == gpu);
    CHECK(b.input.cpu().equal(ds.inputs().narrow(0, seen, b.input.size(0))));
    seen += b.input.size(0);
  }
  CHECK(seen == 50);
  // Destroyed mid-epoch with copies in flight.
  for (int i = 0; i < 3; ++i) {
    DataLoader l(ds, DataLoaderOptions{.batch_size = 4, .device = gpu, .prefetch = 3});
    for (auto& b : l) {
      CHECK(b.input.device() == gpu);
      break;
    }
  }
}
