// linear(x, w, b) = x w + b: a batched matmul with a bias broadcast along the
// rows, one backend call (raw::linear). Its backward uses the matmul and
// sum_to ops, so it closes under differentiation like matmul.
//
// linear(x, w, b, activation) = activation(x w + b), an MLP's hidden layer,
// as one op and the same one backend call: the rule takes the activation's
// derivative from the output (activation_backward), then linear's. It
// computes the bits of linear followed by the activation with one recorded
// op and one value fewer per layer.
#pragma once

#include "platipus/autodiff/ops/activations.hpp"
#include "platipus/autodiff/ops/matmul.hpp"

namespace platipus {

namespace detail {

// The gradients of x w + b (inputs 0, 1, 2 of a node) given its gradient g.
template <class T, class B>
void linear_backward(Backward<T, B>& c, const Var<T, B>& g) {
  matmul_backward(c, g, false, false, /*bias=*/true);
}

}  // namespace detail

// x [..., N, in], w [batch..., in, out], b [batch..., out].
template <class T, class B>
Var<T, B> linear(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b) {
  return record(
      "linear", {x, w, b}, raw::linear(x.value(), w.value(), b.value()),
      [](Backward<T, B>& c) { detail::linear_backward(c, c.grad()); },
      Saved{.inputs = 0b011, .outputs = false});
}

template <class T, class B>
Var<T, B> linear(const Var<T, B>& x, const Var<T, B>& w, const Var<T, B>& b,
                 Activation activation) {
  if (activation == Activation::none) return linear(x, w, b);
  const UnaryOp op = activation == Activation::relu   ? UnaryOp::relu
                     : activation == Activation::tanh ? UnaryOp::tanh
                                                      : UnaryOp::sigmoid;
  Var<T, B> y = record(
      "linear_activation", {x, w, b}, raw::linear(x.value(), w.value(), b.value(), op),
      [activation](Backward<T, B>& c) {
        if (activation == Activation::relu && c.needs(2) && !GradMode::enabled()) {
          // Nothing to record: ReLU's gradient and the bias's in one call,
          // which also adds the gradient's parts where the sweep still
          // holds them (where a hidden layer's output is read twice).
          const Shape& bias = c.input(2).shape();
          auto d = c.grad_parts().empty()
                       ? raw::relu_bias_backward(c.grad().value(), c.output().value(), bias)
                       : raw::relu_bias_backward(c.grad_parts(), c.grad_parts_negated(),
                                                 c.output().value(), bias);
          if (d) {
            detail::matmul_backward(c, c.tape().constant(std::move(d->first)), false, false);
            c.set(2, c.tape().constant(std::move(d->second)));
            return;
          }
        }
        detail::linear_backward(c, activation_backward(activation, c.grad(), c.output()));
      },
      Saved{.inputs = 0b011, .outputs = true});
  return activation == Activation::relu ? taking_parts(std::move(y)) : y;
}

}  // namespace platipus
