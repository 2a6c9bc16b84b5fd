// Batched matrix product with transposes and broadcast batch axes.
#pragma once

#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/tensor/matmul.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a = false,
                 bool trans_b = false);

namespace detail {

// Gradients of C = op(A) op(B) for inputs 0 (A) and 1 (B) of a node, given
// C's gradient G (op(A) = A^T when trans_a, and so on):
//   dA = G op(B)^T, or op(B) G^T when trans_a
//   dB = op(A)^T G, or G^T op(A) when trans_b
// each summed over the batch axes that A or B were broadcast along.
template <class T, class B>
void matmul_backward(Backward<T, B>& c, const Var<T, B>& g, bool trans_a, bool trans_b) {
  const auto x = c.input(0), w = c.input(1);
  if (c.needs(0)) {
    auto da = trans_a ? matmul(w, g, trans_b, true) : matmul(g, w, false, !trans_b);
    c.set(0, sum_to(da, x.shape()));
  }
  if (c.needs(1)) {
    if (w.rank() == 2 && x.rank() > 2 && !trans_a) {
      // One shared matrix times a batch: fold the batch into the rows, so the
      // weight gradient is one GEMM, not a batch of them and a sum.
      const auto x2 = reshape(x, {-1, x.dim(-1)}), g2 = reshape(g, {-1, g.dim(-1)});
      c.set(1, trans_b ? matmul(g2, x2, true, false) : matmul(x2, g2, true, false));
    } else {
      auto db = trans_b ? matmul(g, x, true, trans_a) : matmul(x, g, !trans_a, false);
      c.set(1, sum_to(db, w.shape()));
    }
  }
}

}  // namespace detail

// C = op(A) op(B), op a transpose of the last two axes when asked.
template <class T, class B>
Var<T, B> matmul(const Var<T, B>& a, const Var<T, B>& b, bool trans_a, bool trans_b) {
  return record("matmul", {a, b}, raw::matmul(a.value(), b.value(), trans_a, trans_b),
                [trans_a, trans_b](Backward<T, B>& c) {
                  detail::matmul_backward(c, c.grad(), trans_a, trans_b);
                });
}

}  // namespace platipus
