// DistributedDataParallel (distributed/ddp.h). One backward, in time:
//   first gradient in   -> the bucket states reset, finish() queued for the end
//   each gradient in    -> marked ready; the bucket's last one launches it:
//                          gradients copied into its flat buffer, one all_reduce (avg),
//                          asynchronous (CUDA: a side stream; CPU: the MPI thread)
//   end of backward     -> every bucket launched (else an Error naming the
//                          parameter without a gradient); wait for the all-reduces;
//                          averages back into .grad (or .grad becomes a view of them)
#include <halfgrad/distributed/ddp.h>

#include <utility>

#include <fmt/format.h>

#include <halfgrad/amp/anomaly_hooks.h>
#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/autograd/hooks.h>
#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::distributed {

namespace {

// Runs `fn` with `side` as the current CUDA stream, after the work queued so
// far on the current one (an event between them); nothing to do on the CPU.
template <typename F>
void on_side_stream(void* side, int device, F&& fn) {
  if (side == nullptr) return fn();
  void* main = cuda::current_stream();
  void* ev = cuda::event_create(device);
  cuda::event_record(ev, main, device);
  cuda::stream_wait_event(side, ev, device);
  cuda::event_destroy(ev, device);
  cuda::set_current_stream(side);
  try {
    fn();
  } catch (...) {
    cuda::set_current_stream(main);
    throw;
  }
  cuda::set_current_stream(main);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& pg,
                                                 DistributedDataParallelOptions options)
    : module_(module), pg_(pg), options_(options) {
  HG_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got {}",
           options_.bucket_cap_mb);
  NoGradGuard no_grad;
  // Every replica starts from rank 0's weights and buffers.
  for (auto& [name, p] : module.named_parameters()) {
    Tensor t = p;
    pg_.broadcast(t, 0);
    if (p.requires_grad() && !p.grad_fn()) params_.emplace_back(name, p);
  }
  if (options_.broadcast_buffers)
    for (auto& [name, b] : module.named_buffers()) {
      Tensor t = b;
      pg_.broadcast(t, 0);
    }
  HG_CHECK(!params_.empty(), "DistributedDataParallel: the module has no parameter that requires grad");

  // Buckets in reverse registration order, one dtype and device each.
  const double cap = options_.bucket_cap_mb * 1024.0 * 1024.0;
  bucket_of_.assign(params_.size(), 0);
  double bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k].second;
    const bool fresh = buckets_.empty() || bytes >= cap ||
                       params_[buckets_.back().params.front()].second.dtype() != p.dtype() ||
                       params_[buckets_.back().params.front()].second.device() != p.device();
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    buckets_.back().numel += p.numel();
    bytes += static_cast<double>(p.numel() * static_cast<int64_t>(itemsize(p.dtype())));
    bucket_of_[k] = buckets_.size() - 1;
  }
  const Device dev = params_.front().second.device();
  if (dev.is_cuda()) {
    device_ = dev.index();
    side_stream_ = cuda::stream_create(device_);
  }
  ready_.assign(params_.size(), 0);
  for (size_t k = 0; k < params_.size(); ++k)
    hook_ids_.push_back(
        autograd::register_post_accumulate_grad_hook(params_[k].second, [this, k](const Tensor&) { on_grad(k); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t k = 0; k < params_.size(); ++k) autograd::remove_post_accumulate_grad_hook(params_[k].second, hook_ids_[k]);
  if (scaler_) scaler_->set_found_inf_reducer(nullptr);
  if (side_stream_) cuda::stream_destroy(side_stream_, device_);
}

void DistributedDataParallel::sync_scaler(amp::GradScaler& scaler) {
  scaler_ = &scaler;
  scaler.set_found_inf_reducer([this](Tensor& found_inf) {
    Tensor f = found_inf;
    pg_.all_reduce(f, ReduceOp::Max);
  });
}

std::vector<std::vector<std::string>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].first);
  }
  return out;
}

void DistributedDataParallel::on_grad(size_t k) {
  if (!sync_) return;  // no_sync(): accumulate locally
  if (!in_backward_) {
    in_backward_ = true;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (Bucket& b : buckets_) {
      b.pending = static_cast<int>(b.params.size());
      b.launched = false;
    }
    autograd::queue_callback([this] { finish(); });
  }
  HG_CHECK(!ready_[k],
           "DistributedDataParallel: {} got a gradient twice in one backward (a parameter used twice reaches its "
           "accumulator once; is it registered under two names, or is backward re-entrant?)",
           params_[k].first);
  ready_[k] = 1;
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) launch(b);
}

void DistributedDataParallel::launch(Bucket& b) {
  NoGradGuard no_grad;
  const amp::SuppressNonFiniteChecks quiet;  // moving gradients is not the model's arithmetic (detect_anomaly)
  on_side_stream(side_stream_, device_, [&] {
    const Tensor& first = params_[b.params.front()].second;
    if (!b.buffer.defined()) b.buffer = empty({b.numel}, TensorOptions(first.dtype(), first.device()));
    if (b.work) std::exchange(b.work, nullptr)->wait();  // a backward that threw before its end left it in flight
    int64_t offset = 0;
    for (size_t k : b.params) {
      const Tensor g = params_[k].second.grad();
      b.buffer.narrow(0, offset, g.numel()).copy_(g.reshape({-1}));
      offset += g.numel();
    }
    b.work = pg_.all_reduce_async(b.buffer, ReduceOp::Avg);
  });
  b.launched = true;
}

void DistributedDataParallel::finish() {
  in_backward_ = false;
  for (const Bucket& b : buckets_)
    if (!b.launched)
      for (size_t k : b.params)
        HG_CHECK(ready_[k],
                 "DistributedDataParallel on rank {}: {} got no gradient in this backward; every parameter that "
                 "requires grad must take part in the loss (or set requires_grad false on the unused ones)",
                 pg_.rank(), params_[k].first);
  NoGradGuard no_grad;
  const amp::SuppressNonFiniteChecks quiet;
  if (side_stream_) {  // the current stream waits for the all-reduces
    void* ev = cuda::event_create(device_);
    cuda::event_record(ev, side_stream_, device_);
    cuda::stream_wait_event(cuda::current_stream(), ev, device_);
    cuda::event_destroy(ev, device_);
  }
  for (Bucket& b : buckets_) {
    if (b.work) std::exchange(b.work, nullptr)->wait();  // (an MPI error surfaces here, once)
    int64_t offset = 0;
    for (size_t k : b.params) {
      const Tensor& p = params_[k].second;
      Tensor avg = b.buffer.narrow(0, offset, p.numel()).view(p.shape());
      if (options_.gradient_as_bucket_view) p.set_grad(avg);
      else p.grad().copy_(avg);
      offset += p.numel();
    }
  }
}

}  // namespace halfgrad::distributed
