#pragma once
// The CPU elementwise loop: walks N operands of one shape with arbitrary
// strides. Dimensions (in the output's memory order) that are contiguous for
// every operand are merged first, so a contiguous or channels-last tensor is one
// long row that the compiler vectorises; large tensors are split into chunks
// across OpenMP threads.
#include <array>
#include <tuple>
#include <type_traits>
#include <utility>
#include <cstdint>

#include <halfgrad/core/macros.h>
#include <halfgrad/core/tensor.h>

namespace halfgrad::kernels::cpu {

constexpr int64_t kParallelGrain = 32768;  // below this, threads cost more than they save

template <size_t N>
struct Geometry {
  Shape shape;                   // coalesced, innermost last
  std::array<Shape, N> strides;  // per operand, in elements
};

// Merge adjacent dims that are contiguous for all operands; drop size-1 dims.
// Dims are taken in operand 0's (the output's) memory order, so a channels-last
// output with inputs in its layout is one long row too.
template <size_t N>
Geometry<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  Geometry<N> g;
  const Shape order = in_memory_order(shape, *strides[0]) ? Shape() : memory_order(shape, *strides[0]);
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t d = order.empty() ? i : static_cast<size_t>(order[i]);
    if (shape[d] == 1) continue;
    if (!g.shape.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        mergeable = mergeable && g.strides[k].back() == (*strides[k])[d] * shape[d];
      if (mergeable) {
        g.shape.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) g.strides[k].back() = (*strides[k])[d];
        continue;
      }
    }
    g.shape.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) g.strides[k].push_back((*strides[k])[d]);
  }
  if (g.shape.empty()) {  // a single element
    g.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) g.strides[k].push_back(1);
  }
  return g;
}

// Calls row(offsets, n, inner_strides) for runs of the innermost dim, where
// offsets[k] is operand k's element offset of the run's first element.
template <size_t N, typename Row>
void for_each_row_range(const Geometry<N>& g, int64_t begin, int64_t end, Row&& row) {
  const size_t nd = g.shape.size();
  Shape idx(nd, 0);
  int64_t rem = begin;
  for (size_t d = nd; d-- > 0;) {
    idx[d] = rem % g.shape[d];
    rem /= g.shape[d];
  }
  std::array<int64_t, N> off{};
  for (size_t k = 0; k < N; ++k)
    for (size_t d = 0; d < nd; ++d) off[k] += idx[d] * g.strides[k][d];
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = g.strides[k][nd - 1];

  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(g.shape[nd - 1] - idx[nd - 1], end - pos);
    row(off, n, inner);
    pos += n;
    // advance the multi-index by n along the innermost dim, carrying outward
    idx[nd - 1] += n;
    for (size_t k = 0; k < N; ++k) off[k] += n * inner[k];
    for (size_t d = nd - 1; d > 0 && idx[d] == g.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
      for (size_t k = 0; k < N; ++k) off[k] += g.strides[k][d - 1] - g.shape[d] * g.strides[k][d];
    }
  }
}

template <size_t N, typename Row>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, Row&& row) {
  const int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  const Geometry<N> g = coalesce<N>(shape, strides);
  if (numel < 2 * kParallelGrain) {
    for_each_row_range(g, 0, numel, row);
    return;
  }
  const int64_t chunks = (numel + kParallelGrain - 1) / kParallelGrain;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    for_each_row_range(g, c * kParallelGrain, std::min(numel, (c + 1) * kParallelGrain), row);
}

namespace detail {
// A dense run of float32 and bfloat16 operands, compiled for AVX-512 and AVX2
// too (the baseline build is SSE2: 4 lanes): the types autocast's ops and
// every float32 model run in. bfloat16 widens to float and rounds back with
// a few integer operations that vectorise along (core/half.h), so AMP's
// activations and their gradients run in full vectors, not a value at a time.
// Not the other dtypes: cloning every dtype's loops would triple the build's
// largest file for little.
template <typename T>
inline constexpr bool kClonedRun = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

template <typename Out, typename F, typename... P>
HG_TARGET_CLONES void dense_run(Out* o, int64_t n, F f, const P*... p) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]...);
}

template <typename Out, typename... In, typename F, size_t... I, typename... Ts>
void map_impl(const Tensor& out, F& f, std::index_sequence<I...>, const Ts&... in) {
  constexpr size_t N = 1 + sizeof...(In);
  Out* po = static_cast<Out*>(out.data_ptr());
  const std::tuple<const In*...> pin{static_cast<const In*>(in.data_ptr())...};
  for_each_row<N>(out.shape(), {&out.strides(), &in.strides()...},
                  [&](const std::array<int64_t, N>& off, int64_t n, const std::array<int64_t, N>& st) {
                    Out* o = po + off[0];
                    const std::tuple<const In*...> p{(std::get<I>(pin) + off[I + 1])...};
                    bool dense = true;
                    for (size_t k = 0; k < N; ++k) dense = dense && st[k] == 1;
                    if (dense) {
                      if constexpr ((kClonedRun<Out> && ... && kClonedRun<In>))
                        dense_run(o, n, f, std::get<I>(p)...);
                      else
                        for (int64_t i = 0; i < n; ++i) o[i] = f(std::get<I>(p)[i]...);
                    } else {
                      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(std::get<I>(p)[i * st[I + 1]]...);
                    }
                  });
}
}  // namespace detail

// Elementwise map: out[i] = f(in0[i], in1[i], ...), all of out's shape (the
// inputs may be expanded views with stride 0). Contiguous rows get a plain
// indexed loop that the compiler vectorises.
template <typename Out, typename... In, typename F, typename... Ts>
void map(const Tensor& out, F f, const Ts&... in) {
  static_assert(sizeof...(In) == sizeof...(Ts), "map: one element type per input tensor");
  detail::map_impl<Out, In...>(out, f, std::index_sequence_for<In...>{}, in...);
}

}  // namespace halfgrad::kernels::cpu
