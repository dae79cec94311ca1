// CPU reductions, laid out by ops/reduce_plan.h: every output reduces one
// contiguous block; a reduction over the leading dims of a contiguous tensor
// (the bias gradient of Linear) instead accumulates whole rows, which vectorises.
#include <algorithm>
#include <vector>

#include <halfgrad/ops/cpu/cpu_kernels.h>
#include <halfgrad/ops/reduce_plan.h>

namespace halfgrad::cpu {

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

// Reduce `n` contiguous elements.
template <typename T>
racc_t<T> block_sum(const T* p, int64_t n) {
  using A = racc_t<T>;
  A lanes[8] = {};  // several partial sums: vectorises and loses less precision
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lanes[k] += static_cast<A>(p[i + k]);
  A s = 0;
  for (; i < n; ++i) s += static_cast<A>(p[i]);
  for (int k = 0; k < 8; ++k) s += lanes[k];
  return s;
}

template <typename T>
void block_max(const T* p, int64_t n, racc_t<T>& best, int64_t& arg) {
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
    if (v > best) {
      best = v;
      arg = i;
    }
  }
}

template <typename T>
void reduce_inner(ReduceOp op, const T* in, int64_t outer, int64_t r, const Tensor& out) {
  using A = racc_t<T>;
#pragma omp parallel for if (outer * r > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    const T* p = in + o * r;
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      A s = block_sum(p, r);
      if (op == ReduceOp::Mean) s = s / static_cast<A>(r);
      static_cast<T*>(out.data_ptr())[o] = static_cast<T>(s);
    } else {
      A best;
      int64_t arg;
      block_max(p, r, best, arg);
      if (op == ReduceOp::ArgMax) static_cast<int64_t*>(out.data_ptr())[o] = arg;
      else static_cast<T*>(out.data_ptr())[o] = static_cast<T>(best);
    }
  }
}

// Sum/mean over the leading dims: out[j] = sum_i in[i * inner + j].
template <typename T>
void reduce_outer(ReduceOp op, const T* in, int64_t r, int64_t inner, const Tensor& out) {
  using A = racc_t<T>;
  std::vector<A> acc(inner, A(0));
  for (int64_t i = 0; i < r; ++i) {
    const T* row = in + i * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] += static_cast<A>(row[j]);
  }
  T* o = static_cast<T*>(out.data_ptr());
  for (int64_t j = 0; j < inner; ++j) o[j] = static_cast<T>(op == ReduceOp::Mean ? acc[j] / static_cast<A>(r) : acc[j]);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& in, const std::vector<int64_t>& dims, const Tensor& out) {
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
    reduce_inner(op, static_cast<const scalar_t*>(p.rows.data_ptr()), p.outer, p.r, out);
  });
}

}  // namespace halfgrad::cpu
