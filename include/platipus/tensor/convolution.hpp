// Raw 2-D convolution, its two adjoints and max pooling, with shapes
// checked and the backend's layouts computed here. Images are
// x [..., N, C, H, W] and filters either [C_out, C, k, k], shared by every
// image, or [..., C_out, C, k, k] with x's leading axes: one filter bank per
// task, a grouped convolution in one backend call.
#pragma once

#include <string_view>
#include <utility>

#include "platipus/tensor/index.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus {

// The window of a 2-D sliding operation: a square kernel, its stride and the
// zero padding on each side of both spatial axes.
struct Window {
  std::int64_t kernel = 3, stride = 1, padding = 0;

  // The output extent along an axis of extent n (with padding), checked.
  std::int64_t output(std::int64_t n, std::string_view who) const {
    check(kernel > 0 && stride > 0 && padding >= 0, who,
          "kernel {} and stride {} must be positive and padding {} non-negative", kernel, stride,
          padding);
    check(n + 2 * padding >= kernel, who,
          "a {}-wide kernel does not fit an axis of {} (padding {})", kernel, n, padding);
    return (n + 2 * padding - kernel) / stride + 1;
  }
};

namespace raw {

// The layout of conv2d(x, w) for the shapes of x and w, checked; `who`
// names the op in messages.
inline ConvLayout conv_layout(const Shape& x, const Shape& w, const Window& window,
                              std::string_view who) {
  check(x.rank() >= 4 && w.rank() >= 4, who,
        "the input must be [..., N, C, H, W] and the weights [..., C_out, C, k, k], got {} and {}",
        x, w);
  ConvLayout l;
  l.c_out = w.dim(-4);
  l.c = w.dim(-3);
  l.kernel = w.dim(-1);
  check(w.dim(-2) == l.kernel && l.kernel == window.kernel, who,
        "the weights {} must be square kernels of the window's size {}", w, window.kernel);
  check(x.dim(-3) == l.c, who, "the input {} has {} channels, the weights {} expect {}", x,
        x.dim(-3), w, l.c);
  l.h = x.dim(-2);
  l.w = x.dim(-1);
  l.stride = window.stride;
  l.padding = window.padding;
  l.ho = window.output(l.h, who);
  l.wo = window.output(l.w, who);
  const Shape filter_groups = w.take_front(w.rank() - 4);
  if (filter_groups.numel() == 1) {  // shared filters: every image is one group's
    l.n = x.take_front(x.rank() - 3).numel();
  } else {
    check(x.take_front(x.rank() - 4) == filter_groups, who,
          "per-task weights {} need the input's leading axes to match theirs, got {}", w, x);
    l.groups = filter_groups.numel();
    l.n = x.dim(-4);
  }
  return l;
}

inline Shape conv_output_shape(const Shape& x, const ConvLayout& l) {
  Shape y = x.take_front(x.rank() - 3);
  for (auto d : {l.c_out, l.ho, l.wo}) y.push_back(d);
  return y;
}

// y = w * x (+ bias): [..., N, C_out, Ho, Wo], the bias null or one per
// filter bank, [..., C_out] with w's leading axes.
template <class T, class B>
Tensor<T, B> conv2d(const Tensor<T, B>& x, const Tensor<T, B>& w, const Window& window,
                    const Tensor<T, B>* bias = nullptr) {
  constexpr std::string_view who = "conv2d";
  const ConvLayout l = conv_layout(x.shape(), w.shape(), window, who);
  if (bias) {
    Shape banks = w.shape().take_front(w.rank() - 4);
    banks.push_back(l.c_out);
    check(bias->shape() == banks, who, "the bias {} must be [..., C_out] like the weights {}",
          bias->shape(), w.shape());
  }
  Tensor<T, B> y(conv_output_shape(x.shape(), l));
  if (y.numel()) B::conv2d(l, x.data(), w.data(), bias ? bias->data() : nullptr, y.data());
  return y;
}

namespace detail {
inline ConvLayout adjoint_layout(const Shape& x, const Shape& w, const Shape& dy,
                                 const Window& window, std::string_view who) {
  const ConvLayout l = conv_layout(x, w, window, who);
  check(dy == conv_output_shape(x, l), who,
        "the output gradient {} does not match the convolution of {} by {} (output {})", dy, x, w,
        conv_output_shape(x, l));
  return l;
}
}  // namespace detail

// The gradient of <dy, conv2d(x, w)> in x, for an input of shape x_shape: a
// transposed convolution.
template <class T, class B>
Tensor<T, B> conv2d_input_grad(const Tensor<T, B>& dy, const Tensor<T, B>& w, const Shape& x_shape,
                               const Window& window) {
  const ConvLayout l =
      detail::adjoint_layout(x_shape, w.shape(), dy.shape(), window, "conv2d_input_grad");
  Tensor<T, B> dx(x_shape);
  if (dx.numel()) B::conv2d_input_grad(l, dy.data(), w.data(), dx.data());
  return dx;
}

// The gradient of <dy, conv2d(x, w)> in w, for filters of shape w_shape
// (shared filters get the sum over every image).
template <class T, class B>
Tensor<T, B> conv2d_weight_grad(const Tensor<T, B>& x, const Tensor<T, B>& dy, const Shape& w_shape,
                                const Window& window) {
  const ConvLayout l =
      detail::adjoint_layout(x.shape(), w_shape, dy.shape(), window, "conv2d_weight_grad");
  Tensor<T, B> dw(w_shape);
  if (dw.numel()) B::conv2d_weight_grad(l, x.data(), dy.data(), dw.data());
  return dw;
}

namespace detail {
// Max pooling x [..., C, H, W] by `window` (no padding), a ReLU after it
// where `relu`.
inline PoolLayout pool_layout(const Shape& x, const Window& window, bool relu) {
  constexpr std::string_view who = "max_pool2d";
  check(x.rank() >= 3, who, "the input must be [..., C, H, W], got {}", x);
  check(window.padding == 0, who, "padding is not supported, got {}", window.padding);
  PoolLayout l{.planes = x.take_front(x.rank() - 2).numel(),
               .h = x[x.rank() - 2],
               .w = x[x.rank() - 1],
               .kernel = window.kernel,
               .stride = window.stride,
               .relu = relu};
  l.ho = window.output(l.h, who);
  l.wo = window.output(l.w, who);
  return l;
}
}  // namespace detail

// The maximum of each k x k window of x [..., C, H, W] (no padding), and the
// position of each maximum in x as a flat array; with `relu`, relu of each
// maximum (the same call).
template <class T, class B>
std::pair<Tensor<T, B>, Index<B>> max_pool2d(const Tensor<T, B>& x, const Window& window,
                                             bool relu = false) {
  const PoolLayout l = detail::pool_layout(x.shape(), window, relu);
  Shape out = x.shape().take_front(x.rank() - 2);
  out.push_back(l.ho);
  out.push_back(l.wo);
  std::pair<Tensor<T, B>, Index<B>> result{Tensor<T, B>(out), Index<B>(Shape{out.numel()})};
  if (out.numel()) B::max_pool2d(l, x.data(), result.first.data(), result.second.data());
  return result;
}

// The gradient of max_pool2d(x, window, relu) [x_shape] from g = dL/dy, y
// and the positions: g (relu_backward(g, y) where relu) added at each
// maximum onto zeros, in one call.
template <class T, class B>
Tensor<T, B> max_pool2d_backward(const Tensor<T, B>& g, const Tensor<T, B>& y,
                                 const Index<B>& positions, const Shape& x_shape,
                                 const Window& window, bool relu) {
  const PoolLayout l = detail::pool_layout(x_shape, window, relu);
  check(g.shape() == y.shape() && g.numel() == l.planes * l.ho * l.wo &&
            positions.numel() == g.numel(),
        "max_pool2d_backward", "gradient {}, output {} and {} positions do not pool {}", g.shape(),
        y.shape(), positions.numel(), x_shape);
  Tensor<T, B> dx(x_shape);
  if (dx.numel()) B::max_pool2d_backward(l, g.data(), y.data(), positions.data(), dx.data());
  return dx;
}

// The gradient of max_pool2d_backward(g, y, ...) with respect to g from h
// = dL/dx [x_shape]: h at each maximum (relu_backward(h there, y) where
// relu), in one call.
template <class T, class B>
Tensor<T, B> max_pool2d_double_backward(const Tensor<T, B>& h, const Tensor<T, B>& y,
                                        const Index<B>& positions, const Window& window,
                                        bool relu) {
  const PoolLayout l = detail::pool_layout(h.shape(), window, relu);
  check(y.numel() == l.planes * l.ho * l.wo && positions.numel() == y.numel(),
        "max_pool2d_double_backward", "output {} and {} positions do not pool {}", y.shape(),
        positions.numel(), h.shape());
  Tensor<T, B> dg(y.shape());
  if (dg.numel()) B::max_pool2d_double_backward(l, h.data(), y.data(), positions.data(), dg.data());
  return dg;
}

}  // namespace raw
}  // namespace platipus
