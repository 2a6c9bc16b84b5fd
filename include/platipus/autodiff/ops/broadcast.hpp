// expand (broadcast to a shape) and sum_to (sum down to a shape): each is
// the other's adjoint, which closes the pair under differentiation.
#pragma once

#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/layout.hpp"
#include "platipus/tensor/reduce.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> sum_to(const Var<T, B>& x, const Shape& shape);

namespace detail {
// A reduction's gradient g for its input of shape `to`, unexpanded: at to's
// rank with the reduced axes of size 1 (a view). grad broadcasts it where it
// lands, so that when it meets another gradient of the same value the sum
// broadcasts it, and the expand's copy is only made for a value that
// receives nothing else.
template <class T, class B>
Var<T, B> unexpanded(const Var<T, B>& g, const Shape& to) {
  Shape kept;
  for (int i = 0; i < to.rank() - g.rank(); ++i) kept.push_back(1);
  for (auto d : g.shape().dims()) kept.push_back(d);
  return reshape(g, kept);
}
}  // namespace detail

// Broadcasts x to `shape` (NumPy rules); x itself when the shapes agree.
template <class T, class B>
Var<T, B> expand(const Var<T, B>& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  return record(
      "expand", {x}, raw::expand(x.value(), shape),
      [](Backward<T, B>& c) { c.set(0, sum_to(c.grad(), c.input(0).shape())); }, saves_nothing);
}

namespace detail {
// The sum_to op of x over its sum, computed by the caller. Its rule gives
// the gradient unexpanded (detail::unexpanded).
template <class T, class B>
Var<T, B> record_sum_to(const Var<T, B>& x, Tensor<T, B> sum) {
  return record(
      "sum_to", {x}, std::move(sum),
      [](Backward<T, B>& c) {
        if (const auto u = c.uniform_grad()) {
          c.set_uniform(0, *u);
        } else {
          const auto [g, negated] = c.signed_broadcast_grad();
          c.set(0, detail::unexpanded(g, c.input(0).shape()), negated);
        }
      },
      saves_nothing);
}
}  // namespace detail

// Sums x down to `shape`, which must broadcast to x's shape: the gradient of
// a broadcast. x itself when the shapes agree.
template <class T, class B>
Var<T, B> sum_to(const Var<T, B>& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  return detail::record_sum_to(x, raw::sum_to(x.value(), shape));
}

}  // namespace platipus
