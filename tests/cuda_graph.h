#pragma once
// CUDA-graph helpers for the device tests: a stream halfgrad queues on, and a
// graph captured from a function in global mode (a sync anywhere in the
// process fails the capture: the no-sync proof). Needs the CUDA runtime API.
#include <cuda_runtime.h>

#include <functional>

#include <halfgrad/core/cuda/check.h>
#include <halfgrad/core/cuda/runtime.h>

namespace hgtest {

// A non-default stream that halfgrad queues on for the test's lifetime. A
// blocking stream on purpose: work that strays onto the legacy default stream
// during capture then invalidates the capture instead of running uncaptured.
class TestStream {
 public:
  TestStream() {
    HG_CUDA_CHECK(cudaStreamCreate(&stream_));
    halfgrad::cuda::set_current_stream(stream_);
  }
  ~TestStream() {
    cudaStreamSynchronize(stream_);
    halfgrad::cuda::set_current_stream(nullptr);
    cudaStreamDestroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void sync() const { HG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class Graph {
 public:
  // Captures fn's work on `stream` in global mode: a sync, or a call that
  // could sync, anywhere in the process fails and ends the capture.
  Graph(cudaStream_t stream, const std::function<void()>& fn) : stream_(stream) {
    HG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      fn();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);  // leave the stream usable for the next test
      if (partial != nullptr) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    HG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t err = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    HG_CUDA_CHECK(err);
  }
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void replay() const { HG_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace hgtest
