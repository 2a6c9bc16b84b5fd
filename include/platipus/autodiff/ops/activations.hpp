// relu, sigmoid, tanh, softplus.
#pragma once

#include "platipus/autodiff/ops/power.hpp"

namespace platipus {

// g where x > 0, else 0: relu's backward as one op (PyTorch's
// threshold_backward). It is linear in g and has zero derivative in x almost
// everywhere, so its own rule is itself again and the set closes.
template <class T, class B>
Var<T, B> relu_backward(const Var<T, B>& g, const Var<T, B>& x) {
  return record(
      "relu_backward", {g, x},
      raw::map(BinaryOp::relu_backward, g.value(), x.value(), "relu_backward"),
      [](Backward<T, B>& c) {
        if (c.needs(0)) c.set(0, relu_backward(c.grad(), c.input(1)));
      },
      Saved{.inputs = 0b10, .outputs = false});
}

template <class T, class B>
Var<T, B> relu(const Var<T, B>& x) {
  return record(
      "relu", {x}, raw::map(UnaryOp::relu, x.value()),
      [](Backward<T, B>& c) { c.set(0, relu_backward(c.grad(), c.input(0))); }, saves_inputs);
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
  return record("softplus", {x}, raw::map(UnaryOp::softplus, x.value()),
                [](Backward<T, B>& c) { c.set(0, mul(c.grad(), sigmoid(c.input(0)))); });
}

}  // namespace platipus
