// relu, sigmoid, tanh, softplus, and Activation: the ones a layer applies.
#pragma once

#include "platipus/autodiff/ops/power.hpp"

namespace platipus {

namespace detail {
// y, its node marked as one whose rule routes the gradient by input `by`
// (Node::routed_by): where that gradient arrives in parts, a sweep that
// records nothing adds and routes them in one add_n call (issue 38).
template <class T, class B>
Var<T, B> routed_by(Var<T, B> y, std::uint32_t by) {
  if (auto* node = y.record()->producer) node->routed_by = by;
  return y;
}
}  // namespace detail

// g where x > 0, else 0: relu's backward as one op (PyTorch's
// threshold_backward). It is linear in g and has zero derivative in x almost
// everywhere, so its own rule is itself again and the set closes.
template <class T, class B>
Var<T, B> relu_backward(const Var<T, B>& g, const Var<T, B>& x) {
  return detail::routed_by(
      record(
          "relu_backward", {g, x},
          raw::map(BinaryOp::relu_backward, g.value(), x.value(), "relu_backward"),
          [](Backward<T, B>& c) {
            if (c.needs(0)) c.set(0, relu_backward(c.grad(), c.input(1)));
          },
          Saved{.inputs = 0b10, .outputs = false}),
      1);
}

template <class T, class B>
Var<T, B> relu(const Var<T, B>& x) {
  return detail::routed_by(
      record(
          "relu", {x}, raw::map(UnaryOp::relu, x.value()),
          [](Backward<T, B>& c) { c.set(0, relu_backward(c.grad(), c.input(0))); }, saves_inputs),
      0);
}

// The activations a layer applies (nn::Sequential, and linear's fused form
// in autodiff/ops/linear.hpp); `none` is the identity.
enum class Activation { none, relu, tanh, sigmoid };

// The gradient g through y = activation(z), written with the output y alone:
// relu's mask y > 0 is z > 0's, sigmoid' = y (1 - y), tanh' = 1 - y^2.
template <class T, class B>
Var<T, B> activation_backward(Activation a, const Var<T, B>& g, const Var<T, B>& y) {
  switch (a) {
    case Activation::relu:
      return relu_backward(g, y);
    case Activation::sigmoid:
      return mul(g, sub(y, square(y)));
    case Activation::tanh:
      return mul(g, shift(neg(square(y)), T(1)));
    case Activation::none:
      break;
  }
  return g;
}

template <class T, class B>
Var<T, B> sigmoid(const Var<T, B>& x) {
  return record("sigmoid", {x}, raw::map(UnaryOp::sigmoid, x.value()), [](Backward<T, B>& c) {
    c.set(0, activation_backward(Activation::sigmoid, c.grad(), c.output()));
  });
}

template <class T, class B>
Var<T, B> tanh(const Var<T, B>& x) {
  return record("tanh", {x}, raw::map(UnaryOp::tanh, x.value()), [](Backward<T, B>& c) {
    c.set(0, activation_backward(Activation::tanh, c.grad(), c.output()));
  });
}

// softplus(x) = log(1 + e^x); softplus' = sigmoid.
template <class T, class B>
Var<T, B> softplus(const Var<T, B>& x) {
  return record("softplus", {x}, raw::map(UnaryOp::softplus, x.value()),
                [](Backward<T, B>& c) { c.set(0, mul(c.grad(), sigmoid(c.input(0)))); });
}

template <class T, class B>
Var<T, B> activate(Activation a, const Var<T, B>& x) {
  switch (a) {
    case Activation::relu:
      return relu(x);
    case Activation::tanh:
      return tanh(x);
    case Activation::sigmoid:
      return sigmoid(x);
    case Activation::none:
      break;
  }
  return x;
}

}  // namespace platipus
