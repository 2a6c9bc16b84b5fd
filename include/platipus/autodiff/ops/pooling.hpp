// max_pool2d on the backend's pooling, and its companions take and put_add:
// the maximum of each window is x taken at the positions the forward pass
// found, so the backward rule scatters the gradient to those positions
// (put_add) and put_add's backward gathers (take). The pair is closed under
// differentiation, so max pooling is differentiable to any order. A ReLU
// after the pooling can be the same op (conv4's blocks).
#pragma once

#include <memory>

#include "platipus/autodiff/ops/activations.hpp"
#include "platipus/autodiff/record.hpp"
#include "platipus/tensor/convolution.hpp"

namespace platipus {

// The positions of a pooling's maxima in its input, shared by every node
// that gathers or scatters through them.
template <class B>
using Positions = std::shared_ptr<const Index<B>>;

template <class T, class B>
Var<T, B> put_add(const Var<T, B>& g, const Positions<B>& positions, const Shape& shape);

namespace detail {
// x read as a flat array of source_axis elements, gathered (or scattered) at
// count positions that the backend produced, so in range by construction:
// no host check.
inline IndexLayout flat_positions(std::int64_t source, std::int64_t count) {
  return {.outer = 1, .inner = 1, .source_axis = source, .count = count};
}
}  // namespace detail

// y [shape] with y.flat[i] = x.flat[positions[i]].
template <class T, class B>
Var<T, B> take(const Var<T, B>& x, const Positions<B>& positions, const Shape& shape) {
  check(shape.numel() == positions->numel(), "take", "{} positions for an output of shape {}",
        positions->numel(), shape);
  Tensor<T, B> y(shape);
  if (y.numel())
    B::gather(x.value().data(), positions->data(), y.data(),
              detail::flat_positions(x.numel(), y.numel()));
  return record(
      "take", {x}, std::move(y),
      [positions](Backward<T, B>& c) {
        c.set(0, put_add(c.grad(), positions, c.input(0).shape()));
      },
      saves_nothing);
}

// Zeros of `shape`, with g.flat[i] added at positions[i].
template <class T, class B>
Var<T, B> put_add(const Var<T, B>& g, const Positions<B>& positions, const Shape& shape) {
  check(g.numel() == positions->numel(), "put_add", "{} positions for a gradient of shape {}",
        positions->numel(), g.shape());
  Tensor<T, B> y(shape);  // the backend writes it whole
  if (y.numel())
    B::scatter_add(g.value().data(), positions->data(), y.data(),
                   detail::flat_positions(y.numel(), g.numel()));
  return record(
      "put_add", {g}, std::move(y),
      [positions](Backward<T, B>& c) { c.set(0, take(c.grad(), positions, c.input(0).shape())); },
      saves_nothing);
}

// The maximum over each k x k window (no padding): x [..., C, H, W] ->
// [..., C, Ho, Wo]. The gradient goes to the window's largest input; of
// equal ones, to the first in row-major order.
template <class T, class B>
Var<T, B> max_pool2d(const Var<T, B>& x, const Window& window) {
  auto [y, positions] = raw::max_pool2d(x.value(), window);
  Positions<B> shared = std::make_shared<const Index<B>>(std::move(positions));
  return record(
      "max_pool2d", {x}, std::move(y),
      [shared](Backward<T, B>& c) { c.set(0, put_add(c.grad(), shared, c.input(0).shape())); },
      saves_nothing);
}

// The gradient of relu(max_pool2d(x, window)) [x_shape] from g at its
// output y, as an op: relu_backward(g, y) added at the maxima onto zeros, one
// node and one backend call (raw::max_pool2d_backward) where relu_backward
// and put_add were two. Its rule, to g, is theirs: h at the maxima masked
// by y > 0, one call (raw::max_pool2d_double_backward) where nothing
// records, take and relu_backward where a sweep records. y is read for its
// mask and takes no gradient (as relu_backward's second input).
template <class T, class B>
Var<T, B> max_pool2d_relu_backward(const Var<T, B>& g, const Var<T, B>& y,
                                   const Positions<B>& positions, const Shape& x_shape,
                                   const Window& window) {
  return record(
      "max_pool2d_relu_backward", {g, y},
      raw::max_pool2d_backward(g.value(), y.value(), *positions, x_shape, window, true),
      [positions, window](Backward<T, B>& c) {
        if (!c.needs(0)) return;
        if (!GradMode::enabled()) {
          c.set(0, c.tape().constant(raw::max_pool2d_double_backward(
                       c.grad().value(), c.input(1).value(), *positions, window, true)));
          return;
        }
        c.set(0, relu_backward(take(c.grad(), positions, c.input(0).shape()), c.input(1)));
      },
      Saved{.inputs = 0b10, .outputs = false});
}

// relu(max_pool2d(x, window)), conv4's block end, as one op and one backend
// call (the pooling's, raw::max_pool2d with relu) where the pooling and the
// ReLU were two. Its gradient is max_pool2d_relu_backward: one call where
// nothing records, one recorded node where a sweep records (relu_backward
// and put_add were two of each). Values and derivatives of every order have
// the composite's bits: the mask is read from the output y where ReLU's
// rule read the pooled x, and y > 0 exactly where x > 0. Other activations
// are the composite's two ops.
template <class T, class B>
Var<T, B> max_pool2d(const Var<T, B>& x, const Window& window, Activation activation) {
  if (activation != Activation::relu) return activate(activation, max_pool2d(x, window));
  auto [y, positions] = raw::max_pool2d(x.value(), window, true);
  Positions<B> shared = std::make_shared<const Index<B>>(std::move(positions));
  return record(
      "max_pool2d_relu", {x}, std::move(y),
      [shared, window](Backward<T, B>& c) {
        if (!GradMode::enabled()) {
          c.set(0, c.tape().constant(raw::max_pool2d_backward(c.grad().value(), c.output().value(),
                                                              *shared, c.input(0).shape(), window,
                                                              true)));
          return;
        }
        c.set(0,
              max_pool2d_relu_backward(c.grad(), c.output(), shared, c.input(0).shape(), window));
      },
      Saved{.inputs = 0, .outputs = true});
}

}  // namespace platipus
