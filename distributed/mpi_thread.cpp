#include <halfgrad/distributed/mpi_thread.h>

namespace halfgrad::distributed::detail {

MpiThread::MpiThread() : thread_([this] { loop(); }) {}

MpiThread::~MpiThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

std::shared_future<void> MpiThread::submit(std::function<void()> task) {
  std::packaged_task<void()> t(std::move(task));
  std::shared_future<void> done = t.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(t));
  }
  cv_.notify_one();
  return done;
}

void MpiThread::loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // an exception is kept in the task's future
  }
}

}  // namespace halfgrad::distributed::detail
