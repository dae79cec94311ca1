#pragma once
// DistributedDataParallel: PyTorch's DDP for a halfgrad module. Each rank
// trains the same model on its own shard of every batch; after backward every
// rank holds the gradients averaged over all ranks, so the same optimizer
// step keeps the replicas identical.
//
//   auto& pg = hg::distributed::init();
//   hg::distributed::DistributedDataParallel ddp(model, pg);   // broadcasts rank 0's parameters and buffers
//   ddp.sync_scaler(scaler);                                  // found-inf all-reduced: the same skips everywhere
//   ... forward, scaler.scale(loss).backward() ...            // all-reduces start while backward runs
//   { auto no_sync = ddp.no_sync(); ...backward... }          // accumulate locally, reduce on the next backward
//
// How: the parameters are split into buckets of about bucket_cap_mb (PyTorch's
// 25 MB), in reverse registration order (backward produces the last layers'
// gradients first). A post-accumulate-grad hook (autograd/hooks.h) counts each
// gradient in; when a bucket is complete its gradients are copied into one
// flat buffer and averaged with one all_reduce, while backward goes on with
// the layers before it. At the end of backward (autograd::queue_callback) the
// averaged values go back into .grad. On CUDA the all-reduces run on a side
// stream that waits for the gradients (an event) and that the current stream
// waits for at the end: no host sync. On the CPU the all-reduce is handed to
// the process group's MPI thread (all_reduce_async), which moves the data
// while backward goes on; the end of backward waits for it.
//
// Every parameter that requires grad must get a gradient in every backward
// (PyTorch's default, find_unused_parameters=False): one that did not is an
// Error at the end of backward naming it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad/amp/grad_scaler.h>
#include <halfgrad/core/tensor.h>
#include <halfgrad/distributed/process_group.h>
#include <halfgrad/nn/module.h>

namespace halfgrad::distributed {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25.0;  // MiB of gradients per all-reduce
  bool broadcast_buffers = true;  // rank 0's buffers (batch norm's statistics) at construction
  // PyTorch's option (off by default there too): after backward each .grad is
  // a view into its bucket's buffer instead of a copy of it, which saves a pass
  // over the gradients per step; a .grad kept across steps then changes with
  // the next backward.
  bool gradient_as_bucket_view = false;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& pg, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  ProcessGroup& process_group() { return pg_; }

  // The GradScaler's found-inf flag is all-reduced (max) after every check,
  // before any optimizer consults it.
  void sync_scaler(amp::GradScaler& scaler);

  // While the guard lives, backward accumulates gradients locally; the next
  // backward outside it reduces everything accumulated (PyTorch's no_sync).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ddp_->sync_ = false; }
    ~NoSync() {
      if (ddp_) ddp_->sync_ = true;
    }
    NoSync(NoSync&& o) noexcept : ddp_(o.ddp_) { o.ddp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // The buckets: parameter names per bucket, in the order they are reduced.
  std::vector<std::vector<std::string>> buckets() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    int64_t numel = 0;
    int pending = 0;
    bool launched = false;
    Tensor buffer;  // flat, the bucket's dtype and device
    std::shared_ptr<Work> work;  // its all-reduce, in flight until finish()
  };
  void on_grad(size_t index);
  void launch(Bucket& b);
  void finish();  // end of backward: every bucket reduced, values back into .grad

  nn::Module& module_;
  ProcessGroup& pg_;
  DistributedDataParallelOptions options_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<int64_t> hook_ids_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<char> ready_;        // per parameter, this backward
  std::vector<Bucket> buckets_;
  bool sync_ = true, in_backward_ = false;
  amp::GradScaler* scaler_ = nullptr;
  // CUDA: the side stream the all-reduces run on, and the events between it and the current stream
  void* side_stream_ = nullptr;
  int device_ = -1;
};

}  // namespace halfgrad::distributed
