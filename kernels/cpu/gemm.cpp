#include <halfgrad/kernels/cpu/gemm.h>

#if HALFGRAD_WITH_ONEDNN
#include <halfgrad/kernels/cpu/onednn.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <type_traits>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include <omp.h>

#include <halfgrad/core/error.h>
#include <halfgrad/core/half.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/cpu/scratch.h>

namespace halfgrad::kernels::cpu {
namespace {


// ---------------------------------------------------------------------------
// Layouts

// One operand seen as [batch][rows][cols] with element strides.
struct Layout {
  int64_t batch, rows, cols;
  int64_t bs, rs, cs;
  auto operator<=>(const Layout&) const = default;

  int64_t numel() const { return batch * rows * cols; }
};

// The stride of a size-1 dim never moves a pointer, so callers may pass any
// value there (views of [1, k] rows often carry odd ones). oneDNN, though,
// looks at every stride: a stray one makes it reject the descriptor or pick
// its slow reference kernel. Give size-1 dims the strides of a dense layout,
// row-major where both would fit (oneDNN's fast kernels want a row-major C).
Layout canonical(Layout l) {
  if (l.cols == 1) {
    l.cs = 1;  // a column: row-major with leading dim rs (which is 1 if dense)
    if (l.rows == 1) l.rs = 1;
  } else if (l.rows == 1) {
    l.rs = l.cs == 1 ? l.cols : 1;  // a dense row, or a transposed layout with leading dim cs
  }
  if (l.batch == 1) l.bs = std::max(l.rs * l.rows, l.cs * l.cols);
  return l;
}

// An input operand: a batch stride of 0 shares one matrix across the batch,
// which oneDNN expresses as a batch dim of 1 (it broadcasts).
Layout input_layout(int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
  if (bs == 0) batch = 1;
  return canonical({batch, rows, cols, bs, rs, cs});
}

// True when the layout is what oneDNN calls plain: its dims, sorted by
// stride, nest without overlap and the innermost one is contiguous. Row- and
// column-major with padded leading dims and interleaved batches all qualify;
// column stride 2, negative or overlapping strides do not.
bool is_plain(const Layout& l) {
  using StrideSize = std::pair<int64_t, int64_t>;
  const std::array<StrideSize, 3> all{StrideSize{l.bs, l.batch}, {l.rs, l.rows}, {l.cs, l.cols}};
  std::array<StrideSize, 3> dims;  // the dims larger than 1
  size_t nd = 0;
  for (const StrideSize& d : all) {
    if (d.second > 1) dims[nd++] = d;
  }
  // Insertion sort of at most 3 items (std::sort here trips GCC 12's -Warray-bounds).
  for (size_t d = 1; d < nd; ++d) {
    for (size_t e = d; e > 0 && dims[e] < dims[e - 1]; --e) std::swap(dims[e], dims[e - 1]);
  }
  if (nd > 0 && dims[0].first != 1) return false;
  for (size_t d = 1; d < nd; ++d) {
    if (dims[d].first < dims[d - 1].first * dims[d - 1].second) return false;
  }
  return true;
}

// The dense layout a copy of `l` goes to. It keeps l's orientation (a
// transposed view packs column-major) so that the copy reads memory in order
// and oneDNN still sees the layout it would have seen.
Layout dense_like(const Layout& l) {
  const bool col_major = std::abs(l.rs) < std::abs(l.cs);
  Layout d = l;
  d.bs = l.rows * l.cols;
  d.rs = col_major ? 1 : l.cols;
  d.cs = col_major ? l.rows : 1;
  return canonical(d);
}

// Copy (and convert) one operand from `from` into the dense layout `to`.
// The inner loop runs along the direction that is contiguous in `to`.
template <typename Src, typename Dst>
void pack(const Src* src, const Layout& from, Dst* dst, const Layout& to) {
  const bool rows_inner = to.rs == 1 && to.rows > 1;
  const int64_t outer = rows_inner ? from.cols : from.rows;
  const int64_t inner = rows_inner ? from.rows : from.cols;
  const int64_t src_outer = rows_inner ? from.cs : from.rs, src_inner = rows_inner ? from.rs : from.cs;
  const int64_t dst_outer = rows_inner ? to.cs : to.rs, dst_inner = rows_inner ? to.rs : to.cs;
  const int64_t lines = from.batch * outer;
  parallel_for(lines, worth_threads(lines * inner), [&](int64_t line) {
    const int64_t b = line / outer, o = line % outer;
    const Src* s = src + b * from.bs + o * src_outer;
    Dst* d = dst + b * to.bs + o * dst_outer;
    for (int64_t x = 0; x < inner; ++x) d[x * dst_inner] = static_cast<Dst>(s[x * src_inner]);
  });
}

// ---------------------------------------------------------------------------
// Per-thread scratch memory

struct ThreadScratch {
  Scratch a, b, c, bias, onednn;
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

// ---------------------------------------------------------------------------
// k == 0: no products, C = bias + beta * C_old

template <typename T>
void gemm_without_products(const GemmArgs& g) {
  using acc = acc_t<T>;
  const T* bias = static_cast<const T*>(g.bias);
  T* c = static_cast<T*>(g.c);
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < g.m; ++i) {
      T* row = c + b * g.c_bs + i * g.c_rs;
      for (int64_t j = 0; j < g.n; ++j) {
        acc v = bias ? static_cast<acc>(bias[j]) : acc(0);
        if (g.beta != 0.f) v += static_cast<acc>(g.beta) * static_cast<acc>(row[j]);
        if (g.relu && v < acc(0)) v = acc(0);
        row[j] = static_cast<T>(v);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// float64: our own loop (oneDNN has no f64 matmul on CPU)
//
// C is cut into tiles of kTileM x kTileN, one OpenMP task each, so threads
// never share output. A tile walks K in panels of kTileK rows of B, small
// enough to stay in L2 while the tile's rows stream over it; four rows of C
// at a time (in L1) share each load of B.

constexpr int64_t kTileM = 64, kTileN = 256, kTileK = 256, kRowBlock = 4;

// c[r][0..nj) += sum_{p in [p0, p1)} a[r][p] * b[p][0..nj) for R rows.
template <int R>
void f64_accumulate_rows(const double* a, int64_t a_rs, int64_t a_cs, const double* b, int64_t b_rs,
                         double* c, int64_t c_rs, int64_t p0, int64_t p1, int64_t nj) {
  for (int64_t p = p0; p < p1; ++p) {
    double ap[R];
    for (int r = 0; r < R; ++r) ap[r] = a[r * a_rs + p * a_cs];
    const double* brow = b + p * b_rs;
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j) {
      const double bj = brow[j];
      for (int r = 0; r < R; ++r) c[r * c_rs + j] += ap[r] * bj;
    }
  }
}

// One tile of C for one batch: rows [i0, i1), columns [j0, j1). `b` has unit column stride.
void f64_tile(const GemmArgs& g, const double* a, const double* b, int64_t b_rs, double* c,
              int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t nj = j1 - j0;
  const double beta = g.beta;
  for (int64_t i = i0; i < i1; ++i) {  // start from beta * C_old, never reading C when beta == 0
    double* row = c + i * g.c_rs + j0;
    for (int64_t j = 0; j < nj; ++j) row[j] = beta == 0 ? 0.0 : beta * row[j];
  }
  for (int64_t p0 = 0; p0 < g.k; p0 += kTileK) {
    const int64_t p1 = std::min(g.k, p0 + kTileK);
    int64_t i = i0;
    for (; i + kRowBlock <= i1; i += kRowBlock) {
      f64_accumulate_rows<kRowBlock>(a + i * g.a_rs, g.a_rs, g.a_cs, b + j0, b_rs, c + i * g.c_rs + j0,
                                     g.c_rs, p0, p1, nj);
    }
    for (; i < i1; ++i) {
      f64_accumulate_rows<1>(a + i * g.a_rs, g.a_rs, g.a_cs, b + j0, b_rs, c + i * g.c_rs + j0, g.c_rs,
                             p0, p1, nj);
    }
  }
  if (const double* bias = static_cast<const double*>(g.bias)) {
    for (int64_t i = i0; i < i1; ++i) {
      double* row = c + i * g.c_rs + j0;
      for (int64_t j = 0; j < nj; ++j) row[j] += bias[j0 + j];
    }
  }
}

void gemm_f64(const GemmArgs& g) {
  const double* a = static_cast<const double*>(g.a);
  const double* b = static_cast<const double*>(g.b);
  double* c = static_cast<double*>(g.c);
  int64_t b_bs = g.b_bs, b_rs = g.b_rs;

  // The inner loop runs along rows of B: give it unit column stride.
  std::vector<double> packed_b;
  if (g.b_cs != 1) {
    const Layout from = input_layout(g.batch, g.k, g.n, g.b_bs, g.b_rs, g.b_cs);
    const Layout to{from.batch, g.k, g.n, g.k * g.n, g.n, 1};
    packed_b.resize(static_cast<size_t>(from.numel()));
    pack(b, from, packed_b.data(), to);
    b = packed_b.data();
    b_bs = from.batch == 1 ? 0 : to.bs;
    b_rs = to.rs;
  }

  const int64_t tiles_m = (g.m + kTileM - 1) / kTileM, tiles_n = (g.n + kTileN - 1) / kTileN;
  const int64_t tiles = g.batch * tiles_m * tiles_n;
#pragma omp parallel for schedule(dynamic, 1) if (g.batch * g.m * g.n * g.k >= kParallelWork)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t bi = t / (tiles_m * tiles_n), tm = t / tiles_n % tiles_m, tn = t % tiles_n;
    f64_tile(g, a + bi * g.a_bs, b + bi * b_bs, b_rs, c + bi * g.c_bs, tm * kTileM,
             std::min(g.m, (tm + 1) * kTileM), tn * kTileN, std::min(g.n, (tn + 1) * kTileN));
  }
}

#if HALFGRAD_WITH_ONEDNN
// ---------------------------------------------------------------------------
// oneDNN matmul (float32, bfloat16)

using onednn::engine;
using onednn::stream;

dnnl::memory::data_type onednn_type(DType t) {
  return t == DType::BFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Everything a primitive is specialised on. Pointers are not in it: they go in per call.
struct PrimitiveKey {
  DType dtype;
  Layout a, b, c;  // canonical; a and b plain
  bool has_bias;
  uint32_t beta_bits;
  bool relu;
  bool c_f32 = false;  // C in float32 while A and B are dtype
  auto operator<=>(const PrimitiveKey&) const = default;
};

struct CachedPrimitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, bias, scratchpad;
  // The memory objects of one call at a time, re-pointed per call
  // (set_data_handle): making them afresh is a dozen small allocations per
  // GEMM, which a small model's step feels. A thread that finds them busy
  // (another thread running this primitive) makes its own.
  mutable std::atomic<bool> busy{false};
  mutable dnnl::memory a_mem, b_mem, c_mem, bias_mem, pad_mem;
};

// With a batch of 1 everything is 2-D: oneDNN then needs no batch strides at all.
dnnl::memory::desc describe(const Layout& l, dnnl::memory::data_type dt, bool batched) {
  if (!batched) return dnnl::memory::desc({l.rows, l.cols}, dt, {l.rs, l.cs});
  return dnnl::memory::desc({l.batch, l.rows, l.cols}, dt, {l.bs, l.rs, l.cs});
}

std::shared_ptr<const CachedPrimitive> create_primitive(const PrimitiveKey& key) {
  const auto dt = onednn_type(key.dtype);
  const bool batched = key.c.batch > 1;
  auto made = std::make_shared<CachedPrimitive>();
  CachedPrimitive& p = *made;
  p.a = describe(key.a, dt, batched);
  p.b = describe(key.b, dt, batched);
  p.c = describe(key.c, key.c_f32 ? dnnl::memory::data_type::f32 : dt, batched);
  if (key.has_bias) {
    using tag = dnnl::memory::format_tag;
    p.bias = batched ? dnnl::memory::desc({1, 1, key.c.cols}, dt, tag::abc)
                     : dnnl::memory::desc({1, key.c.cols}, dt, tag::ab);
  }
  dnnl::primitive_attr attr;
  // We hand oneDNN its scratchpad ourselves, from a per-thread buffer. In the
  // default (library) mode, Debian's build (no DNNL_ENABLE_CONCURRENT_EXEC)
  // backs every primitive created on a thread with that thread's one global
  // scratchpad, so two threads running cached primitives at once would share it.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const float beta = std::bit_cast<float>(key.beta_bits);
  dnnl::post_ops ops;
  if (beta != 0.f) ops.append_sum(beta);  // C = A @ B + bias + beta * C_old
  if (key.relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);  // then max(0, .)
  if (ops.len() > 0) attr.set_post_ops(ops);
  const dnnl::matmul::desc desc(p.a, p.b, p.bias, p.c);
  const dnnl::matmul::primitive_desc pd(desc, attr, engine());
  p.scratchpad = pd.scratchpad_desc();
  p.matmul = dnnl::matmul(pd);
  const dnnl::engine& eng = engine();
  p.a_mem = dnnl::memory(p.a, eng, DNNL_MEMORY_NONE);
  p.b_mem = dnnl::memory(p.b, eng, DNNL_MEMORY_NONE);
  p.c_mem = dnnl::memory(p.c, eng, DNNL_MEMORY_NONE);
  if (key.has_bias) p.bias_mem = dnnl::memory(p.bias, eng, DNNL_MEMORY_NONE);
  if (p.scratchpad.get_size() > 0) p.pad_mem = dnnl::memory(p.scratchpad, eng, DNNL_MEMORY_NONE);
  return made;
}

// Creating a primitive costs tens of microseconds; training repeats a handful
// of shapes, so keep them (kernels::PlanCache: entries are shared, so
// dropping the map when it grows too big cannot pull one from under a caller
// still running it; one build per shape even when threads race).
std::shared_ptr<const CachedPrimitive> get_primitive(const PrimitiveKey& key) {
  static PlanCache<PrimitiveKey, CachedPrimitive> cache(onednn::kMaxPrimitives);
  return cache.get(key, [](const PrimitiveKey& k) { return create_primitive(k); });
}

// Runs the cached primitive on these pointers. The C API takes the arguments
// as a plain array; the C++ one wants an unordered_map, i.e. allocations.
void execute(const CachedPrimitive& p, const void* a, const void* b, const void* bias, void* c) {
  const size_t pad_bytes = p.scratchpad.get_size();
  void* pad = pad_bytes > 0 ? scratch().onednn.get(static_cast<int64_t>(pad_bytes)) : nullptr;
  auto run = [&](const dnnl::memory& am, const dnnl::memory& bm, const dnnl::memory& cm, const dnnl::memory& biasm,
                 const dnnl::memory& padm) {
    std::array<dnnl_exec_arg_t, 5> args{};
    int nargs = 0;
    args[nargs++] = {DNNL_ARG_SRC, am.get()};
    args[nargs++] = {DNNL_ARG_WEIGHTS, bm.get()};
    args[nargs++] = {DNNL_ARG_DST, cm.get()};
    if (bias) args[nargs++] = {DNNL_ARG_BIAS, biasm.get()};
    if (pad) args[nargs++] = {DNNL_ARG_SCRATCHPAD, padm.get()};
    dnnl::stream& s = stream();
    dnnl::error::wrap_c_api(dnnl_primitive_execute(p.matmul.get(), s.get(), nargs, args.data()),
                            "could not execute a matmul primitive");
    s.wait();
  };
  if (!p.busy.exchange(true, std::memory_order_acquire)) {
    struct Release {
      const CachedPrimitive& p;
      ~Release() { p.busy.store(false, std::memory_order_release); }
    } release{p};
    p.a_mem.set_data_handle(const_cast<void*>(a));
    p.b_mem.set_data_handle(const_cast<void*>(b));
    p.c_mem.set_data_handle(c);
    if (bias) p.bias_mem.set_data_handle(const_cast<void*>(bias));
    if (pad) p.pad_mem.set_data_handle(pad);
    run(p.a_mem, p.b_mem, p.c_mem, p.bias_mem, p.pad_mem);
    return;
  }
  const dnnl::engine& eng = engine();  // busy: this call's own objects
  run(dnnl::memory(p.a, eng, const_cast<void*>(a)), dnnl::memory(p.b, eng, const_cast<void*>(b)),
      dnnl::memory(p.c, eng, c), bias ? dnnl::memory(p.bias, eng, const_cast<void*>(bias)) : dnnl::memory(),
      pad ? dnnl::memory(p.scratchpad, eng, pad) : dnnl::memory());
}


// C = A @ B (+ bias) (+ beta * C) for plain layouts, through a cached primitive.
void matmul(DType dtype, const Layout& a, const void* a_ptr, const Layout& b, const void* b_ptr,
            const Layout& c, void* c_ptr, const void* bias, float beta, bool relu, bool c_f32 = false) {
  const PrimitiveKey key{dtype, a, b, c, bias != nullptr, std::bit_cast<uint32_t>(beta), relu, c_f32};
  // A small GEMM runs on this thread alone: waking the OpenMP team and
  // joining it again costs more than the team saves (the seed MLP's GEMMs of
  // 100k multiply-adds took 3.7 us each on 2 threads and 1.4 us on one). The
  // primitive is made and run under the same setting, so its own choice of
  // thread count is 1 too.
  const int64_t macs = c.batch * c.rows * c.cols * a.cols;
  SerialScope serial(macs < kSerialGemmMacs);
  try {
    execute(*get_primitive(key), a_ptr, b_ptr, bias, c_ptr);
  } catch (const dnnl::error& e) {
    fail("gemm: oneDNN matmul failed for {} A[{}, {}, {}] (strides {}, {}, {}) @ B[{}, {}, {}] (strides {}, {}, {}) "
         "-> C[{}, {}, {}] (strides {}, {}, 1): {} (dnnl status {})",
         dtype_name(dtype), a.batch, a.rows, a.cols, a.bs, a.rs, a.cs, b.batch, b.rows, b.cols, b.bs, b.rs,
         b.cs, c.batch, c.rows, c.cols, c.bs, c.rs, e.what(), static_cast<int>(e.status));
  }
}

#else
// ---------------------------------------------------------------------------
// Without oneDNN (HALFGRAD_ONEDNN=OFF, e.g. on a GPU machine that has no
// libdnnl): a portable row-by-row loop that accumulates in double, so it is
// exact to float32 rounding, only slower. Only float32 reaches it (bfloat16
// and float16 widen to float32 first).

void matmul(DType dtype, const Layout& a, const void* a_ptr, const Layout& b, const void* b_ptr,
            const Layout& c, void* c_ptr, const void* bias, float beta, bool relu, bool c_f32 = false) {
  HG_CHECK(dtype == DType::Float32 && !c_f32, "gemm: the portable path takes float32, got {}", dtype_name(dtype));
  const float* A = static_cast<const float*>(a_ptr);
  const float* B = static_cast<const float*>(b_ptr);
  const float* bias_f = static_cast<const float*>(bias);
  float* C = static_cast<float*>(c_ptr);
  const int64_t rows = c.batch * c.rows, n = c.cols, k = a.cols;
  parallel_for(rows, worth_threads(rows * n * k), [&](int64_t r) {
    const int64_t bi = r / c.rows, i = r % c.rows;
    const float* arow = A + (a.batch == 1 ? 0 : bi * a.bs) + i * a.rs;
    const float* bmat = B + (b.batch == 1 ? 0 : bi * b.bs);
    float* crow = C + bi * c.bs + i * c.rs;
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double av = arow[p * a.cs];
      const float* brow = bmat + p * b.rs;
      for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<double>(brow[j * b.cs]);
    }
    for (int64_t j = 0; j < n; ++j) {
      double v = acc[j] + (bias_f ? bias_f[j] : 0.0);
      if (beta != 0.f) v += static_cast<double>(beta) * crow[j * c.cs];
      if (relu && v < 0.0) v = 0.0;
      crow[j * c.cs] = static_cast<float>(v);
    }
  });
}

#endif  // HALFGRAD_WITH_ONEDNN

// Copies an operand oneDNN cannot describe into scratch; returns the pointer to use.
template <typename T>
const void* plain_operand(const void* ptr, Layout& l, Scratch& buf) {
  if (is_plain(l)) return ptr;
  const Layout dense = dense_like(l);
  T* out = buf.get<T>(dense.numel());
  pack(static_cast<const T*>(ptr), l, out, dense);
  l = dense;
  return out;
}

// C = relu(C) as PyTorch's: negatives become 0 and NaN stays NaN. For the
// float64 loop (no epilogue of its own) and after oneDNN, whose eltwise_relu
// post-op turns NaN into 0 (a NaN from a broken input would vanish there, and a
// training loop could not see that its loss went bad).
// A select, not a branch (signs are random: a branch mispredicts half the
// time), so the loop vectorises; rows in parallel for large outputs.
template <typename T>
HG_TARGET_CLONES void relu_row(T* row, int64_t n) {
  if constexpr (sizeof(T) == 2) {
    // On the bits (integer lanes vectorise; a float round trip does not): a
    // negative number is the sign bit with a magnitude in (0, inf]; -0.0 and
    // NaN stay, as in the float test v < 0.
    constexpr uint16_t kInfBits = std::is_same_v<T, BFloat16> ? 0x7f80 : 0x7c00;
    uint16_t* bits = reinterpret_cast<uint16_t*>(row);
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t b = bits[j], mag = b & 0x7fff;
      bits[j] = (b & 0x8000) && mag != 0 && mag <= kInfBits ? uint16_t{0} : b;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const T v = row[j];
      row[j] = v < T(0) ? T(0) : v;
    }
  }
}

template <typename T>
void relu_in_place(const GemmArgs& g) {
  T* c = static_cast<T*>(g.c);
  const int64_t rows = g.batch * g.m;
  const bool large = worth_threads(rows * g.n);
  const bool dense = (g.batch == 1 || g.c_bs == g.m * g.c_rs) && g.c_rs == g.n;  // one batch: its stride is moot
  if (!large && dense) return relu_row(c, rows * g.n);  // one run
  parallel_for(rows, large, [&](int64_t r) { relu_row(c + (r / g.m) * g.c_bs + (r % g.m) * g.c_rs, g.n); });
}

// float32 / bfloat16: straight to oneDNN, accumulating in float32.
template <typename T>
void gemm_onednn(const GemmArgs& g, Layout a, Layout b, const Layout& c) {
  ThreadScratch& s = scratch();
  const void* a_ptr = plain_operand<T>(g.a, a, s.a);
  const void* b_ptr = plain_operand<T>(g.b, b, s.b);
  matmul(g.dtype, a, a_ptr, b, b_ptr, c, g.c, g.bias, g.beta, /*relu=*/false, g.c_float32);
  if (g.relu) relu_in_place<T>(g);  // not oneDNN's post-op: it maps NaN to 0
}

// float16 (and bfloat16 where oneDNN cannot): oneDNN 2.6 has no f16 matmul
// on CPU. Widen A, B and bias to float32, multiply into a float32 buffer, then
// round to T once, adding beta * C_old in float on the way (so C_old is read
// only when beta != 0).
template <typename T>
void gemm_widened(const GemmArgs& g, const Layout& a, const Layout& b, const Layout& c) {
  ThreadScratch& s = scratch();
  const Layout a32 = dense_like(a), b32 = dense_like(b);
  float* a_buf = s.a.get<float>(a32.numel());
  float* b_buf = s.b.get<float>(b32.numel());
  pack(static_cast<const T*>(g.a), a, a_buf, a32);
  pack(static_cast<const T*>(g.b), b, b_buf, b32);

  float* bias_buf = nullptr;
  if (g.bias) {
    bias_buf = s.bias.get<float>(g.n);
    const T* bias = static_cast<const T*>(g.bias);
    for (int64_t j = 0; j < g.n; ++j) bias_buf[j] = static_cast<float>(bias[j]);
  }

  const Layout c32 = canonical({c.batch, c.rows, c.cols, c.rows * c.cols, c.cols, 1});
  float* c_buf = s.c.get<float>(c32.numel());
  matmul(DType::Float32, a32, a_buf, b32, b_buf, c32, c_buf, bias_buf, 0.f, false);  // relu after beta, below

  const int64_t rows = g.batch * g.m;
  auto write = [&](auto* out) {  // T, or float for c_float32
    using O = std::remove_pointer_t<decltype(out)>;
    parallel_for(rows, worth_threads(rows * g.n), [&](int64_t r) {
      const float* src = c_buf + r * g.n;
      O* dst = out + (r / g.m) * g.c_bs + (r % g.m) * g.c_rs;
      for (int64_t j = 0; j < g.n; ++j) {
        float v = src[j];
        if (g.beta != 0.f) v += g.beta * static_cast<float>(dst[j]);
        if (g.relu && v < 0.f) v = 0.f;
        dst[j] = static_cast<O>(v);
      }
    });
  };
  if (g.c_float32) write(static_cast<float*>(g.c));
  else write(static_cast<T*>(g.c));
}

// oneDNN 2.6 implements bf16 matmul only on CPUs with AVX-512 (it reports
// "unimplemented" below that, not even a reference kernel). Ask once.
bool onednn_has_bf16_matmul() {
#if HALFGRAD_WITH_ONEDNN
  static const bool supported = [] {
    try {
      const Layout l = canonical({1, 2, 2, 4, 2, 1});
      create_primitive({DType::BFloat16, l, l, l, false, 0, false});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
#else
  return false;  // no oneDNN: bfloat16 widens to float32 like float16
#endif
}


// ---------------------------------------------------------------------------
// Validation

void check_args(const GemmArgs& g) {
  HG_CHECK(is_floating(g.dtype),
           "gemm: dtype {} is not supported (expected float32, float64, float16 or bfloat16)",
           dtype_name(g.dtype));
  HG_CHECK(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0,
           "gemm: sizes must be non-negative, got batch={} m={} n={} k={}", g.batch, g.m, g.n, g.k);
  HG_CHECK(!g.c_float32 || ((g.dtype == DType::BFloat16 || g.dtype == DType::Float16) && g.bias == nullptr && !g.relu),
           "gemm: a float32 C takes bfloat16 or float16 A and B, without bias or relu (got {}{}{})",
           dtype_name(g.dtype), g.bias ? ", a bias" : "", g.relu ? ", relu" : "");
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;  // nothing is read or written
  HG_CHECK(g.c != nullptr, "gemm: C is null for a [{}, {}, {}] result", g.batch, g.m, g.n);
  HG_CHECK(g.k == 0 || (g.a != nullptr && g.b != nullptr),
           "gemm: A or B is null for [{}, {}, {}] @ [{}, {}, {}]", g.batch, g.m, g.k, g.batch, g.k, g.n);
  const Layout c = canonical({g.batch, g.m, g.n, g.c_bs, g.c_rs, 1});
  HG_CHECK((g.batch == 1 || g.c_bs != 0) && is_plain(c),
           "gemm: C [{}, {}, {}] with strides ({}, {}, 1) overlaps itself; it must be a non-overlapping "
           "layout with contiguous rows (e.g. strides ({}, {}, 1))",
           g.batch, g.m, g.n, g.c_bs, g.c_rs, g.m * g.n, g.n);
}

}  // namespace

void gemm(const GemmArgs& args) {
  check_args(args);
  if (args.batch == 0 || args.m == 0 || args.n == 0) return;
  GemmArgs g = args;
  if (g.beta == 0.f) g.beta = 0.f;  // -0.0 means "overwrite" too, and shares its cache entry

  if (g.k == 0) {  // oneDNN 2.6 divides by zero (SIGFPE) on an empty K: never hand it one
    if (g.c_float32) {
      GemmArgs f = g;  // A and B are not read: C = beta * C_old, in float32
      f.dtype = DType::Float32;
      f.c_float32 = false;
      gemm_without_products<float>(f);
      return;
    }
    HG_DISPATCH_FLOATING(g.dtype, "gemm", [&] { gemm_without_products<scalar_t>(g); });
    return;
  }
  if (g.dtype == DType::Float64) {
    gemm_f64(g);
    if (g.relu) relu_in_place<double>(g);  // float64 is our own loop: a second pass is fine there
    return;
  }
  if (g.batch > 1 && g.a_bs == 0 && g.b_bs == 0) {
    // oneDNN broadcasts A or B over the batch, not both at once: one GEMM per C matrix.
    GemmArgs one = g;
    one.batch = 1;
    for (int64_t b = 0; b < g.batch; ++b) {
      one.c = static_cast<std::byte*>(g.c) + b * g.c_bs * static_cast<int64_t>(itemsize(g.c_float32 ? DType::Float32 : g.dtype));
      gemm(one);
    }
    return;
  }

  const Layout a = input_layout(g.batch, g.m, g.k, g.a_bs, g.a_rs, g.a_cs);
  const Layout b = input_layout(g.batch, g.k, g.n, g.b_bs, g.b_rs, g.b_cs);
  const Layout c = canonical({g.batch, g.m, g.n, g.c_bs, g.c_rs, 1});
  switch (g.dtype) {
    case DType::Float32: gemm_onednn<float>(g, a, b, c); break;
    case DType::BFloat16:
      if (onednn_has_bf16_matmul()) {
        gemm_onednn<BFloat16>(g, a, b, c);
      } else {
        gemm_widened<BFloat16>(g, a, b, c);
      }
      break;
    case DType::Float16: gemm_widened<Half>(g, a, b, c); break;
    default: fail("gemm: unreachable dtype {}", dtype_name(g.dtype));
  }
}

}  // namespace halfgrad::kernels::cpu
