// add, sub, mul, div (with NumPy broadcasting), neg, the scalar forms
// scale (x * s), shift (x + s) and div (x / s), the fused add_scaled (a + s b), and the
// operators that spell them.
#pragma once

#include <type_traits>

#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/tensor/elementwise.hpp"

namespace platipus {

template <class S>
concept Scalar = std::is_arithmetic_v<S>;

namespace detail {
// Input i's gradient g, or -g where negated, summed down to the input's
// shape: the sign passed on where there is nothing to sum (Backward::set, so
// that no kernel negates it), else taken before the sum, as sum_to(-g), whose
// bits -sum_to(g) lacks at zero (opposite terms add to +0, negated or not).
template <class T, class B>
void set_sum_to(Backward<T, B>& c, std::size_t i, const Var<T, B>& g, bool negated) {
  if (g.shape() == c.input(i).shape())
    c.set(i, g, negated);
  else
    c.set(i, sum_to(negated ? neg(g) : g, c.input(i).shape()));
}

// Input i's gradient where the output's is u in every element: u where
// there is nothing to sum, else the sum of u's tensor. Returns false, having
// set nothing, where the output's gradient is a tensor.
template <class T, class B>
bool set_uniform_sum_to(Backward<T, B>& c, std::size_t i, bool negated) {
  const auto u = c.uniform_grad();
  if (!u) return false;
  if (c.input(i).shape() == c.output().shape())
    c.set_uniform(i, negated ? -*u : *u);
  else
    set_sum_to(c, i, c.grad(), negated);
  return true;
}

// Input 0's gradient where the output is s times it (scale's, and ops that
// are s times something of their input's): s times the output's gradient,
// on the host where that is known there, and added and scaled by one call
// where the sweep still holds it in parts for a node that takes them
// (raw::scaled_add_n, the bits of add_n then scale): MAML's inner gradient
// of its loss, which three ops of the layer's recorded backward read
// (issue 38).
template <class T, class B>
void set_scaled(Backward<T, B>& c, T s) {
  if (const auto u = c.uniform_grad())
    c.set_uniform(0, *u * s);
  else if (const auto parts = c.grad_parts(); !parts.empty())
    c.set(0, c.tape().constant(raw::scaled_add_n(parts, c.grad_parts_negated(), s)));
  else
    c.set(0, scale(c.broadcast_grad(), s));
}
}  // namespace detail

template <class T, class B>
Var<T, B> neg(const Var<T, B>& x) {
  return record(
      "neg", {x}, raw::map(UnaryOp::neg, x.value()),
      [](Backward<T, B>& c) {
        if (const auto u = c.uniform_grad())
          c.set_uniform(0, -*u);
        else
          c.set_negated(0, c.broadcast_grad());
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> scale(const Var<T, B>& x, T s) {
  return taking_parts(record(
      "scale", {x}, raw::map(UnaryOp::scale, x.value(), s),
      [s](Backward<T, B>& c) { detail::set_scaled(c, s); }, saves_nothing));
}

template <class T, class B>
Var<T, B> shift(const Var<T, B>& x, T s) {
  return record(
      "shift", {x}, raw::map(UnaryOp::add_scalar, x.value(), s),
      [](Backward<T, B>& c) {
        if (const auto u = c.uniform_grad())
          c.set_uniform(0, *u);
        else
          c.set(0, c.broadcast_grad());
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> add(const Var<T, B>& a, const Var<T, B>& b) {
  return record(
      "add", {a, b}, raw::map(BinaryOp::add, a.value(), b.value(), "add"),
      [](Backward<T, B>& c) {
        for (std::size_t i = 0; i < 2; ++i)
          if (c.needs(i) && !detail::set_uniform_sum_to(c, i, false)) {
            const auto [g, negated] = c.signed_grad();
            detail::set_sum_to(c, i, g, negated);
          }
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> sub(const Var<T, B>& a, const Var<T, B>& b) {
  return record(
      "sub", {a, b}, raw::map(BinaryOp::sub, a.value(), b.value(), "sub"),
      [](Backward<T, B>& c) {
        for (std::size_t i = 0; i < 2; ++i)
          if (c.needs(i) && !detail::set_uniform_sum_to(c, i, i == 1)) {
            const auto [g, negated] = c.signed_grad();
            detail::set_sum_to(c, i, g, negated != (i == 1));
          }
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> mul(const Var<T, B>& a, const Var<T, B>& b) {
  return record(
      "mul", {a, b}, raw::map(BinaryOp::mul, a.value(), b.value(), "mul"),
      [](Backward<T, B>& c) {
        for (std::size_t i = 0; i < 2; ++i) {
          if (!c.needs(i)) continue;
          // u b has the bits of the tensor u times b: no kernel fills u.
          const Var<T, B> other = c.input(1 - i);
          if (const auto u = c.uniform_grad(); u && other.shape() == c.output().shape()) {
            detail::set_sum_to(c, i, scale(other, *u), false);
          } else {
            const auto [g, negated] = c.signed_grad();
            detail::set_sum_to(c, i, mul(g, other), negated);
          }
        }
      },
      saves_inputs);
}

// d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
template <class T, class B>
Var<T, B> div(const Var<T, B>& a, const Var<T, B>& b) {
  return record("div", {a, b}, raw::map(BinaryOp::div, a.value(), b.value(), "div"),
                [](Backward<T, B>& c) {
                  const auto [g, negated] = c.signed_grad();
                  if (c.needs(0)) detail::set_sum_to(c, 0, div(g, c.input(1)), negated);
                  if (c.needs(1))
                    detail::set_sum_to(c, 1, div(mul(g, c.output()), c.input(1)), !negated);
                });
}

// x / s in every element, rounded once: the bits of div(x, b) with b a
// tensor of s, without the tensor (`x / s` is x (1 / s), rounded twice).
template <class T, class B>
Var<T, B> div(const Var<T, B>& x, T s) {
  return record(
      "div_scalar", {x}, raw::map(UnaryOp::div_scalar, x.value(), s),
      [s](Backward<T, B>& c) {
        if (const auto u = c.uniform_grad()) {
          c.set_uniform(0, *u / s);
        } else {  // (-g) / s is -(g / s) to the bit
          const auto [g, negated] = c.signed_broadcast_grad();
          c.set(0, div(g, s), negated);
        }
      },
      saves_nothing);
}

// a + s * b in one pass: the fused form of an SGD step (phi - alpha * g).
template <class T, class B>
Var<T, B> add_scaled(const Var<T, B>& a, const Var<T, B>& b, T s) {
  check(a.shape() == b.shape(), "add_scaled", "shapes {} and {} differ", a.shape(), b.shape());
  return record(
      "add_scaled", {a, b}, raw::axpy(a.value(), b.value(), s),
      [s](Backward<T, B>& c) {
        if (c.needs(0)) c.set(0, c.grad());
        if (c.needs(1)) c.set(1, scale(c.grad(), s));
      },
      saves_nothing);
}

template <class T, class B>
Var<T, B> operator+(const Var<T, B>& a, const Var<T, B>& b) {
  return add(a, b);
}
template <class T, class B>
Var<T, B> operator-(const Var<T, B>& a, const Var<T, B>& b) {
  return sub(a, b);
}
template <class T, class B>
Var<T, B> operator*(const Var<T, B>& a, const Var<T, B>& b) {
  return mul(a, b);
}
template <class T, class B>
Var<T, B> operator/(const Var<T, B>& a, const Var<T, B>& b) {
  return div(a, b);
}
template <class T, class B>
Var<T, B> operator-(const Var<T, B>& x) {
  return neg(x);
}

template <class T, class B, Scalar S>
Var<T, B> operator*(const Var<T, B>& x, S s) {
  return scale(x, static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator*(S s, const Var<T, B>& x) {
  return scale(x, static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator/(const Var<T, B>& x, S s) {
  return scale(x, T(1) / static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator+(const Var<T, B>& x, S s) {
  return shift(x, static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator+(S s, const Var<T, B>& x) {
  return shift(x, static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator-(const Var<T, B>& x, S s) {
  return shift(x, -static_cast<T>(s));
}
template <class T, class B, Scalar S>
Var<T, B> operator-(S s, const Var<T, B>& x) {
  return shift(neg(x), static_cast<T>(s));
}

}  // namespace platipus
