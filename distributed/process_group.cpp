// The world's process group (distributed/process_group.h): MPI for CPU
// tensors, NCCL for CUDA tensors (distributed/nccl.h). Every MPI call returns
// its error (MPI_ERRORS_RETURN on our communicator) and check() turns it into
// an Error naming the call, the rank and the tensor. After set-up, the MPI
// calls run on the group's MPI thread (distributed/mpi_thread.h): a
// synchronous collective waits for its task, an asynchronous one returns the
// task's future as a Work.
#include <halfgrad/distributed/process_group.h>

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include <halfgrad/autograd/grad_mode.h>
#include <halfgrad/core/error.h>
#include <halfgrad/distributed/mpi_thread.h>
#include <halfgrad/distributed/nccl.h>
#include <halfgrad/ops/ops.h>

namespace halfgrad::distributed {

namespace {

class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> done) : done_(std::move(done)) {}
  void wait() override { done_.get(); }
  bool is_completed() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  std::shared_future<void> done_;
};

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

class WorldGroup final : public ProcessGroup {
 public:
  WorldGroup();
  ~WorldGroup() override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  Tensor all_gather(const Tensor& t) override;
  void barrier() override;

 private:
  void check(int rc, const char* call, const char* op, const Tensor* t) const;
  void check_tensor(const char* op, const Tensor& t) const;
  void check_all_reduce(const Tensor& t, ReduceOp op) const;
  void reduce_on_cpu(Tensor t, ReduceOp op);  // runs on the MPI thread
  // Runs fn where MPI calls are made: the MPI thread (waiting for it), or
  // here when MPI gave less than MPI_THREAD_SERIALIZED.
  void on_mpi(const std::function<void()>& fn) {
    if (mpi_) mpi_->run(fn);
    else fn();
  }
  detail::Nccl& nccl();

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<detail::MpiThread> mpi_;
  std::unique_ptr<detail::Nccl> nccl_;
};

std::unique_ptr<WorldGroup>& world() {
  static std::unique_ptr<WorldGroup> w;
  return w;
}
bool g_finalize_at_exit = false;

WorldGroup::WorldGroup() {
  int started = 0, provided = MPI_THREAD_SINGLE;
  bool ours = false;  // we started MPI (and so no other thread of the program calls it)
  MPI_Initialized(&started);
  if (!started) {
    // SERIALIZED: one thread at a time, here the group's MPI thread
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      fail("distributed::init: MPI_Init_thread failed; run under mpirun (OpenMPI: Debian openmpi-bin)");
    g_finalize_at_exit = true;
    ours = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // our own communicator, so errors come back to us instead of aborting the job
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  MPI_Comm local;  // the ranks on this machine
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type",
        "init", nullptr);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_free(&local);
  detail::select_cuda_device(local_rank_);
  // Our MPI thread needs SERIALIZED when we started MPI; an MPI the program
  // started itself may be called from its own threads too, so then only
  // MULTIPLE allows ours. Otherwise every call stays on this thread and
  // all_reduce_async is synchronous.
  if (ours ? provided >= MPI_THREAD_SERIALIZED : provided == MPI_THREAD_MULTIPLE)
    mpi_ = std::make_unique<detail::MpiThread>();
}

WorldGroup::~WorldGroup() {
  nccl_.reset();
  mpi_.reset();  // runs what is queued, then joins: later MPI calls are this thread's
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void WorldGroup::check(int rc, const char* call, const char* op, const Tensor* t) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("distributed::{} on rank {} of {}: {} failed ({}){}; every rank must make the same calls with tensors of "
       "the same shape and dtype",
       op, rank_, world_size_, call, std::string(text, static_cast<size_t>(len)),
       t ? fmt::format(" for {}", t->describe()) : std::string());
}

void WorldGroup::check_tensor(const char* op, const Tensor& t) const {
  HG_CHECK(t.defined(), "distributed::{} on rank {}: the tensor is undefined", op, rank_);
  HG_CHECK(t.is_contiguous(),
           "distributed::{} on rank {}: {} is not contiguous; collectives work in place on contiguous memory "
           "(call .contiguous() first and use its result)",
           op, rank_, t.describe());
}

detail::Nccl& WorldGroup::nccl() {
  if (!nccl_) {
    // NCCL joins on this thread's CUDA device, and its set-up broadcasts over
    // MPI: let the MPI thread finish its queue first (we are the only thread
    // that gives it work), so no two threads call MPI at once.
    if (mpi_) mpi_->run([] {});
    nccl_ = detail::Nccl::create(comm_, rank_, world_size_);  // an Error in a build without NCCL
  }
  return *nccl_;
}

// MPI's type for a dtype it reduces natively; float16 and bfloat16 go through float32.
MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Bool: return MPI_C_BOOL;
    default: return MPI_DATATYPE_NULL;
  }
}

void WorldGroup::check_all_reduce(const Tensor& t, ReduceOp op) const {
  check_tensor("all_reduce", t);
  HG_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()),
           "distributed::all_reduce on rank {}: avg of {} (an integer or bool tensor) would truncate; use sum",
           rank_, t.describe());
}

void WorldGroup::reduce_on_cpu(Tensor t, ReduceOp op) {
  NoGradGuard no_grad;  // (this thread's grad mode is its own)
  if (t.numel() == 0) return;
  Tensor buf = mpi_type(t.dtype()) == MPI_DATATYPE_NULL ? t.to(DType::Float32) : t;
  MPI_Op mop = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  if (t.dtype() == DType::Bool) mop = MPI_LOR;  // a bool sum or max is "any rank's true"
  check(MPI_Allreduce(MPI_IN_PLACE, buf.data_ptr(), static_cast<int>(buf.numel()), mpi_type(buf.dtype()), mop, comm_),
        "MPI_Allreduce", "all_reduce", &t);
  if (op == ReduceOp::Avg) {
    // a plain loop, not div_: this runs beside backward's OpenMP team, and a
    // second team on the same cores would make them wait for each other
    if (buf.dtype() == DType::Float32) {
      float* p = buf.data<float>();
      const float w = static_cast<float>(world_size_);
      for (int64_t i = 0, n = buf.numel(); i < n; ++i) p[i] /= w;
    } else {
      buf.div_(static_cast<double>(world_size_));
    }
  }
  if (buf.unsafe_impl() != t.unsafe_impl()) t.copy_(buf);
}

void WorldGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_all_reduce(t, op);
  if (t.device().is_cuda()) return nccl().all_reduce(t, op);
  on_mpi([&] { reduce_on_cpu(t, op); });
}

std::shared_ptr<Work> WorldGroup::all_reduce_async(Tensor& t, ReduceOp op) {
  check_all_reduce(t, op);
  if (t.device().is_cuda()) {
    nccl().all_reduce(t, op);  // queued on the current stream: the stream orders what reads it
    return std::make_shared<CompletedWork>();
  }
  if (!mpi_) {
    reduce_on_cpu(t, op);
    return std::make_shared<CompletedWork>();
  }
  return std::make_shared<FutureWork>(mpi_->submit([this, t, op] { reduce_on_cpu(t, op); }));
}

void WorldGroup::broadcast(Tensor& t, int root) {
  check_tensor("broadcast", t);
  HG_CHECK(root >= 0 && root < world_size_, "distributed::broadcast on rank {}: root {} is not a rank of a world of {}",
           rank_, root, world_size_);
  if (t.device().is_cuda()) return nccl().broadcast(t, root);
  const auto bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(itemsize(t.dtype()));
  HG_CHECK(bytes < (int64_t{1} << 31), "distributed::broadcast on rank {}: {} is larger than MPI's 2 GB per call",
           rank_, t.describe());
  on_mpi([&] {
    check(MPI_Bcast(t.data_ptr(), static_cast<int>(bytes), MPI_BYTE, root, comm_), "MPI_Bcast", "broadcast", &t);
  });
}

Tensor WorldGroup::all_gather(const Tensor& t) {
  HG_CHECK(t.defined(), "distributed::all_gather on rank {}: the tensor is undefined", rank_);
  const Tensor in = t.contiguous();
  // every rank's element count first: a shape mismatch is an Error, not a garbage result
  const int64_t mine = in.numel();
  std::vector<int64_t> counts(static_cast<size_t>(world_size_));
  on_mpi([&] {
    check(MPI_Allgather(&mine, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, comm_), "MPI_Allgather", "all_gather",
          &t);
  });
  for (int r = 0; r < world_size_; ++r)
    HG_CHECK(counts[static_cast<size_t>(r)] == mine,
             "distributed::all_gather on rank {}: this rank has {} ({} elements) but rank {} has {} elements; "
             "all_gather needs the same shape on every rank",
             rank_, t.describe(), mine, r, counts[static_cast<size_t>(r)]);
  Shape shape = t.shape();
  shape.insert(shape.begin(), world_size_);
  Tensor out = empty(shape, TensorOptions(t.dtype(), t.device()));
  if (t.device().is_cuda()) {
    nccl().all_gather(in, out);
    return out;
  }
  const auto bytes = static_cast<int64_t>(mine) * static_cast<int64_t>(itemsize(t.dtype()));
  HG_CHECK(bytes * world_size_ < (int64_t{1} << 31),
           "distributed::all_gather on rank {}: {} from {} ranks is larger than MPI's 2 GB per call", rank_,
           t.describe(), world_size_);
  on_mpi([&] {
    check(MPI_Allgather(in.data_ptr(), static_cast<int>(bytes), MPI_BYTE, out.data_ptr(), static_cast<int>(bytes),
                        MPI_BYTE, comm_),
          "MPI_Allgather", "all_gather", &t);
  });
  return out;
}

void WorldGroup::barrier() {
  on_mpi([&] { check(MPI_Barrier(comm_), "MPI_Barrier", "barrier", nullptr); });
}

}  // namespace

ProcessGroup& init() {
  static std::once_flag once;
  std::call_once(once, [] {
    world() = std::make_unique<WorldGroup>();
    std::atexit([] { finalize(); });
  });
  HG_CHECK(world() != nullptr, "distributed::init: MPI was finalized; a process can start it only once");
  return *world();
}

bool is_initialized() { return world() != nullptr; }

void finalize() {
  if (!world()) return;
  world().reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_finalize_at_exit && !finalized) MPI_Finalize();
}

}  // namespace halfgrad::distributed
