// logsumexp, softmax and log_softmax along an axis.
#pragma once

#include "platipus/autodiff/ops/exp_log.hpp"
#include "platipus/autodiff/ops/reshape.hpp"

namespace platipus {

// log sum_i exp(x_i) along `axis`, evaluated stably as m + log sum exp(x - m)
// with m the maximum. d/dx = exp(x - lse) = softmax(x).
template <class T, class B>
Var<T, B> logsumexp(const Var<T, B>& x, int axis, bool keep_dims = false) {
  const int a = x.shape().normalize_axis(axis, "logsumexp");
  const std::array<int, 1> axes{a};
  const Shape kept = raw::reduced_shape(x.shape(), axes, "logsumexp");
  const Tensor<T, B> m = raw::reduce_to(ReduceOp::max, x.value(), kept);
  const Tensor<T, B> sum_exp =
      raw::sum_to(raw::map(UnaryOp::exp, raw::map(BinaryOp::sub, x.value(), m, "logsumexp")), kept);
  Tensor<T, B> lse = raw::map(BinaryOp::add, raw::map(UnaryOp::log, sum_exp), m, "logsumexp");
  const Shape out_shape = keep_dims ? kept : raw::squeezed_shape(x.shape(), axes, "logsumexp");
  return record("logsumexp", {x}, std::move(lse).reshaped(out_shape), [kept](Backward<T, B>& c) {
    const auto g = reshape(c.grad(), kept), lse_kept = reshape(c.output(), kept);
    c.set(0, mul(g, exp(sub(c.input(0), lse_kept))));
  });
}

template <class T, class B>
Var<T, B> log_softmax(const Var<T, B>& x, int axis = -1) {
  return sub(x, logsumexp(x, axis, true));
}

template <class T, class B>
Var<T, B> softmax(const Var<T, B>& x, int axis = -1) {
  return exp(log_softmax(x, axis));
}

}  // namespace platipus
