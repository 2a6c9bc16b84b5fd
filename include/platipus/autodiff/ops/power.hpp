// pow by a scalar exponent, square and sqrt.
#pragma once

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> square(const Var<T, B>& x) {
  return record("square", {x}, raw::map(UnaryOp::square, x.value()), [](Backward<T, B>& c) {
    // 2 u x in one scale: (u x) 2 to the bit, doubling being exact (short of
    // overflow and of a subnormal u x).
    if (const auto u = c.uniform_grad())
      c.set(0, scale(c.input(0), T(2) * *u));
    else
      c.set(0, scale(mul(c.broadcast_grad(), c.input(0)), T(2)));
  });
}

// d x^p / dx = p x^(p-1).
template <class T, class B>
Var<T, B> pow(const Var<T, B>& x, T p) {
  return record("pow", {x}, raw::map(UnaryOp::pow_scalar, x.value(), p), [p](Backward<T, B>& c) {
    c.set(0, mul(c.grad(), scale(pow(c.input(0), p - T(1)), p)));
  });
}

// d sqrt(x) / dx = 1 / (2 sqrt(x)).
template <class T, class B>
Var<T, B> sqrt(const Var<T, B>& x) {
  return record("sqrt", {x}, raw::map(UnaryOp::sqrt, x.value()),
                [](Backward<T, B>& c) { c.set(0, div(scale(c.grad(), T(0.5)), c.output())); });
}

}  // namespace platipus
