#pragma once
// Internal: the pieces of indexing.cpp that index_expr.cpp (x.index,
// x.index_put_) also runs. Not installed.
#include <halfgrad/core/tensor.h>
#include <halfgrad/kernels/kernels.h>

namespace halfgrad::indexing_detail {

// The scatter kernel into `self` (in place, any strides); float16/bfloat16
// accumulate in a float32 copy and round once.
void scatter_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                    kernels::ScatterMode mode, const char* op);
// index_select's index (1-d or 0-d) as an index of `shape` for gather/scatter:
// stride 0 everywhere but `dim`.
Tensor expanded_index(const Tensor& index, const Shape& shape, int64_t dim);
// An in-place op is not recorded: values that require grad would lose their gradient.
void check_values_no_grad(const char* op, const Tensor& v);
// src in self's dtype, never a view overlapping self.
Tensor operand_for(const Tensor& self, const Tensor& src);

}  // namespace halfgrad::indexing_detail
