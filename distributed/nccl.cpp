// CUDA tensors' collectives through NCCL (distributed/nccl.h), on the current
// stream: the host queues them and goes on, as with any kernel. Every NCCL
// call is checked; its error string names what went wrong.
#include <halfgrad/distributed/nccl.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <halfgrad/core/cuda/runtime.h>
#include <halfgrad/core/error.h>

namespace halfgrad::distributed::detail {

namespace {

void check(ncclResult_t rc, const char* call, int rank, const Tensor* t) {
  if (rc == ncclSuccess) return;
  fail("distributed: {} failed on rank {} ({}){}; every rank must make the same calls with tensors of the same "
       "shape and dtype",
       call, rank, ncclGetErrorString(rc), t ? fmt::format(" for {}", t->describe()) : std::string());
}

ncclDataType_t nccl_type(const Tensor& t, int rank) {
  switch (t.dtype()) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64: return ncclInt64;
    case DType::Bool: return ncclUint8;
    default: break;  // fp8: no reduction halfgrad would stand behind
  }
  fail("distributed: rank {}: NCCL cannot communicate {}", rank, t.describe());
}

class NcclComm final : public Nccl {
 public:
  NcclComm(MPI_Comm comm, int rank, int world_size) : rank_(rank) {
    ncclUniqueId id;
    if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank, nullptr);
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm) != MPI_SUCCESS)
      fail("distributed: rank {}: broadcasting NCCL's unique id over MPI failed", rank);
    check(ncclCommInitRank(&comm_, world_size, id, rank), "ncclCommInitRank", rank, nullptr);
  }
  ~NcclComm() override { ncclCommDestroy(comm_); }

  void all_reduce(Tensor& t, ReduceOp op) override {
    if (t.numel() == 0) return;
    const ncclRedOp_t nop = op == ReduceOp::Max ? ncclMax : op == ReduceOp::Avg ? ncclAvg : ncclSum;
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t, rank_),
                        t.dtype() == DType::Bool ? ncclMax : nop, comm_, stream()),
          "ncclAllReduce", rank_, &t);
  }
  void broadcast(Tensor& t, int root) override {
    check(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t, rank_), root, comm_,
                        stream()),
          "ncclBroadcast", rank_, &t);
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    check(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in, rank_), comm_,
                        stream()),
          "ncclAllGather", rank_, &in);
  }

 private:
  static cudaStream_t stream() { return static_cast<cudaStream_t>(cuda::current_stream()); }
  ncclComm_t comm_ = nullptr;
  int rank_;
};

}  // namespace

std::unique_ptr<Nccl> Nccl::create(MPI_Comm comm, int rank, int world_size) {
  return std::make_unique<NcclComm>(comm, rank, world_size);
}

void select_cuda_device(int local_rank) {
  const int n = cuda::device_count();  // 0 without a usable device
  if (n > 0) cudaSetDevice(local_rank % n);
}

}  // namespace halfgrad::distributed::detail
