// exp and log.
#pragma once

#include "platipus/autodiff/ops/arithmetic.hpp"

namespace platipus {

template <class T, class B>
Var<T, B> exp(const Var<T, B>& x) {
  return record("exp", {x}, raw::map(UnaryOp::exp, x.value()),
                [](Backward<T, B>& c) { c.set(0, mul(c.grad(), c.output())); });
}

namespace detail {

// exp_scaled's rule for input i of c, given the product p = h y of its
// output's gradient and value: s p, with s = -1 passing the sign on as
// neg's rule does.
template <class T, class B>
void set_exp_scaled_grad(Backward<T, B>& c, std::size_t i, const Var<T, B>& p, T s) {
  if (s == T(-1))
    c.set_negated(i, p);
  else
    c.set(i, scale(p, s));
}

}  // namespace detail

// exp(s x) in one kernel where scale (or neg) and exp were two: a
// Gaussian's standard deviation exp(log v / 2), and KL's v_q / v_p =
// exp(-log(v_p / v_q)) (issue 38). The rule is exp's then scale's, so value
// and gradient have the bits of exp(scale(x, s)); s = -1 passes the sign on as
// neg's rule does, with no kernel where the gradient has company.
template <class T, class B>
Var<T, B> exp_scaled(const Var<T, B>& x, T s) {
  return record(
      "exp_scaled", {x}, raw::map(UnaryOp::exp_scaled, x.value(), s),
      [s](Backward<T, B>& c) { detail::set_exp_scaled_grad(c, 0, mul(c.grad(), c.output()), s); });
}

template <class T, class B>
Var<T, B> log(const Var<T, B>& x) {
  return record("log", {x}, raw::map(UnaryOp::log, x.value()),
                [](Backward<T, B>& c) { c.set(0, div(c.grad(), c.input(0))); });
}

}  // namespace platipus
