// CPU reductions, laid out by kernels/reduce_plan.h: every output reduces one
// contiguous block; a reduction over the leading dims of a contiguous tensor
// (the bias gradient of Linear) instead accumulates whole rows, which vectorises.
// Sums add pairwise (O(log n) roundings per element), in a fixed order.
#include <algorithm>
#include <vector>

#include <halfgrad/kernels/cpu/cpu_kernels.h>
#include <halfgrad/kernels/cpu/parallel.h>
#include <halfgrad/kernels/cpu/scratch.h>
#include <halfgrad/kernels/reduce_plan.h>

namespace halfgrad::kernels::cpu {

using kernels::ReduceOp;

namespace {

template <typename T>
using racc_t = std::conditional_t<std::is_same_v<T, double>, double,
                                  std::conditional_t<std::is_same_v<T, int64_t>, int64_t, float>>;

template <typename T>
bool is_nan(T x) {
  if constexpr (std::is_integral_v<T>) return false;
  else return x != x;
}

// Sums accumulate pairwise (as PyTorch's CPU cascade sum): a leaf of up to
// kLeaf elements is added directly in 8 lanes (vectorised); longer runs split
// in two on a leaf boundary and add the halves. Each element then passes
// through O(log n) roundings, not O(n): a float32 sum of 2^27 ones is exact,
// where one running float stops counting at 2^24.
constexpr int64_t kLeaf = 128;
// Rows longer than this are cut into blocks of it that are summed in
// parallel, then the block sums pairwise: a fixed tree, so the result does
// not depend on the number of threads.
constexpr int64_t kBlock = 1 << 16;

template <typename T>
racc_t<T> leaf_sum(const T* p, int64_t n) {
  using A = racc_t<T>;
  A lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lanes[k] += static_cast<A>(p[i + k]);
  A s = 0;
  for (; i < n; ++i) s += static_cast<A>(p[i]);
  return s + (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
}

template <typename T>
racc_t<T> pairwise_sum(const T* p, int64_t n) {
  if (n <= kLeaf) return leaf_sum(p, n);
  const int64_t half = (n / 2 + kLeaf - 1) / kLeaf * kLeaf;  // < n, as n > kLeaf
  return pairwise_sum(p, half) + pairwise_sum(p + half, n - half);
}

// The sum of one contiguous row; `parallel`: its blocks on several threads.
template <typename T>
racc_t<T> row_sum(const T* p, int64_t n, bool parallel) {
  using A = racc_t<T>;
  if (n <= kBlock) return pairwise_sum(p, n);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<A> part(static_cast<size_t>(blocks));
  parallel_for(blocks, parallel,
               [&](int64_t b) { part[b] = pairwise_sum(p + b * kBlock, std::min(kBlock, n - b * kBlock)); });
  return pairwise_sum(part.data(), blocks);
}

// The max (kMin: the min) of a row and its first position; the first NaN wins.
template <bool kMin, typename T>
void block_extreme(const T* p, int64_t n, racc_t<T>& best, int64_t& arg) {
  using A = racc_t<T>;
  best = static_cast<A>(p[0]);
  arg = 0;
  if (is_nan(best)) return;
  for (int64_t i = 1; i < n; ++i) {
    const A v = static_cast<A>(p[i]);
    if (is_nan(v)) {  // NaN wins, as in PyTorch
      best = v;
      arg = i;
      return;
    }
    if (kMin ? v < best : v > best) {
      best = v;
      arg = i;
    }
  }
}

template <typename T>
void reduce_inner(ReduceOp op, const T* in, int64_t outer, int64_t r, const Tensor& out, int64_t* indices) {
  using A = racc_t<T>;
  // A few long rows (a full sum): the threads share each row's blocks.
  const bool sum_op = op == ReduceOp::Sum || op == ReduceOp::Mean;
  const bool split_rows = outer < 8 && r > kBlock && sum_op;
  parallel_for(outer, !split_rows && worth_threads(outer * r), [&](int64_t o) {
    const T* p = in + o * r;
    if (sum_op) {
      A s = row_sum(p, r, split_rows);
      if (op == ReduceOp::Mean) s = s / static_cast<A>(r);
      static_cast<T*>(out.data_ptr())[o] = static_cast<T>(s);
    } else {
      A best;
      int64_t arg;
      if (op == ReduceOp::Min || op == ReduceOp::ArgMin) block_extreme<true>(p, r, best, arg);
      else block_extreme<false>(p, r, best, arg);
      if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) static_cast<int64_t*>(out.data_ptr())[o] = arg;
      else static_cast<T*>(out.data_ptr())[o] = static_cast<T>(best);
      if (indices) indices[o] = arg;
    }
  });
}

// Sum/mean over the leading dims: out[j] = sum_i in[i * inner + j], pairwise
// over the rows as above. Work is cut into tasks of kCols adjacent columns by
// kRowBlock rows (parallel); the block partials are then summed the same way.
constexpr int64_t kLeafRows = 16;
constexpr int64_t kRowBlock = 1024;
constexpr int64_t kCols = 256;

// acc[0, w) = column sums of r <= kLeafRows rows: the leaf, a loop over w
// adjacent columns per row that vectorises (compiled for AVX-512 and AVX2 too).
// 16 columns at a time are summed in a local array, which stays in vector
// registers over the rows (acc in memory was a load and a store per row);
// each column still adds its rows in order.
template <typename T>
[[gnu::always_inline]] inline void column_group(const T* in, int64_t r, int64_t ld, racc_t<T>* s) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < 16; ++j) s[j] += static_cast<racc_t<T>>(in[i * ld + j]);
}
// The last t < 16 columns take a whole group too (a tail loop of scalar adds
// through memory was half the leaf's time in a small MLP's bias gradients):
// when w >= 16 the group of columns [w - 16, w), whose first lanes are summed
// twice and dropped; when w < 16 the group at column 0, whose lanes past w
// read the next row's first values (dropped too) while that stays inside the
// block, the last row(s) scalar.
template <typename T>
HG_TARGET_CLONES void column_leaf(const T* in, int64_t r, int64_t ld, int64_t w, racc_t<T>* acc) {
  using A = racc_t<T>;
  constexpr int64_t kW = 16;
  int64_t j0 = 0;
  for (; j0 + kW <= w; j0 += kW) {
    A s[kW] = {};
    column_group(in + j0, r, ld, s);
    for (int64_t j = 0; j < kW; ++j) acc[j0 + j] = s[j];
  }
  if (j0 == w) return;
  A s[kW] = {};
  if (w >= kW) {
    column_group(in + w - kW, r, ld, s);
    for (int64_t j = j0; j < w; ++j) acc[j] = s[j - (w - kW)];
    return;
  }
  // rows whose 16 values from column 0 end inside the block ((r - 1) * ld + w values)
  const int64_t room = (r - 1) * ld + w - kW;
  const int64_t whole = room < 0 ? 0 : std::min(room / ld + 1, r);
  column_group(in, whole, ld, s);
  for (int64_t i = whole; i < r; ++i)
    for (int64_t j = 0; j < w; ++j) s[j] += static_cast<A>(in[i * ld + j]);
  for (int64_t j = 0; j < w; ++j) acc[j] = s[j];
}

// acc[0, w) = column sums of rows [0, r) of `in` (row stride `ld`), pairwise;
// `scratch` holds w values per level of the recursion (pairwise_levels(r)).
template <typename T>
void column_pairwise(const T* in, int64_t r, int64_t ld, int64_t w, racc_t<T>* acc, racc_t<T>* scratch) {
  if (r <= kLeafRows) return column_leaf(in, r, ld, w, acc);
  const int64_t half = r / 2;
  column_pairwise(in, half, ld, w, acc, scratch + w);
  column_pairwise(in + half * ld, r - half, ld, w, scratch, scratch + w);
  for (int64_t j = 0; j < w; ++j) acc[j] += scratch[j];
}

// Levels of column_pairwise's recursion for r rows (each level halves r).
int64_t pairwise_levels(int64_t r) {
  int64_t levels = 1;
  for (; r > kLeafRows; r = (r + 1) / 2) ++levels;
  return levels;
}

// The column sums' per-thread buffer (no allocation or zeroing per call: the
// bias gradient of a small Linear is a few hundred adds).
struct ColumnScratch;

// acc[0, inner) = column sums of a [r, inner] block, kCols columns a task.
template <typename T>
void column_block(const T* in, int64_t r, int64_t inner, racc_t<T>* acc, bool parallel) {
  const int64_t chunks = (inner + kCols - 1) / kCols;
  const int64_t levels = pairwise_levels(r);
  parallel_for(chunks, parallel && worth_threads(r * inner), [&](int64_t c) {
    const int64_t w = std::min(kCols, inner - c * kCols);
    racc_t<T>* scratch = thread_scratch<ColumnScratch, racc_t<T>>(w * levels);
    column_pairwise(in + c * kCols, r, inner, w, acc + c * kCols, scratch);
  });
}

struct OuterScratch;  // reduce_outer's column sums, this thread's (column_block fills every one)

template <typename T>
void reduce_outer(ReduceOp op, const T* in, int64_t r, int64_t inner, const Tensor& out) {
  using A = racc_t<T>;
  A* acc = thread_scratch<OuterScratch, A>(inner);
  if (r <= kRowBlock) {
    column_block(in, r, inner, acc, true);
  } else {
    const int64_t blocks = (r + kRowBlock - 1) / kRowBlock;
    std::vector<A> part(static_cast<size_t>(blocks * inner));
    parallel_for(blocks, worth_threads(r * inner), [&](int64_t b) {
      column_block(in + b * kRowBlock * inner, std::min(kRowBlock, r - b * kRowBlock), inner, &part[b * inner], false);
    });
    column_block(part.data(), blocks, inner, acc, true);
  }
  T* o = static_cast<T*>(out.data_ptr());
  for (int64_t j = 0; j < inner; ++j) o[j] = static_cast<T>(op == ReduceOp::Mean ? acc[j] / static_cast<A>(r) : acc[j]);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out,
            const Tensor& indices) {
  const kernels::ReducePlan p = kernels::plan_reduce(op, in, dims, out, copy);
  if (p.nothing) return;
  if (p.empty) return fill(out, kernels::empty_reduction_value(op));
  if (p.columns) {  // row accumulation over the leading dims, no copy
    HG_DISPATCH_NUMERIC(in.dtype(), "sum", [&] {
      reduce_outer(op, static_cast<const scalar_t*>(in.data_ptr()), p.r, p.outer, out);
    });
    return;
  }
  HG_DISPATCH_NUMERIC(in.dtype(), "reduce", [&] {
    reduce_inner(op, static_cast<const scalar_t*>(p.rows.data_ptr()), p.outer, p.r, out,
                 indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr);
  });
}

}  // namespace halfgrad::kernels::cpu
