#pragma once
// DataLoader: batches of a Dataset (data/dataset.h) in a seeded, resumable
// order, assembled ahead of time by a background thread and delivered on the
// training device. PyTorch's torch.utils.data.DataLoader for map-style data
// sets, with three deliberate differences:
//
//  * Its own random stream. The order of epoch e is a pure function of
//    (options.seed, e): a Philox4x32-10 Fisher-Yates shuffle on counters of its
//    own, never the global generator. So model initialisation and dropout do
//    not shift the data order, and a resumed run rebuilds the same
//    permutation. (PyTorch draws a fresh seed from the global generator at
//    every iter(); we take options.seed, by default initial_seed() when the
//    loader is made.)
//  * One pass at a time, resumable. state() = {seed, epoch, next batch};
//    begin() continues from there, so a loop left early (break) and entered
//    again continues the same epoch, and set_state() on a fresh loader
//    continues a stopped run exactly. An epoch that runs to its end moves on
//    to the next epoch, with a new permutation.
//  * prefetch batches ahead in one thread (not worker processes): the batch
//    is one index_select for a TensorDataset, cheap enough for one thread.
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <halfgrad/core/device.h>
#include <halfgrad/data/dataset.h>
#include <halfgrad/data/sampler.h>

namespace halfgrad::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  // Drop the last batch when it would hold fewer than batch_size samples;
  // otherwise it is delivered, smaller.
  bool drop_last = false;
  // The shuffling seed; unset: initial_seed() (core/random.h) at construction,
  // so manual_seed(s) before making the loader fixes its order too.
  std::optional<uint64_t> seed;
  // Where batches arrive. For a CUDA device the samples are gathered on the
  // host and copied over.
  Device device = Device::cpu();
  // CUDA device only: stage each batch in a pinned host buffer and copy it on a
  // side stream (asynchronously; the consumer's current stream waits for the
  // copy, the host never does). false: an ordinary, blocking t.to(device).
  // Ignored for a CPU device (batches stay in ordinary memory).
  bool pin_memory = true;
  // Batches assembled ahead by a background thread while the loop body runs.
  // 0: no thread, each batch is made when the loop asks for it.
  int64_t prefetch = 2;
  // Which samples an epoch visits, in which order (data/sampler.h; e.g.
  // distributed::DistributedSampler). Unset: all of them, shuffled or not.
  // With a sampler, shuffle must stay false and size() counts its samples.
  std::shared_ptr<const Sampler> sampler;
};

// Where a loader stands: the next batch it hands out is batch `batch` of
// epoch `epoch`'s order (seeded by `seed`). Save it with a checkpoint.
struct DataLoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const DataLoaderState&) const = default;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // Any Dataset by value (a TensorDataset copies only its tensor handles).
  template <typename D>
    requires std::derived_from<std::remove_cvref_t<D>, Dataset>
  DataLoader(D&& dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<const std::remove_cvref_t<D>>(std::forward<D>(dataset)), std::move(options)) {}
  ~DataLoader();  // stops the background thread, waits for copies in flight
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch: ceil(n / batch_size), or floor with drop_last.
  int64_t size() const;
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  uint64_t seed() const { return seed_; }

  // While a loop runs, state() counts the batch in hand as delivered: saved
  // inside the body of batch k, it resumes at batch k + 1. At the end of an
  // epoch it reads {seed, epoch + 1, 0}.
  DataLoaderState state() const;
  // Continue from `s` (its seed replaces options.seed). Ends a pass in progress.
  void set_state(const DataLoaderState& s);
  // Start epoch `epoch` from its first batch (DistributedSampler.set_epoch).
  void set_epoch(int64_t epoch);

  // The sample order of `epoch`: a 1-d int64 CPU tensor, a permutation of
  // 0 .. n-1 (0, 1, ... without shuffle).
  Tensor epoch_order(int64_t epoch) const;

  // An input iterator over the batches of the current epoch, from state().
  // Move-only; destroying it before the end (a break, an exception) stops the
  // background thread. One pass at a time: begin() ends the previous one.
  class Iterator {
   public:
    Iterator() = default;
    Iterator(Iterator&& o) noexcept : loader_(o.loader_), alive_(std::move(o.alive_)), pass_id_(o.pass_id_) {
      o.loader_ = nullptr;
    }
    Iterator& operator=(Iterator&& o) noexcept;
    Iterator(const Iterator&) = delete;
    Iterator& operator=(const Iterator&) = delete;
    ~Iterator();
    Example& operator*() const;
    Example* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return loader_ == o.loader_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, uint64_t pass_id) : loader_(loader), alive_(loader->alive_), pass_id_(pass_id) {}
    bool current() const;           // whether this iterator's pass is still the loader's (and the loader alive)
    DataLoader* loader_ = nullptr;  // nullptr: the end
    std::weak_ptr<void> alive_;     // expires with the loader: an iterator that outlives it is inert
    uint64_t pass_id_ = 0;
  };
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  struct Pass;     // one pass through an epoch: the order, the thread, the queue (loader.cpp)
  struct Staging;  // the CUDA side stream, pinned buffers and events
  friend class Iterator;

  void stop();        // ends the pass in progress, if any
  bool advance();     // the next batch into current_; false at the end of the epoch
  // Gathers batch `batch` of `order` and moves it to options.device. `event`
  // null: on the calling thread's stream, blocking. Otherwise (the background
  // thread) through the staging buffers; *event is what the consumer's stream
  // must wait for (nullptr when the batch stays on the host).
  Example produce(int64_t batch, const Tensor& order, void** event);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;  // batches of epoch_ delivered so far
  Example current_;
  std::unique_ptr<Pass> pass_;
  uint64_t pass_id_ = 0;  // counts passes, so a stale iterator can tell
  std::shared_ptr<void> alive_ = std::make_shared<char>();
  std::unique_ptr<Staging> staging_;
};

// The loader's position in a checkpoint's free-form map (CheckpointParts::extra
// of optim/checkpoint.h): `key`.seed, `key`.epoch and `key`.batch. Save it with
// every checkpoint; restore_position reads it back into the loader, and a
// checkpoint without it (or with a damaged entry) is an Error that says so: a
// resumed run never silently starts epoch 0's order again.
void save_position(const DataLoader& loader, std::map<std::string, std::string>& extra,
                   const std::string& key = "loader");
void restore_position(DataLoader& loader, const std::map<std::string, std::string>& extra,
                      const std::string& key = "loader");

}  // namespace halfgrad::data
