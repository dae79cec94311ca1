#pragma once
// distributed: data parallelism on the engines the field runs on.
// The process group: every rank of an `mpirun -np N` job, talking MPI for CPU
// tensors and NCCL for CUDA tensors (NCCL's unique id travels over MPI), as
// torch.distributed's process group with backend "mpi" and "nccl".
//
//   auto& pg = hg::distributed::init();            // MPI_Init, rank, world size, local rank -> CUDA device
//   pg.all_reduce(grad, hg::distributed::ReduceOp::Avg);
//   pg.broadcast(weight, /*root=*/0);
//   hg::Tensor all = pg.all_gather(x);              // [world_size, *x.shape()]
//   pg.barrier();
//
// Collectives are in place on contiguous tensors and every rank must call them
// in the same order with the same shapes and dtypes (MPI's and NCCL's rule;
// a mismatch is caught for shapes by a check that costs one small collective
// only in all_gather). Every call's result is checked; errors name the call,
// the rank and the tensor. On CUDA the NCCL calls are queued on the current
// stream: no host sync. On the CPU one thread of the group makes every MPI
// call (MPI_THREAD_SERIALIZED, as PyTorch's MPI backend), so all_reduce_async
// returns at once and the data moves while the caller goes on.
#include <cstdint>
#include <memory>
#include <string>

#include <halfgrad/core/tensor.h>

namespace halfgrad::distributed {

enum class ReduceOp { Sum, Avg, Max };

// An asynchronous collective (torch.distributed's Work, from async_op=True).
// Until wait() returns, the tensor must not be read or written. wait() throws
// the collective's Error, if any. On CUDA tensors the collective is queued on
// the current stream and the Work is complete at once (the stream orders it).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this machine
  // In place: every rank ends with the reduction of all ranks' tensors. Avg
  // divides the sum by world_size() (floating dtypes only).
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // The same, returning at once; `t` is the result once wait() returns.
  virtual std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // In place: every rank ends with root's tensor.
  virtual void broadcast(Tensor& t, int root = 0) = 0;
  // [world_size, *t.shape()]: rank r's tensor at index r, on every rank.
  virtual Tensor all_gather(const Tensor& t) = 0;
  virtual void barrier() = 0;

 protected:
  int rank_ = 0, world_size_ = 1, local_rank_ = 0;
};

// Starts MPI (once per process; MPI_Init_thread, or joins an MPI already
// started), and returns the world's group: CPU tensors go through MPI, CUDA
// tensors through NCCL (set up on first use; this build needs CUDA and NCCL
// for those, else an Error). On a machine with CUDA devices, makes device
// local_rank % device_count the current one. Without mpirun: a world of 1.
ProcessGroup& init();
bool is_initialized();
// MPI_Finalize (also at exit, if init() ran and nobody called it).
void finalize();

}  // namespace halfgrad::distributed
