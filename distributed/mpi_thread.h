#pragma once
// The thread that makes the process group's MPI calls (internal). PyTorch's
// MPI backend works the same way: MPI is started with MPI_THREAD_SERIALIZED
// and one worker thread runs the collectives in the order they were asked
// for, so an asynchronous all-reduce (DistributedDataParallel's buckets)
// moves data while the caller's thread goes on with backward. A synchronous
// call is a task the caller waits for. Tasks run one at a time, in order, and
// an exception a task throws comes back to whoever waits for it.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace halfgrad::distributed::detail {

class MpiThread {
 public:
  MpiThread();
  ~MpiThread();  // runs what is queued, then joins
  MpiThread(const MpiThread&) = delete;
  MpiThread& operator=(const MpiThread&) = delete;

  std::shared_future<void> submit(std::function<void()> task);
  void run(std::function<void()> task) { submit(std::move(task)).get(); }

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace halfgrad::distributed::detail
