// where(mask, a, b): a where the constant 0/1 mask is set, b elsewhere, with
// broadcasting. Masks come from comparisons and carry no gradient.
#pragma once

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

// A constant 0/1 mask on a's tape: 1 where a > b.
template <class T, class B>
Var<T, B> greater(const Var<T, B>& a, const Var<T, B>& b) {
  return a.tape().constant(raw::map(BinaryOp::greater, a.value(), b.value(), "greater"));
}

template <class T, class B>
Var<T, B> where(const Var<T, B>& mask, const Var<T, B>& a, const Var<T, B>& b) {
  check(!mask.requires_grad(), "where", "the mask must be a constant (it carries no gradient)");
  const Shape shape =
      broadcast_shapes(broadcast_shapes(mask.shape(), a.shape(), "where"), b.shape(), "where");
  auto selected = raw::select(raw::expand(mask.value(), shape), raw::expand(a.value(), shape),
                              raw::expand(b.value(), shape));
  // The backward routes g by mask-multiplication: g * m to a, g * (1 - m) to b.
  return record("where", {mask, a, b}, std::move(selected), [](Backward<T, B>& c) {
    const auto m = c.input(0);
    if (c.needs(1)) c.set(1, sum_to(mul(c.grad(), m), c.input(1).shape()));
    if (c.needs(2)) c.set(2, sum_to(sub(c.grad(), mul(c.grad(), m)), c.input(2).shape()));
  });
}

}  // namespace platipus
