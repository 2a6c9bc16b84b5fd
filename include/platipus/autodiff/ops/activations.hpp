// relu, sigmoid, tanh, softplus.
#pragma once

#include "platipus/autodiff/ops/power.hpp"

namespace platipus {

// A constant 0/1 mask on x's tape: 1 where x > threshold. Masks carry no
// gradient (the derivative of a step is zero almost everywhere).
template <class T, class B>
Var<T, B> greater_mask(const Var<T, B>& x, T threshold = T(0)) {
  return x.tape().constant(raw::map(UnaryOp::greater_scalar, x.value(), threshold));
}

// relu'(x) = [x > 0]; its derivative in turn is zero, so the mask is a constant.
template <class T, class B>
Var<T, B> relu(const Var<T, B>& x) {
  return record("relu", {x}, raw::map(UnaryOp::relu, x.value()), [](Backward<T, B>& c) {
    c.set(0, mul(c.grad(), greater_mask(c.input(0))));
  });
}

// sigmoid' = s (1 - s), written with the output s.
template <class T, class B>
Var<T, B> sigmoid(const Var<T, B>& x) {
  return record("sigmoid", {x}, raw::map(UnaryOp::sigmoid, x.value()), [](Backward<T, B>& c) {
    const auto s = c.output();
    c.set(0, mul(c.grad(), sub(s, square(s))));
  });
}

// tanh' = 1 - t^2, written with the output t.
template <class T, class B>
Var<T, B> tanh(const Var<T, B>& x) {
  return record("tanh", {x}, raw::map(UnaryOp::tanh, x.value()), [](Backward<T, B>& c) {
    c.set(0, mul(c.grad(), shift(neg(square(c.output())), T(1))));
  });
}

// softplus(x) = log(1 + e^x); softplus' = sigmoid.
template <class T, class B>
Var<T, B> softplus(const Var<T, B>& x) {
  return record("softplus", {x}, raw::map(UnaryOp::softplus, x.value()), [](Backward<T, B>& c) {
    c.set(0, mul(c.grad(), sigmoid(c.input(0))));
  });
}

}  // namespace platipus
