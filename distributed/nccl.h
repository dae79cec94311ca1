#pragma once
// The NCCL side of the process group (internal): CUDA tensors' collectives,
// queued on the current stream. Built when CUDA and NCCL are (nccl.cpp); else
// nccl_stub.cpp, whose create() is an Error saying so.
#include <memory>

#include <mpi.h>

#include <halfgrad/core/tensor.h>
#include <halfgrad/distributed/process_group.h>

namespace halfgrad::distributed::detail {

class Nccl {
 public:
  virtual ~Nccl() = default;
  // Rank 0 makes NCCL's unique id and broadcasts it over `comm`; every rank
  // joins the NCCL communicator on its current CUDA device.
  static std::unique_ptr<Nccl> create(MPI_Comm comm, int rank, int world_size);
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
};

// Makes CUDA device local_rank % device_count current (nothing without CUDA
// or devices): one GPU per process, as torchrun's LOCAL_RANK convention.
void select_cuda_device(int local_rank);

}  // namespace halfgrad::distributed::detail
