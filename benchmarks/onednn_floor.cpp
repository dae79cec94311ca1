#include "onednn_floor.h"

#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_map>

namespace bench {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// A buffer of n elements of float32 or bf16, filled with small random values.
struct Buffer {
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  void* data() { return bf16.empty() ? static_cast<void*>(f32.data()) : static_cast<void*>(bf16.data()); }
};

Buffer random_buffer(int64_t n, bool bf16, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  Buffer b;
  if (!bf16) {
    b.f32.resize(static_cast<size_t>(n));
    for (auto& v : b.f32) v = u(rng);
    return b;
  }
  b.bf16.resize(static_cast<size_t>(n));
  for (auto& v : b.bf16) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  return b;
}

// One matmul primitive with its memory objects bound to buffers.
// A GEMM below 2^19 multiply-adds is made and run on one thread, as
// halfgrad's (kSerialGemmMacs in kernels/cpu/parallel.h): for such sizes the OpenMP team's wake-up and
// join cost more than it saves, and a floor should take the faster way.
constexpr int64_t kSerialMacs = int64_t{1} << 19;

struct Threads {  // omp_set_num_threads(1) for a scope on this thread
  int prev = 0;
  explicit Threads(bool serial) {
    if (serial && omp_get_max_threads() > 1) prev = omp_get_max_threads(), omp_set_num_threads(1);
  }
  ~Threads() {
    if (prev) omp_set_num_threads(prev);
  }
};

struct Gemm {
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;
  bool serial = false;
};

struct Floor {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<Buffer> buffers;  // activations, weights, biases, gradients
  Buffer scratchpad;
  std::vector<Gemm> gemms;  // in execution order

  // dst[m, n] = src[m, k] x wei[k, n] (+ bias[1, n]); each given by dims and a
  // plain layout tag (ab: row-major, ba: the transpose of a row-major array).
  void add(dt type, int64_t m, int64_t k, int64_t n, tag src_tag, void* src, tag wei_tag, void* wei, void* dst,
           void* bias) {
    const dnnl::memory::desc src_md({m, k}, type, src_tag), wei_md({k, n}, type, wei_tag), dst_md({m, n}, type, tag::ab);
    const dnnl::memory::desc bias_md = bias ? dnnl::memory::desc({1, n}, type, tag::ab) : dnnl::memory::desc();
    const bool serial = m * k * n < kSerialMacs;
    Threads threads(serial);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md), attr, engine);
    Gemm g{dnnl::matmul(pd), {}, serial};
    g.args[DNNL_ARG_SRC] = dnnl::memory(src_md, engine, src);
    g.args[DNNL_ARG_WEIGHTS] = dnnl::memory(wei_md, engine, wei);
    g.args[DNNL_ARG_DST] = dnnl::memory(dst_md, engine, dst);
    if (bias) g.args[DNNL_ARG_BIAS] = dnnl::memory(bias_md, engine, bias);
    const size_t pad = pd.scratchpad_desc().get_size();
    if (pad) g.args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(pd.scratchpad_desc(), engine, nullptr);  // bound below
    gemms.push_back(std::move(g));
    pad_bytes = std::max(pad_bytes, pad);
  }
  size_t pad_bytes = 0;

  void bind_scratchpad() {
    scratchpad.f32.assign(pad_bytes / sizeof(float) + 16, 0.f);
    for (auto& g : gemms)
      if (auto it = g.args.find(DNNL_ARG_SCRATCHPAD); it != g.args.end()) it->second.set_data_handle(scratchpad.data());
  }

  void run() {
    for (auto& g : gemms) {
      Threads threads(g.serial);
      g.prim.execute(stream, g.args);
    }
    stream.wait();
  }
};

}  // namespace

std::function<void()> make_onednn_floor(const std::vector<int>& sizes, int batch, bool bf16) {
  auto f = std::make_shared<Floor>();
  const dt type = bf16 ? dt::bf16 : dt::f32;
  const size_t layers = sizes.size() - 1;
  std::mt19937 rng(0);
  // buffers first (the vector must not move them after the memories point into it)
  f->buffers.reserve(7 * layers);
  auto buffer = [&](int64_t n) { return f->buffers.emplace_back(random_buffer(n, bf16, rng)).data(); };
  std::vector<void*> act{buffer(int64_t(batch) * sizes[0])}, w, b, dact(layers + 1, nullptr), dw;
  for (size_t l = 0; l < layers; ++l) {
    w.push_back(buffer(int64_t(sizes[l + 1]) * sizes[l]));
    b.push_back(buffer(sizes[l + 1]));
    dw.push_back(buffer(int64_t(sizes[l + 1]) * sizes[l]));
    act.push_back(buffer(int64_t(batch) * sizes[l + 1]));
    dact[l + 1] = buffer(int64_t(batch) * sizes[l + 1]);  // dY of layer l = dX of layer l + 1
  }
  for (size_t l = 0; l < layers; ++l)  // forward: Y = X W^T + b
    f->add(type, batch, sizes[l], sizes[l + 1], tag::ab, act[l], tag::ba, w[l], act[l + 1], b[l]);
  for (size_t l = layers; l-- > 0;) {
    // weight grad: dW[out, in] = dY^T X (dY^T: [out, B], the transpose of row-major dY)
    f->add(type, sizes[l + 1], batch, sizes[l], tag::ba, dact[l + 1], tag::ab, act[l], dw[l], nullptr);
    // input grad: dX[B, in] = dY W, not for the first layer
    if (l > 0) f->add(type, batch, sizes[l + 1], sizes[l], tag::ab, dact[l + 1], tag::ab, w[l], dact[l], nullptr);
  }
  f->bind_scratchpad();
  return [f] { f->run(); };
}

}  // namespace bench
