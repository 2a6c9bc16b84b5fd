// A backend's `linear` (LinearLayout) as three of its own calls: the bias
// rows written into C, the product accumulated onto them by one GEMM (beta
// 1), the activation in place. The CPU's definition, whose bits the examples'
// results are; CUDA's where cuBLASLt has no fused kernel for a layout.
#pragma once

#include "platipus/backend/layouts.hpp"

namespace platipus::detail {

template <class B, class T>
void linear_in_parts(const LinearLayout<T>& l, const T* a, const T* b, const T* bias, T* c) {
  const GemmLayout<T>& g = l.gemm;
  CopyLayout rows;  // bias [batch, 1, n] -> C [batch, m, n]
  rows.rank = 3;
  rows.dims = {g.batch, g.m, g.n};
  rows.stride_src = {l.stride_bias, 0, 1};
  rows.stride_dst = {g.stride_c, g.n, 1};
  B::strided_copy(bias, c, rows);
  GemmLayout<T> onto = g;
  onto.beta = T(1);
  B::gemm(onto, a, b, c);
  if (l.activation != UnaryOp::copy) B::unary(l.activation, c, c, g.c_extent(), T(0));
}

}  // namespace platipus::detail
