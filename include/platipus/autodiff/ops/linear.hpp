// linear(x, w, b) = x w + b: a batched matmul with a bias broadcast along the
// rows, computed by one GEMM over the bias (beta = 1). Its backward uses the
// matmul and sum_to ops, so it closes under differentiation like matmul.
#pragma once

#include "platipus/autodiff/ops/matmul.hpp"

namespace platipus {

// x [..., N, in], w [batch..., in, out], b [batch..., out].
template <class T, class B>
Var<T, B> linear(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b) {
  return record("linear", {x, w, b}, raw::linear(x.value(), w.value(), b.value()),
                [](Backward<T, B>& c) {
                  detail::matmul_backward(c, false, false);
                  if (c.needs(2)) {
                    const auto& b = c.input(2);
                    Shape row = b.shape().take_front(b.rank() - 1);
                    row.push_back(1);
                    row.push_back(b.dim(-1));
                    c.set(2, reshape(sum_to(c.grad(), row), b.shape()));
                  }
                });
}

}  // namespace platipus
