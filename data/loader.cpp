// DataLoader (data/loader.h). A pass through an epoch owns the epoch's order
// and, with prefetch > 0, a background thread that makes batches in order into
// a bounded queue; the consumer pops them one by one. The thread's failure at
// batch k travels through the queue as an exception_ptr and is rethrown when
// the consumer reaches batch k, so every batch before it is still delivered.
//
// For a CUDA device the background thread gathers on the host, copies the
// batch into a pinned buffer and queues the host-to-device copy on a side
// stream of its own, then records an event; the consumer's current stream
// waits for that event (a queued wait: the host never blocks), so the copy
// overlaps whatever the training stream is doing. A pinned buffer is reused
// only after its last copy's event has completed (the background thread
// waits for it, not the consumer), and the loader's destructor waits for the
// copies in flight before it frees the buffers.
#include <halfgrad/data/loader.h>

#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/philox.h>
#include <halfgrad/core/pinned.h>
#include <halfgrad/core/random.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::data {

namespace {
// Tags the shuffle's Philox counters: the global generator always draws with
// the upper counter words 0, so the loader's stream never overlaps it.
constexpr uint32_t kShuffleTag = 0x4C4F4144u;  // "LOAD"

struct Item {
  int64_t batch = 0;
  Example example;
  void* event = nullptr;  // the consumer's stream waits for it (CUDA batches)
  std::exception_ptr error;
};
}  // namespace

struct DataLoader::Pass {
  Tensor order;
  int64_t end = 0;  // batches in the epoch
  std::thread thread;
  std::mutex mutex;
  std::condition_variable has_item, has_space;
  std::deque<Item> queue;
  size_t capacity = 0;
  bool stopping = false;
};

struct DataLoader::Staging {
  struct Slot {
    Tensor input, target;  // pinned host buffers (empty_pinned), grown on demand
    void* event = nullptr;
    bool recorded = false;
  };
  int device = 0;
  void* stream = nullptr;
  std::vector<Slot> slots;
  size_t next = 0;  // the slot for the next batch (background thread only)

  Staging(int dev, size_t n) : device(dev), slots(n) {
    stream = cuda::stream_create(device);
    try {
      for (auto& s : slots) s.event = cuda::event_create(device);
    } catch (...) {
      release();
      throw;
    }
  }
  ~Staging() { release(); }
  void release() noexcept {
    for (auto& s : slots) {
      if (s.recorded) {
        try {
          cuda::event_synchronize(s.event);  // no copy may still read the buffer we free below
        } catch (...) {
        }
      }
      cuda::event_destroy(s.event, device);
      s.event = nullptr;
      s.recorded = false;
      s.input = Tensor();
      s.target = Tensor();
    }
    cuda::stream_destroy(stream, device);
    stream = nullptr;
  }
};

namespace {
// `src` (a CPU tensor) through the pinned `buffer` into new memory on
// `device`, on `stream`, without waiting.
Tensor stage(const Tensor& src, Tensor& buffer, Device device, void* stream) {
  if (!src.device().is_cpu()) return src.to(device);  // a data set kept on the GPU: nothing to stage
  const Tensor c = src.contiguous();
  const auto nbytes = static_cast<size_t>(c.numel()) * itemsize(c.dtype());
  if (!buffer.defined() || buffer.dtype() != c.dtype() || buffer.numel() < c.numel())
    buffer = empty_pinned({c.numel()}, c.dtype());  // the first batch (or a larger one) only
  if (nbytes > 0) std::memcpy(buffer.data_ptr(), c.data_ptr(), nbytes);
  Tensor dst = make_tensor(c.shape(), TensorOptions(c.dtype(), device));  // pool memory on `stream`
  cuda::copy_bytes_async(dst.data_ptr(), true, buffer.data_ptr(), false, nbytes, device.index(), stream);
  return dst;
}
}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  HG_CHECK(dataset_ != nullptr, "DataLoader: the data set is null");
  HG_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got {}", options_.batch_size);
  HG_CHECK(options_.prefetch >= 0, "DataLoader: prefetch must be >= 0 (0: no background thread), got {}",
           options_.prefetch);
  HG_CHECK(dataset_->size() >= 0, "DataLoader: the data set reports a negative size {}", dataset_->size());
  if (options_.device.is_cuda())
    HG_CHECK(cuda::is_available() && options_.device.index() < cuda::device_count(),
             "DataLoader: device {} is not available ({} CUDA device(s)); use device cpu", options_.device.str(),
             cuda::device_count());
  HG_CHECK(!(options_.sampler && options_.shuffle),
           "DataLoader: sampler and shuffle=true both choose the order (PyTorch: mutually exclusive); let the "
           "sampler shuffle (DistributedSampler's own shuffle option) and leave shuffle false");
  seed_ = options_.seed.value_or(initial_seed());
}

DataLoader::~DataLoader() {
  stop();
  staging_.reset();
}

int64_t DataLoader::size() const {
  const int64_t n = options_.sampler ? options_.sampler->size(dataset_->size()) : dataset_->size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoaderState DataLoader::state() const {
  if (next_batch_ >= size() && size() > 0) return {seed_, epoch_ + 1, 0};
  return {seed_, epoch_, next_batch_};
}

void DataLoader::set_state(const DataLoaderState& s) {
  HG_CHECK(s.epoch >= 0 && s.batch >= 0 && s.batch <= size(),
           "DataLoader::set_state: epoch {} batch {} is not a position of this loader ({} batches per epoch); "
           "was the state saved with another data set or batch size?",
           s.epoch, s.batch, size());
  stop();
  seed_ = s.seed;
  epoch_ = s.epoch;
  next_batch_ = s.batch;
}

void DataLoader::set_epoch(int64_t epoch) {
  HG_CHECK(epoch >= 0, "DataLoader::set_epoch: epoch must be >= 0, got {}", epoch);
  stop();
  epoch_ = epoch;
  next_batch_ = 0;
}

Tensor shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  HG_CHECK(n >= 0 && epoch >= 0, "shuffled_order: n = {} and epoch = {} must be >= 0", n, epoch);
  Tensor order = make_tensor({n}, TensorOptions(DType::Int64));
  int64_t* p = order.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  // Fisher-Yates from the back: position i swaps with j uniform in [0, i],
  // j drawn from Philox at counter (i, epoch, tag) under key seed, so the
  // order depends on (seed, epoch) alone.
  const auto e = static_cast<uint64_t>(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto u = static_cast<uint64_t>(i);
    const philox::Words w = philox::philox4x32_10(
        philox::Words{{static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32), static_cast<uint32_t>(e),
                       kShuffleTag ^ static_cast<uint32_t>(e >> 32)}},
        static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    std::swap(p[i], p[philox::randint(w, 0, i + 1)]);
  }
  return order;
}

Tensor DataLoader::epoch_order(int64_t epoch) const {
  HG_CHECK(epoch >= 0, "DataLoader::epoch_order: epoch must be >= 0, got {}", epoch);
  const int64_t n = dataset_->size();
  if (options_.sampler) {
    // a sampler's answer is input from outside the loader: checked before any batch is made
    const int64_t want = options_.sampler->size(n);
    Tensor order = options_.sampler->indices(n, epoch);
    HG_CHECK(order.defined() && order.dtype() == DType::Int64 && order.dim() == 1 && order.device().is_cpu() &&
                 order.numel() == want,
             "DataLoader: the sampler's indices for epoch {} are {}; expected int64[{}] cpu (its size())", epoch,
             order.defined() ? order.describe() : "undefined", want);
    order = order.contiguous();
    const int64_t* p = order.data<int64_t>();
    for (int64_t i = 0; i < want; ++i)
      HG_CHECK(p[i] >= 0 && p[i] < n, "DataLoader: the sampler's index {} (position {}) is outside the data set of {}",
               p[i], i, n);
    return order;
  }
  if (options_.shuffle) return shuffled_order(n, seed_, epoch);
  Tensor order = make_tensor({n}, TensorOptions(DType::Int64));
  int64_t* p = order.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  return order;
}

Example DataLoader::produce(int64_t batch, const Tensor& order, void** event) {
  const int64_t b = options_.batch_size, start = batch * b;
  const int64_t len = std::min(b, order.numel() - start);
  Example e = dataset_->get_batch(order.narrow(0, start, len));
  HG_CHECK(e.input.defined() && e.target.defined(),
           "DataLoader: the data set's get_batch returned an undefined input or target (batch {})", batch);
  const Device dev = options_.device;
  if (event == nullptr) {  // on the caller's thread and stream: ordinary copies
    if (e.input.device() != dev) e.input = e.input.to(dev);
    if (e.target.device() != dev) e.target = e.target.to(dev);
    return e;
  }
  *event = nullptr;
  if (dev.is_cpu()) {
    if (!e.input.device().is_cpu()) e.input = e.input.to(dev);
    if (!e.target.device().is_cpu()) e.target = e.target.to(dev);
    return e;
  }
  // CUDA, from the background thread, whose current stream is staging_->stream.
  Staging::Slot& slot = staging_->slots[staging_->next];
  staging_->next = (staging_->next + 1) % staging_->slots.size();
  if (slot.recorded) cuda::event_synchronize(slot.event);  // its buffers' last copy is done
  slot.recorded = false;
  if (options_.pin_memory) {
    e.input = stage(e.input, slot.input, dev, staging_->stream);
    e.target = stage(e.target, slot.target, dev, staging_->stream);
  } else {  // pageable: copy_bytes waits for the side stream, the consumer's stream still waits on the event
    if (e.input.device() != dev) e.input = e.input.to(dev);
    if (e.target.device() != dev) e.target = e.target.to(dev);
  }
  cuda::event_record(slot.event, staging_->stream, dev.index());
  slot.recorded = true;
  *event = slot.event;
  return e;
}

void DataLoader::stop() {
  if (!pass_) return;
  if (pass_->thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(pass_->mutex);
      pass_->stopping = true;
    }
    pass_->has_space.notify_all();
    pass_->thread.join();  // after the batch it is making, at most
  }
  // Queued batches are dropped. A CUDA one may still be arriving on the side
  // stream, and its memory is freed on this thread's stream: order that free
  // after the copy (a queued wait, as for a delivered batch).
  for (const Item& item : pass_->queue) {
    if (item.event == nullptr) continue;
    try {
      cuda::stream_wait_event(cuda::current_stream(), item.event, options_.device.index());
    } catch (...) {  // stop() runs in destructors; a failing runtime has reported itself
    }
  }
  pass_.reset();
}

DataLoader::Iterator DataLoader::begin() {
  stop();
  const int64_t batches = size();
  if (next_batch_ >= batches && batches > 0) {  // a saved end-of-epoch position
    ++epoch_;
    next_batch_ = 0;
  }
  pass_ = std::make_unique<Pass>();
  ++pass_id_;
  pass_->order = epoch_order(epoch_);
  pass_->end = batches;
  if (options_.prefetch > 0 && next_batch_ < batches) {
    // Slots: one per queued batch, one being made, one in the consumer's hands
    // (its event may not have been waited for yet).
    if (options_.device.is_cuda() && !staging_)
      staging_ = std::make_unique<Staging>(options_.device.index(), static_cast<size_t>(options_.prefetch) + 2);
    pass_->capacity = static_cast<size_t>(options_.prefetch);
    Pass* pass = pass_.get();
    const int64_t first = next_batch_;
    pass_->thread = std::thread([this, pass, first] {
      NoGradGuard no_grad;  // batches carry no history
      if (staging_) cuda::set_current_stream(staging_->stream);
      for (int64_t k = first; k < pass->end; ++k) {
        {
          std::lock_guard<std::mutex> lock(pass->mutex);
          if (pass->stopping) return;
        }
        Item item;
        item.batch = k;
        try {
          item.example = produce(k, pass->order, &item.event);
        } catch (...) {
          item.error = std::current_exception();
        }
        const bool failed = item.error != nullptr;
        {
          std::unique_lock<std::mutex> lock(pass->mutex);
          pass->has_space.wait(lock, [&] { return pass->stopping || pass->queue.size() < pass->capacity; });
          if (pass->stopping) return;
          pass->queue.push_back(std::move(item));
        }
        pass->has_item.notify_one();
        if (failed) return;
      }
    });
  }
  if (!advance()) return end();
  return Iterator(this, pass_id_);
}

bool DataLoader::advance() {
  if (next_batch_ >= pass_->end) {  // the epoch is done: the next pass is the next epoch
    stop();
    ++epoch_;
    next_batch_ = 0;
    current_ = Example();
    return false;
  }
  if (!pass_->thread.joinable()) {
    try {
      current_ = produce(next_batch_, pass_->order, nullptr);
    } catch (...) {
      stop();
      throw;
    }
  } else {
    Item item;
    {
      std::unique_lock<std::mutex> lock(pass_->mutex);
      pass_->has_item.wait(lock, [&] { return !pass_->queue.empty(); });
      item = std::move(pass_->queue.front());
      pass_->queue.pop_front();
    }
    pass_->has_space.notify_one();
    if (item.error) {
      stop();  // the thread has ended after it; the batch is not delivered
      std::rethrow_exception(item.error);
    }
    HG_CHECK(item.batch == next_batch_, "DataLoader: got batch {} where {} was due (internal error)", item.batch,
             next_batch_);
    if (item.event != nullptr)
      cuda::stream_wait_event(cuda::current_stream(), item.event, options_.device.index());
    current_ = std::move(item.example);
  }
  ++next_batch_;
  return true;
}

bool DataLoader::Iterator::current() const {
  return loader_ != nullptr && !alive_.expired() && loader_->pass_ != nullptr && loader_->pass_id_ == pass_id_;
}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    if (current()) loader_->stop();
    loader_ = o.loader_;
    alive_ = std::move(o.alive_);
    pass_id_ = o.pass_id_;
    o.loader_ = nullptr;
  }
  return *this;
}

DataLoader::Iterator::~Iterator() {
  if (current()) loader_->stop();  // a loop left early: end the background thread now
}

Example& DataLoader::Iterator::operator*() const {
  HG_CHECK(current(), "DataLoader: dereferencing an iterator that is at the end, or whose pass was ended "
                      "(begin(), set_state() or set_epoch() started another)");
  return loader_->current_;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  HG_CHECK(current(), "DataLoader: advancing an iterator that is at the end, or whose pass was ended "
                      "(begin(), set_state() or set_epoch() started another)");
  if (!loader_->advance()) loader_ = nullptr;
  return *this;
}

void save_position(const DataLoader& loader, std::map<std::string, std::string>& extra, const std::string& key) {
  const DataLoaderState s = loader.state();
  extra[key + ".seed"] = std::to_string(s.seed);
  extra[key + ".epoch"] = std::to_string(s.epoch);
  extra[key + ".batch"] = std::to_string(s.batch);
}

namespace {
// One entry, whole and in range, or an Error naming it (the map comes from a file).
template <typename T>
T position_entry(const std::map<std::string, std::string>& extra, const std::string& name) {
  const auto it = extra.find(name);
  HG_CHECK(it != extra.end(),
           "restore_position: the checkpoint has no data loader position ('{}' is missing); save it with "
           "data::save_position(loader, parts.extra) before save_checkpoint, or choose the epoch with set_epoch",
           name);
  T v{};
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  HG_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
           "restore_position: the checkpoint's '{}' is '{}', not a whole number in range", name,
           text.substr(0, 40));
  return v;
}
}  // namespace

void restore_position(DataLoader& loader, const std::map<std::string, std::string>& extra, const std::string& key) {
  loader.set_state({position_entry<uint64_t>(extra, key + ".seed"), position_entry<int64_t>(extra, key + ".epoch"),
                    position_entry<int64_t>(extra, key + ".batch")});
}

}  // namespace halfgrad::data
