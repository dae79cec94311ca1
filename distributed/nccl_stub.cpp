// A build without NCCL (no CUDA, or no libnccl): CUDA tensors cannot be
// communicated; CPU tensors still go through MPI.
#include <halfgrad/core/error.h>
#include <halfgrad/distributed/nccl.h>

namespace halfgrad::distributed::detail {

std::unique_ptr<Nccl> Nccl::create(MPI_Comm, int rank, int) {
  fail("distributed: a CUDA tensor on rank {}, but this halfgrad was built without NCCL (it needs the CUDA backend "
       "and libnccl, which ships with the CUDA toolkit); move the tensor to the CPU for MPI, or rebuild with CUDA",
       rank);
}

void select_cuda_device(int) {}

}  // namespace halfgrad::distributed::detail
